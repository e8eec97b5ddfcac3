package ratelimit_test

import (
	"reflect"
	"testing"

	ratelimit "github.com/ratekit/ratekit/core"
)

// A verdict is not a rule action: the two are distinct named types, so Go
// rejects mixing them without a conversion. This does not compile:
//
//	rule.Action = ratelimit.ActionBlock // cannot use ratelimit.ActionBlock (constant of type Verdict) as Action value
//	result.Action == ratelimit.ActionLimit // mismatched types Verdict and Action
func TestVerdictIsNotAnAction(t *testing.T) {
	action := reflect.TypeOf(ratelimit.Rule{}.Action)
	verdict := reflect.TypeOf(ratelimit.Result{}.Action)
	if action == verdict {
		t.Fatalf("Rule.Action and Result.Action share the type %v", action)
	}
	for _, v := range []any{ratelimit.ActionAllow, ratelimit.ActionBlock} {
		if reflect.TypeOf(v) != verdict {
			t.Errorf("%v is a %v, want a %v", v, reflect.TypeOf(v), verdict)
		}
	}
	for _, a := range []any{ratelimit.ActionLimit, ratelimit.ActionLog, ratelimit.ActionSkip} {
		if reflect.TypeOf(a) != action {
			t.Errorf("%v is a %v, want a %v", a, reflect.TypeOf(a), action)
		}
	}
	if action.AssignableTo(verdict) || verdict.AssignableTo(action) {
		t.Errorf("an Action and a Verdict are assignable to each other")
	}
}
