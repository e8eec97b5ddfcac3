// Remote rules: the per-request rules service (docs/design.md#phases) gives a premium
// namespace a higher limit than rate_limits.yaml's, without a deploy.
//
//	REDIS_URL=redis://127.0.0.1:6379 go run ./examples/remoterules
//
// -check-timeout (default 100ms, ratelimit.DefaultTimeout) is how long a
// check waits for Redis before it fails open.
//
// It starts the reference rules server (controlplane/remoterules/rulesserver) on
// loopback, applies an override document through its management API, and runs
// one limiter whose remote tier comes from that server: namespace 345 (plan
// premium) gets 6 requests per minute, every other namespace the file's 3.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/ratekit/ratekit/controlplane/config"
	"github.com/ratekit/ratekit/controlplane/remoterules"
	"github.com/ratekit/ratekit/controlplane/remoterules/rulesserver"
	"github.com/ratekit/ratekit/controlplane/remoterules/rulesv1"
	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/redisstore"
	"github.com/ratekit/ratekit/examples/internal/exampleutil"
	"github.com/ratekit/ratekit/internal/httpguard"
)

const availableLimiters = `available_limiters:
  rack_request:
    description: every web and API request
    available_properties: [root_namespace, plan, ip]
    default_rules:
      - name: per_namespace
        action: limit
        characteristics: [root_namespace]
        limit: 100
        period_s: 60
`

const rateLimits = `rate_limits:
  rack_request:
    - name: per_namespace   # the operators' file default
      action: limit
      characteristics: [root_namespace]
      limit: 3
      period_s: 60
`

// overrides is what an operator applies with `ratekit-rules apply`.
const overrides = `documents:
  - service: web
    limiter: rack_request
    overrides:
      - selector: {plan: premium}
        description: premium namespaces get twice the file's limit
        rules:
          - name: per_namespace   # same name: replaces the file's rule, keeps its counter
            action: limit
            characteristics: [root_namespace]
            limit: 6
            period_s: 60
`

func main() {
	var checkTimeout time.Duration
	exampleutil.CheckTimeoutFlag(&checkTimeout)
	flag.Parse()
	if err := run(context.Background(), os.Stdout, os.Getenv("REDIS_URL"), checkTimeout); err != nil {
		log.Fatal(err)
	}
}

// run tells the story on out; checkTimeout bounds each check on Redis (0 for
// ratelimit.DefaultTimeout).
func run(ctx context.Context, out io.Writer, redisURL string, checkTimeout time.Duration) error {
	if redisURL == "" {
		return errors.New("set REDIS_URL (the reference rules server keeps its documents in Redis)")
	}
	rdb, err := exampleutil.NewRedisClient(ctx, redisURL) // its errors never show the URL's password
	if err != nil {
		return fmt.Errorf("REDIS_URL: %w", err)
	}
	defer rdb.Close()

	// The rules service: gRPC for the limiters, HTTP for the management API.
	srv, err := rulesserver.New(rulesserver.Config{Redis: rdb, KeyPrefix: "ratekit-example:rules:"})
	if err != nil {
		return err
	}
	grpcAddr, stopGRPC, err := serveGRPC(srv)
	if err != nil {
		return err
	}
	defer stopGRPC()
	httpAddr, stopHTTP, err := serveHTTP(srv.Handler())
	if err != nil {
		return err
	}
	defer stopHTTP()

	// An operator applies the overrides file.
	file, err := rulesserver.ParseOverrideFile("overrides.yaml", []byte(overrides), nil)
	if err != nil {
		return err
	}
	stored, err := rulesserver.Apply(ctx, nil, "http://"+httpAddr, file)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "applied web/rack_request overrides (revision %s)\n\n", stored[0].GetRevision())

	// The service: its config files, and the remote tier above them.
	available, err := config.ParseAvailableLimiters("available_limiters.yaml", []byte(availableLimiters))
	if err != nil {
		return err
	}
	limits, err := config.ParseRateLimits("rate_limits.yaml", []byte(rateLimits), available)
	if err != nil {
		return err
	}
	rules, err := config.Rules(available, limits, "rack_request")
	if err != nil {
		return err
	}
	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	remote, err := remoterules.New(remoterules.Config{
		Service:      "web",
		RulesService: rulesv1.NewRulesServiceClient(conn),
		Available:    available,
		Timeout:      time.Second, // generous for a first call on a busy laptop; 50ms by default
	})
	if err != nil {
		return err
	}
	limiter, err := ratelimit.New(ratelimit.Config{
		Name: "rack_request", Store: redisstore.New(rdb), KeyPrefix: "ratekit-example:", Rules: rules, RuleSource: remote.RulesFor,
		Timeout: checkTimeout,
	})
	if err != nil {
		return err
	}

	for _, id := range []ratelimit.Identifier{
		{"root_namespace": "345", "plan": "premium"},
		{"root_namespace": "7", "plan": "free"},
	} {
		if _, err := limiter.Clear(ctx, id); err != nil { // repeatable runs on a shared Redis
			return err
		}
		allowed := 0
		var last ratelimit.Result
		for range 8 {
			last = limiter.Check(ctx, id)
			if last.Err != nil {
				return fmt.Errorf("check: %w", last.Err)
			}
			if !last.Blocked() {
				allowed++
			}
		}
		tier := last.Evaluations[0].Tier // "remote" for the rules service's rules
		if tier == "" {
			tier = "local"
		}
		fmt.Fprintf(out, "namespace %-4v plan %-8v limit %d (%s tier): %d of 8 allowed\n",
			id["root_namespace"], id["plan"], last.Info.Limit, tier, allowed)
	}
	st := remote.Stats()
	fmt.Fprintf(out, "\nrules service calls: %d for 16 checks (the rest from the cache)\n", st.Calls)
	return nil
}

func serveGRPC(srv rulesv1.RulesServiceServer) (string, func(), error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	gs := grpc.NewServer()
	rulesv1.RegisterRulesServiceServer(gs, srv)
	go func() { _ = gs.Serve(l) }()
	return l.Addr().String(), gs.GracefulStop, nil
}

func serveHTTP(h http.Handler) (string, func(), error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	hs := httpguard.Server(h) // timeouts and a header bound, as every ratekit listener
	go func() { _ = hs.Serve(l) }()
	return l.Addr().String(), func() { _ = hs.Close() }, nil
}
