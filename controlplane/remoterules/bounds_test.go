package remoterules_test

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/ratekit/ratekit/controlplane/remoterules"
	"github.com/ratekit/ratekit/controlplane/remoterules/rulesv1"
	ratelimit "github.com/ratekit/ratekit/core"
	configv1 "github.com/ratekit/ratekit/proto/ratelimit/config/v1"
)

// An answer that breaks a bound of the rules model (docs/limits.md) is
// rejected whole, as the rule store and the config files reject it: the
// local rules serve alone. At the bound it applies.
func TestAnswerOverBoundsNeverApplies(t *testing.T) {
	oneOf := func(n, size int) *configv1.Rule {
		r := limitRule("per_namespace", 1)
		vs := make([]string, n)
		for i := range vs {
			vs[i] = fmt.Sprintf("%0*d", size, i)
		}
		r.Match = map[string]*configv1.MatchValue{"root_namespace": {Kind: &configv1.MatchValue_OneOf{OneOf: &configv1.StringSet{Values: append(vs[:n-1], "345")}}}}
		return r
	}
	rules := func(n int) []*configv1.Rule {
		out := []*configv1.Rule{limitRule("per_namespace", 1)}
		for i := range n - 1 {
			out = append(out, limitRule(fmt.Sprintf("r%d", i), 1000))
		}
		return out
	}
	tests := []struct {
		name  string
		rules []*configv1.Rule
		apply bool
	}{
		{"one_of at the bound", []*configv1.Rule{oneOf(ratelimit.MaxOneOfValues, 4)}, true},
		{"one_of over the bound", []*configv1.Rule{oneOf(ratelimit.MaxOneOfValues+1, 4)}, false},
		// Each value within MaxMatchValueLen, the rules within 1 MiB and
		// over it: an answer is a rules document (ratekit explain refuses
		// one over 1 MiB too).
		{"rules of 1 MiB less 1 KiB", []*configv1.Rule{oneOf(ratelimit.MaxOneOfValues, (ratelimit.MaxDocumentBytes-1<<10)/ratelimit.MaxOneOfValues-3)}, true},
		{"rules over 1 MiB", []*configv1.Rule{oneOf(ratelimit.MaxOneOfValues, ratelimit.MaxDocumentBytes/ratelimit.MaxOneOfValues)}, false},
		{"rules at the bound", rules(ratelimit.MaxRulesPerTier), true},
		{"rules over the bound", rules(ratelimit.MaxRulesPerTier + 1), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := &rulesv1.GetRulesResponse{Rules: &configv1.RuleList{Rules: tt.rules}}
			srv := &counting{RulesServiceServer: funcServer{f: func(context.Context, *rulesv1.GetRulesRequest) (*rulesv1.GetRulesResponse, error) {
				return resp, nil
			}}}
			c := newClient(t, dial(t, startGRPC(t, srv).addr), "web", nil)
			l := newLimiter(t, ratelimit.NewMemoryStore(), "", c.RulesFor)
			r := l.Check(context.Background(), ratelimit.Identifier{"root_namespace": "345"})
			applied := len(r.Evaluations) > 0 && r.Evaluations[0].PerRequest
			if applied != tt.apply {
				t.Fatalf("applied %v, want %v (stats %+v)", applied, tt.apply, c.Stats())
			}
			if st := c.Stats(); !tt.apply && st.Invalid == 0 {
				t.Fatalf("stats %+v: the answer is not counted invalid", st)
			}
		})
	}
}

