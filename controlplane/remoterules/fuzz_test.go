package remoterules_test

import (
	"context"
	"log/slog"
	"slices"
	"sync/atomic"
	"testing"

	"buf.build/go/protovalidate"
	"google.golang.org/protobuf/proto"

	"github.com/ratekit/ratekit/controlplane/config"
	"github.com/ratekit/ratekit/controlplane/remoterules"
	"github.com/ratekit/ratekit/controlplane/remoterules/rulesv1"
	ratelimit "github.com/ratekit/ratekit/core"
	configv1 "github.com/ratekit/ratekit/proto/ratelimit/config/v1"
)

// FuzzAnswer feeds arbitrary answers of a real gRPC server to a client that
// holds one good answer: the client applies an answer only when it passes
// the checks it documents (protovalidate, and the rate_limits.yaml checks
// against available_limiters.yaml), and then exactly its rules; a rejected
// answer is counted invalid and changes nothing it caches.
func FuzzAnswer(f *testing.F) {
	good := &rulesv1.GetRulesResponse{Rules: &configv1.RuleList{Rules: []*configv1.Rule{limitRule("per_ns", 5)}},
		Vary: []string{"root_namespace"}, Revision: "r1"}
	for _, resp := range []*rulesv1.GetRulesResponse{
		good,
		{},
		{NotModified: true, Revision: "r1"},
		{Rules: &configv1.RuleList{Rules: []*configv1.Rule{limitRule("a", 1), limitRule("a", 2)}}},
		{Rules: &configv1.RuleList{Rules: []*configv1.Rule{{Name: "skip_trusted", Action: configv1.Action_ACTION_SKIP}}}, CacheForS: 86400, StaleForS: 604800},
		{Rules: &configv1.RuleList{Rules: []*configv1.Rule{{Name: "not_allowed", Action: configv1.Action_ACTION_SKIP}}}},
		{Rules: &configv1.RuleList{Rules: []*configv1.Rule{{Name: "m", Action: configv1.Action_ACTION_LOG, Limit: u32(1), PeriodS: u32(1),
			Match: map[string]*configv1.MatchValue{"plan": {Kind: &configv1.MatchValue_Regex{Regex: "^(a|b)+$"}}}}}}, Vary: []string{"plan", "ip"}},
		{Rules: &configv1.RuleList{Rules: []*configv1.Rule{limitRule("x", 1)}}, Vary: []string{"nope", "nope"}, CacheForS: 86401},
	} {
		b, err := proto.Marshal(resp)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	var answer atomic.Pointer[rulesv1.GetRulesResponse]
	srv := startGRPC(f, funcServer{f: func(context.Context, *rulesv1.GetRulesRequest) (*rulesv1.GetRulesResponse, error) {
		return answer.Load(), nil
	}})
	rpc := dial(f, srv.addr)
	available := mustAvailable(f)
	clk := newClock()
	a := ratelimit.Identifier{"root_namespace": "a", "plan": "p", "ip": "192.0.2.1"}
	b := ratelimit.Identifier{"root_namespace": "b", "plan": "q", "ip": "192.0.2.2"}
	f.Fuzz(func(t *testing.T, data []byte) {
		resp := &rulesv1.GetRulesResponse{}
		if proto.Unmarshal(data, resp) != nil {
			return // gRPC would fail the call before the client sees it
		}
		c := newClient(t, rpc, "svc", func(cfg *remoterules.Config) {
			cfg.Now, cfg.Logger = clk.Now, slog.New(slog.DiscardHandler)
		})
		answer.Store(good)
		held := c.RulesFor(context.Background(), "rack_request", a)
		if held.Len() != 1 {
			t.Fatalf("the good answer gave %d rules", held.Len())
		}
		before := c.Stats()
		answer.Store(resp)
		got := c.RulesFor(context.Background(), "rack_request", b)
		after := c.Stats()
		valid := protovalidate.Validate(resp) == nil
		if valid && len(resp.GetRules().GetRules()) > 0 {
			valid = config.ValidateRuleList("rack_request", resp.GetRules(), available) == nil
		}
		if after.Invalid > before.Invalid {
			if valid && !resp.GetNotModified() {
				t.Fatalf("a valid answer was rejected: %v", resp)
			}
			if got != nil || after.Entries != before.Entries || after.Sets != before.Sets || after.Bytes != before.Bytes {
				t.Fatalf("a rejected answer changed the cache: rules %v, stats before %+v after %+v", got.Rules(), before, after)
			}
			answer.Store(&rulesv1.GetRulesResponse{})
			if again := c.RulesFor(context.Background(), "rack_request", a); again != held {
				t.Fatalf("after a rejected answer, identifier a lost its cached one: %v", again.Rules())
			}
		} else {
			if !valid || resp.GetNotModified() {
				t.Fatalf("an invalid answer was applied: %v", resp)
			}
			var want []string
			for _, r := range resp.GetRules().GetRules() {
				want = append(want, r.GetName())
			}
			var names []string
			for _, r := range got.Rules() {
				names = append(names, r.Name)
			}
			if !slices.Equal(names, want) {
				t.Fatalf("the answer's rules are %v, the client applies %v", want, names)
			}
		}
	})
}
