package main

import (
	"context"
	"io"
	"net/http"
	"testing"
	"time"

	rlcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/ratekit/ratekit/controlplane/rulestore"
	"github.com/ratekit/ratekit/internal/redistest"
	"github.com/ratekit/ratekit/internal/testlog"
)

// TestStartsWithoutRedis: with -seed, on a Redis that is down (nothing
// listens) or hung (SIGSTOP, and a rueidis write timeout of an hour), the
// binary serves all the same: /healthz answers and checks fail open. Once
// Redis answers, without a restart, the checks count and the seed is written.
// Before, the seed's error stopped the binary, and a hung Redis held the
// start-up for the client's write timeout.
func TestStartsWithoutRedis(t *testing.T) {
	for _, tt := range []struct {
		name          string
		fail, recover func(srv *redistest.Server, t testing.TB)
	}{
		{"down", func(srv *redistest.Server, _ testing.TB) { srv.Stop() }, (*redistest.Server).Restart},
		{"hung", (*redistest.Server).Pause, (*redistest.Server).Resume},
	} {
		t.Run(tt.name, func(t *testing.T) {
			srv := redistest.StartServer(t)
			tt.fail(srv, t)
			prefix := redistest.Prefix(t)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			type addrs struct{ grpc, http string }
			ready := make(chan addrs, 1)
			done := make(chan error, 1)
			var log testlog.Buffer
			go func() {
				done <- run(ctx, []string{
					"-available", "../../example/available_limiters.yaml",
					"-rate-limits", "../../example/rate_limits.yaml",
					"-key-prefix", prefix, "-rules-prefix", prefix + "{rules}:", "-seed",
					"-listen", "127.0.0.1:0", "-http", "127.0.0.1:0", "-refresh", "100ms", "-timeout", "500ms",
					"-redis-url", srv.URL() + "?write_timeout=1h",
				}, &log, func(g, h string) { ready <- addrs{g, h} })
			}()
			var a addrs
			select {
			case a = <-ready:
			case err := <-done:
				t.Fatalf("run returned before serving: %v\n%s", err, log.String())
			case <-time.After(60 * time.Second):
				t.Fatalf("not serving after 60s:\n%s", log.String())
			}
			if code, body := httpGet(t, "http://"+a.http+"/healthz"); code != http.StatusOK {
				t.Fatalf("/healthz: %d %s", code, body)
			}
			conn, err := grpc.NewClient(a.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			rls := rlsv3.NewRateLimitServiceClient(conn)
			// The file tier's per_user_writes: 20 per minute.
			req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommonv3.RateLimitDescriptor{{Entries: []*rlcommonv3.RateLimitDescriptor_Entry{
				{Key: "generic_key", Value: "api"}, {Key: "user", Value: "bob"}, {Key: "method", Value: "POST"},
			}}}}
			for i := range 25 {
				resp, err := rls.ShouldRateLimit(ctx, req)
				if err != nil || resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
					t.Fatalf("request %d with Redis %s: %v %v, want OK (fail open)", i+1, tt.name, resp, err)
				}
			}

			tt.recover(srv, t)
			c := redis.NewClient(&redis.Options{Addr: srv.Addr})
			defer c.Close()
			store, err := rulestore.New(c, rulestore.Options{Prefix: prefix + "{rules}:"})
			if err != nil {
				t.Fatal(err)
			}
			for deadline := time.Now().Add(30 * time.Second); ; {
				resp, err := rls.ShouldRateLimit(ctx, req)
				if err != nil {
					t.Fatal(err)
				}
				_, docErr := store.Document(ctx, "edge")
				if resp.GetOverallCode() == rlsv3.RateLimitResponse_OVER_LIMIT && docErr == nil {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("30s after Redis came back: last answer %v, document: %v\n%s", resp, docErr, log.String())
				}
				time.Sleep(50 * time.Millisecond)
			}
			cancel()
			if err := <-done; err != nil {
				t.Fatalf("run: %v", err)
			}
		})
	}
}

func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}
