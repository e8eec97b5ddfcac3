package redisstore

import (
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/redistest"
)

// TestScriptRemembersWindow: a check that the script evaluates (several
// limit rules, a rule with a ban) sends each counter whose window the Store
// remembers in a known-window form, INCRBY alone ("U", "V"), and completes
// what that form leaves to the client: a key made anew gets its window, an
// op handed back (a fraction there, a ban on) is evaluated again in the full
// form with the ops after it, and the outcomes are the full form's.
func TestScriptRemembersWindow(t *testing.T) {
	forEachDialTarget(t, func(t *testing.T, url string, c redis.UniversalClient) {
		d := &recordingClient{}
		s, k := recordedStoreOn(t, url, d), newKeyer(t)
		// One hash tag: one script call on a Cluster too (in different
		// slots each rule would be a stage of its own, in the plain form).
		op := func(name string) ratelimit.Op {
			return ratelimit.Op{Key: string(k) + name + "{" + string(k) + "}", Limit: 3, Cost: 1, Period: time.Minute, Terminal: true}
		}
		ops := []ratelimit.Op{op("a"), op("b"), op("c")}
		check := func(step, codes string, ws ...want) {
			t.Helper()
			expectOutcomes(t, step, eval(t, s, check, ops...), ws...)
			if got := d.takeCodes(); got != codes {
				t.Fatalf("%s: sent the codes %q, want %q", step, got, codes)
			}
		}

		check("first", "t t t", ok(1, time.Minute), ok(1, time.Minute), ok(1, time.Minute))
		check("second", "U U U", ok(2, time.Minute), ok(2, time.Minute), ok(2, time.Minute))

		// Deleted behind the Store's back: INCRBY makes the key anew,
		// without a TTL, and the Store starts its window.
		if err := c.Del(ctx, ops[0].Key).Err(); err != nil {
			t.Fatal(err)
		}
		d.take()
		check("after a foreign delete", "U U U", ok(1, time.Minute), ok(3, time.Minute), ok(3, time.Minute))
		if w := d.take(); !strings.Contains(w, "PEXPIRE PTTL") {
			t.Fatalf("after a foreign delete: sent %q, want PEXPIRE and PTTL after the script", w)
		}
		if got := pttl(t, c, ops[0].Key); got <= 0 || got > time.Minute {
			t.Fatalf("PTTL after a foreign delete = %v, want a window", got)
		}

		// A fraction in b (another client's fractional cost): INCRBY
		// refuses it, so b comes back and goes again in the full
		// form, which sums it, with c after it; c is then over.
		if err := c.Set(ctx, ops[1].Key, "1.5", 30*time.Second).Err(); err != nil {
			t.Fatal(err)
		}
		check("a fraction", "U U U t t", ok(2, time.Minute), ok(2.5, 30*time.Second), over(4, time.Minute))
		// b's window is forgotten and, its count a fraction, not
		// remembered again: it goes in the full form directly.
		check("after a fraction", "U t U", ok(3, time.Minute), over(3.5, 30*time.Second), skipped)
	})
}

// TestScriptRemembersWindowBan: a rule with a ban in a remembered window is
// the ban's PTTL and INCRBY ("V"); its ban starts as in the full form, and
// while it is on the op is handed back to the full form, which reports it.
func TestScriptRemembersWindowBan(t *testing.T) {
	forEachDialTarget(t, func(t *testing.T, url string, c redis.UniversalClient) {
		d := &recordingClient{}
		s, k := recordedStoreOn(t, url, d), newKeyer(t)
		op := terminal(banned(k.count("login", 2, 1), 5*time.Minute))
		check := func(step, codes string, w want) {
			t.Helper()
			expectOutcomes(t, step, eval(t, s, check, op), w)
			if got := d.takeCodes(); got != codes {
				t.Fatalf("%s: sent the codes %q, want %q", step, got, codes)
			}
		}
		check("first", "B", ok(1, time.Minute))
		check("second", "V", ok(2, time.Minute))
		check("over", "V", ban(3, 5*time.Minute))
		if got := pttl(t, c, op.BanKey); got <= 0 || got > 5*time.Minute {
			t.Fatalf("ban PTTL = %v, want a ban", got)
		}
		d.takeTrips()
		check("banned", "V B", ban(3, 5*time.Minute))
		if trips := d.takeTrips(); trips != 2 {
			t.Fatalf("a banned op took %d round trips, want 2 (handed back)", trips)
		}
		if n, err := c.Get(ctx, op.Key).Int(); err != nil || n != 3 {
			t.Fatalf("count after the banned check = %d, %v; want 3, not charged", n, err)
		}
	})
}

// forEachDialTarget runs f on a Store's URL and a client of the standalone
// test server and of the test Cluster.
func forEachDialTarget(t *testing.T, f func(t *testing.T, url string, c redis.UniversalClient)) {
	t.Run("standalone", func(t *testing.T) { f(t, redistest.URL(t), redistest.Client(t)) })
	t.Run("cluster", func(t *testing.T) { f(t, redistest.ClusterURL(t), redistest.ClusterClient(t)) })
}