// An answer is bounded as received, not only by its rules: one padded past
// a rules document's bound with fields this client does not know is refused
// by gRPC before it is decoded (it would otherwise decode up to its default
// 4 MiB), and the local rules serve alone. Within the bound it applies.
func TestAnswerBoundedAsReceived(t *testing.T) {
	for _, tt := range []struct {
		name    string
		padding int
		apply   bool
	}{
		{"8 KiB of unknown fields", 8 << 10, true},
		{"2 MiB of unknown fields", 2 << 20, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			resp := &rulesv1.GetRulesResponse{Rules: &configv1.RuleList{Rules: []*configv1.Rule{limitRule("per_namespace", 1)}}}
			// Field 15, bytes: unknown to GetRulesResponse.
			pad := protowire.AppendTag(nil, 15, protowire.BytesType)
			pad = protowire.AppendBytes(pad, make([]byte, tt.padding))
			resp.ProtoReflect().SetUnknown(pad)
			srv := funcServer{f: func(context.Context, *rulesv1.GetRulesRequest) (*rulesv1.GetRulesResponse, error) {
				return resp, nil
			}}
			rec := &recorder{}
			c := newClient(t, dial(t, startGRPC(t, srv).addr), "web", func(cfg *remoterules.Config) { cfg.Metrics = rec })
			l := newLimiter(t, ratelimit.NewMemoryStore(), "", c.RulesFor)
			r := l.Check(context.Background(), ratelimit.Identifier{"root_namespace": "345"})
			applied := len(r.Evaluations) > 0 && r.Evaluations[0].PerRequest
			if applied != tt.apply {
				t.Fatalf("applied %v, want %v (stats %+v, outcomes %v)", applied, tt.apply, c.Stats(), rec.outcomes())
			}
			want := []remoterules.CallOutcome{remoterules.CallOK}
			if !tt.apply {
				want = []remoterules.CallOutcome{remoterules.CallError}
			}
			if got := rec.outcomes(); !slices.Equal(got, want) {
				t.Fatalf("outcomes %v, want %v", got, want)
			}
		})
	}
}

// Per-request rules have no mode: an answer that sets one is refused whole
// and counted invalid, as the server refuses a document that sets one;
// applied without it, a limiter meant to be in shadow would enforce.
func TestAnswerWithModeNeverApplies(t *testing.T) {
	resp := &rulesv1.GetRulesResponse{Rules: &configv1.RuleList{Rules: []*configv1.Rule{limitRule("per_namespace", 1)}, Mode: configv1.Mode_MODE_SHADOW}}
	srv := &counting{RulesServiceServer: funcServer{f: func(context.Context, *rulesv1.GetRulesRequest) (*rulesv1.GetRulesResponse, error) {
		return resp, nil
	}}}
	c := newClient(t, dial(t, startGRPC(t, srv).addr), "web", nil)
	l := newLimiter(t, ratelimit.NewMemoryStore(), "", c.RulesFor)
	r := l.Check(context.Background(), ratelimit.Identifier{"root_namespace": "345"})
	if len(r.Evaluations) > 0 && r.Evaluations[0].PerRequest {
		t.Fatalf("the answer's rules applied: %+v", r.Evaluations)
	}
	if st := c.Stats(); st.Invalid == 0 {
		t.Fatalf("stats %+v: the answer is not counted invalid", st)
	}
}

// A value that is not valid UTF-8 (a raw header or a decoded path can hold
// any bytes) cannot be carried by a protobuf string: it is left out of the
// request, as a value over the protocol's bound is, and no selector can
// equal it. The request still gets the answer of its other properties, and
// hostile values never count as failures of the service, so they cannot
// open the breaker for every other caller.
func TestInvalidUTF8ValueLeftOut(t *testing.T) {
	srv := &counting{RulesServiceServer: funcServer{f: func(_ context.Context, req *rulesv1.GetRulesRequest) (*rulesv1.GetRulesResponse, error) {
		a := answer(5)
		if req.GetIdentifier()["root_namespace"] != "345" {
			a.Rules = &configv1.RuleList{}
		}
		return a, nil
	}}}
	tests := []struct {
		name string
		id   ratelimit.Identifier
		want int // rules answered
	}{
		{"in a property the answer does not vary by", ratelimit.Identifier{"root_namespace": "345", "path": "/\xff"}, 1},
		{"in a vary property", ratelimit.Identifier{"root_namespace": "3\xff45", "path": "/"}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newClient(t, dial(t, startGRPC(t, srv).addr), "web", nil)
			for range remoterules.DefaultFailures + 1 { // as many as open the breaker on failures
				if got := c.RulesFor(context.Background(), "rack_request", tt.id).Len(); got != tt.want {
					t.Fatalf("%d rules, want %d (stats %+v)", got, tt.want, c.Stats())
				}
			}
			if st := c.Stats(); st.Failures != 0 || st.Open {
				t.Fatalf("stats %+v: want no failure and the breaker closed", st)
			}
		})
	}
}
