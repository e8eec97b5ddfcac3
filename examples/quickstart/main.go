// Quickstart: a login limiter with a ban and a per-user API limit, run through
// a short scenario that prints every decision.
//
//	go run ./examples/quickstart                            # embedded in-memory store
//	REDIS_URL=redis://127.0.0.1:6379 go run ./examples/quickstart   # Redis
//
// -check-timeout (default 100ms, ratelimit.DefaultTimeout) is how long a
// check waits for Redis before it fails open.
//
// With REDIS_URL on a Redis that is down it runs all the same, as a service
// starts while Redis is down: it says Redis is unreachable, and every check
// fails open (allows, with the error). Only a malformed REDIS_URL stops it.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"strings"
	"time"

	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/redisstore"
	"github.com/ratekit/ratekit/examples/internal/exampleutil"
)

func main() {
	var checkTimeout time.Duration
	exampleutil.CheckTimeoutFlag(&checkTimeout)
	flag.Parse()
	if err := run(context.Background(), os.Stdout, os.Getenv("REDIS_URL"), checkTimeout); err != nil {
		log.Fatal(err)
	}
}

// run tells the scenario on out; checkTimeout bounds each check on Redis
// (0 for ratelimit.DefaultTimeout).
func run(ctx context.Context, out io.Writer, redisURL string, checkTimeout time.Duration) error {
	store, closeStore, err := openStore(redisURL)
	if err != nil {
		return err
	}
	defer closeStore()
	fmt.Fprintf(out, "store: %s\n\n", storeName(redisURL))

	signIn, err := ratelimit.New(ratelimit.Config{
		Name:    "user_sign_in",
		Store:   store,
		Timeout: checkTimeout,
		Rules: []ratelimit.Rule{{
			Name:            "failed_sign_ins_by_ip",
			Characteristics: []string{"ip"},
			Limit:           3,
			Period:          time.Minute,
			BanFor:          15 * time.Minute, // longer than the window
		}},
	})
	if err != nil {
		return fmt.Errorf("sign-in limiter: %w", err)
	}
	api, err := ratelimit.New(ratelimit.Config{
		Name:    "api_request",
		Store:   store,
		Timeout: checkTimeout,
		Rules: []ratelimit.Rule{
			{
				Name:   "trusted_bypass",
				Action: ratelimit.ActionSkip,
				Match:  map[string]ratelimit.Matcher{"user": ratelimit.OneOf("user:ops-bot")},
			},
			{
				Name:            "per_user",
				Characteristics: []string{"user"},
				Limit:           5,
				Period:          time.Minute,
			},
		},
	})
	if err != nil {
		return fmt.Errorf("api limiter: %w", err)
	}

	attacker := ratelimit.Identifier{"ip": "203.0.113.42"}
	alice := ratelimit.Identifier{"user": "user:alice", "request_type": "api"}
	bot := ratelimit.Identifier{"user": "user:ops-bot", "request_type": "api"}
	// Start from a clean slate, so that runs against a shared Redis repeat.
	// A Redis that is down stops nothing, as in a service: checks fail open.
	for _, c := range []struct {
		l  *ratelimit.Limiter
		id ratelimit.Identifier
	}{{signIn, attacker}, {api, alice}} {
		if _, err := c.l.Clear(ctx, c.id); err != nil {
			fmt.Fprintf(out, "Redis is unreachable (%v):\nevery check fails open (allows, with the error) until it answers.\n\n", err)
			break
		}
	}

	fmt.Fprintln(out, "-- failed sign-ins from one IP (3 per minute, then a 15 minute ban)")
	for i := 1; i <= 5; i++ {
		report(out, fmt.Sprintf("failed sign-in %d", i), signIn.Check(ctx, attacker))
	}
	report(out, "peek (no counting)", signIn.Peek(ctx, attacker))
	if n, err := signIn.Clear(ctx, attacker); err != nil {
		fmt.Fprintf(out, "%-22s cleared nothing (store unavailable: %v)\n", "successful sign-in", err)
	} else {
		fmt.Fprintf(out, "%-22s cleared %d keys (the user signed in)\n", "successful sign-in", n)
	}
	report(out, "next attempt", signIn.Check(ctx, attacker))

	fmt.Fprintln(out, "\n-- API calls by one user (5 per minute)")
	for i := 1; i <= 6; i++ {
		report(out, fmt.Sprintf("alice call %d", i), api.Check(ctx, alice))
	}
	report(out, "ops-bot call (skip)", api.Check(ctx, bot))
	return nil
}

func report(out io.Writer, step string, r ratelimit.Result) {
	switch {
	case r.Err != nil:
		fmt.Fprintf(out, "%-22s %-5s (store unavailable, failing open: %v)\n", step, r.Action, r.Err)
	case r.Skipped:
		fmt.Fprintf(out, "%-22s %-5s rule=%s (skipped: not counted)\n", step, r.Action, r.Rule.Name)
	case r.Info == nil:
		fmt.Fprintf(out, "%-22s %-5s (no rule matched)\n", step, r.Action)
	default:
		extra := ""
		if r.Info.Banned {
			extra = " banned"
		}
		fmt.Fprintf(out, "%-22s %-5s rule=%s count=%g remaining=%g reset_in=%s%s\n", step, r.Action, r.Rule.Name,
			r.Info.Count, r.Info.Remaining, time.Until(r.Info.ResetAt).Round(time.Second), extra)
	}
}

func openStore(redisURL string) (ratelimit.Store, func(), error) {
	if redisURL == "" {
		return ratelimit.NewMemoryStore(), func() {}, nil
	}
	// With Redis down the store is made all the same: checks fail open until
	// it connects. Its errors never show the URL's password.
	store, err := redisstore.Dial(context.Background(), redisURL)
	if err != nil {
		return nil, nil, fmt.Errorf("REDIS_URL: %w", err)
	}
	return store, func() { _ = store.Close() }, nil
}

func storeName(redisURL string) string {
	if redisURL == "" {
		return "embedded in-memory (set REDIS_URL to use Redis)"
	}
	// The address only: the URL may hold a password.
	if opt, err := redisstore.ParseURL(redisURL); err == nil {
		return "redis " + strings.Join(opt.InitAddress, ",")
	}
	return "redis"
}
