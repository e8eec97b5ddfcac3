package rulestore

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/redisstore"
	"github.com/ratekit/ratekit/core/tiers"
	"github.com/ratekit/ratekit/internal/redistest"
)

// sentinelClient is a go-redis client of url as a service builds it
// (redisstore.GoRedisOptions), closed at cleanup.
func sentinelClient(t *testing.T, url string) redis.UniversalClient {
	t.Helper()
	o, err := redisstore.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewUniversalClient(redisstore.GoRedisOptions(o))
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// sentinelOptions are the rule store's options of the Sentinel drills: quick
// refreshes, a short timeout, no logs.
func sentinelOptions(prefix string) Options {
	return Options{Prefix: prefix, Interval: 50 * time.Millisecond, Timeout: 500 * time.Millisecond,
		Logger: slog.New(slog.DiscardHandler)}
}

// startSearch is a service's rule store on c, started, with the limiter
// "search" bound (default rule by_user, 5 a minute); it stops at cleanup.
func startSearch(t *testing.T, c redis.UniversalClient, opts Options) (*Store, *ratelimit.Limiter) {
	t.Helper()
	svc := newStore(t, c, opts)
	lim, err := ratelimit.New(ratelimit.Config{Name: "search", Store: ratelimit.NewMemoryStore()})
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Bind(lim, tiers.Set{Defaults: []ratelimit.Rule{rule("by_user", 5)}}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := svc.Start(ctx)
	t.Cleanup(func() { cancel(); <-done })
	return svc, lim
}

// failoverWait bounds a wait for a failover's phase: seconds, more on a
// loaded machine.
const failoverWait = 2 * time.Minute

// TestSentinelFailoverRules drills a Sentinel failover (the master SIGKILLed,
// or SIGSTOPped and SIGCONTed once the replica is promoted, when it comes
// back as a replica) under the rule store: a service's replica keeps its last
// good rules while no master answers, a publish succeeds once the replica is
// promoted, and the service picks the new rules up.
func TestSentinelFailoverRules(t *testing.T) {
	for _, hang := range []bool{false, true} {
		t.Run(map[bool]string{false: "kill", true: "stop"}[hang], func(t *testing.T) {
			st := redistest.StartSentinel(t)
			prefix := testPrefix(t)
			opts := sentinelOptions(prefix)
			svc, _ := startSearch(t, sentinelClient(t, st.URL()), opts)
			pub := newStore(t, sentinelClient(t, st.URL()), opts)

			published := func() []string {
				ts, _ := svc.Tiers("search")
				return names(ts.Published)
			}
			publish := func(names ...string) {
				t.Helper()
				var rules []ratelimit.Rule
				for _, n := range names {
					rules = append(rules, rule(n, 7))
				}
				eventually(t, failoverWait, fmt.Sprintf("publishing %v", names), func() bool {
					pctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
					defer cancel()
					_, err := pub.Publish(pctx, request(t, map[string][]ratelimit.Rule{"search": rules}))
					return err == nil
				})
				eventually(t, failoverWait, fmt.Sprintf("the service enforces %v", names), func() bool {
					return slices.Equal(published(), names)
				})
			}

			publish("first")
			if hang {
				st.Master.Pause(t)
			} else {
				st.Master.Stop()
			}
			eventually(t, failoverWait, "a refresh fails with the master down", func() bool {
				_, err := svc.RefreshStatus("search")
				return err != nil
			})
			if got := published(); !slices.Equal(got, []string{"first"}) {
				t.Fatalf("published rules during the outage: %v, want the last good [first]", got)
			}
			st.WaitFailover(t, st.Replica)
			publish("first", "second")
			if hang {
				st.Master.Resume(t)
				st.Master.WaitReplicaOf(t, st.Replica)
				publish("first", "second", "third")
			}
		})
	}
}

// TestSentinelStartRulesDuringOutage: a service whose rule store starts
// while the sentinels answer but no master does, or while no sentinel
// answers, runs on its local rules; once the servers are back it picks up
// what is published.
func TestSentinelStartRulesDuringOutage(t *testing.T) {
	for _, down := range []string{"master", "sentinels"} {
		t.Run(down, func(t *testing.T) {
			st := redistest.StartSentinel(t)
			stopped := st.Sentinels
			if down == "master" {
				stopped = []*redistest.Server{st.Master, st.Replica}
			}
			for _, s := range stopped {
				s.Stop()
			}
			opts := sentinelOptions(testPrefix(t))
			svc, lim := startSearch(t, sentinelClient(t, st.URL()), opts)
			eventually(t, failoverWait, "a refresh fails with the "+down+" down", func() bool {
				_, err := svc.RefreshStatus("search")
				return err != nil
			})
			if got := names(lim.Rules()); !slices.Equal(got, []string{"by_user"}) {
				t.Fatalf("rules with the %s down: %v, want the local [by_user]", down, got)
			}
			for _, s := range stopped {
				s.Restart(t)
			}
			pub := newStore(t, sentinelClient(t, st.URL()), opts)
			eventually(t, failoverWait, "publishing once the "+down+" are back", func() bool {
				pctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				defer cancel()
				_, err := pub.Publish(pctx, request(t, map[string][]ratelimit.Rule{"search": {rule("published", 7)}}))
				return err == nil
			})
			eventually(t, failoverWait, "the service enforces the published rule", func() bool {
				ts, _ := svc.Tiers("search")
				return slices.Equal(names(ts.Published), []string{"published"})
			})
		})
	}
}
