package observe_test

import (
	"context"
	"testing"

	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/observability/observe"
)

// Multi hands every event to every observer in order; one that panics keeps
// the event from none of the others, and the panic never reaches the limiter.
func TestMultiIsolatesPanics(t *testing.T) {
	var got []string
	record := func(name string) observe.Func {
		return func(_ context.Context, e ratelimit.Event) { got = append(got, name+":"+e.Kind.String()) }
	}
	fan := observe.Multi(record("a"), observe.Func(func(context.Context, ratelimit.Event) { panic("metrics bug") }), nil, record("b"))
	fan(context.Background(), ratelimit.Event{Kind: ratelimit.EventPeek})
	if want := []string{"a:peek", "b:peek"}; len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("events = %v, want %v", got, want)
	}
}
