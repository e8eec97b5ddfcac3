package ratelimit

import (
	"context"
	"time"
)

// Observer receives an Event after every Check, Peek and Clear. Metrics,
// tracing and logging packages implement it; it must be safe for concurrent use
// and should not block. A panic in an observer is recovered and never changes
// the verdict.
type Observer interface {
	Observe(ctx context.Context, e Event)
}

// ObserverFunc adapts a function to Observer.
type ObserverFunc func(ctx context.Context, e Event)

// Observe implements Observer.
func (f ObserverFunc) Observe(ctx context.Context, e Event) { f(ctx, e) }

// Observers fans one event out to several observers, in order.
func Observers(obs ...Observer) Observer {
	return ObserverFunc(func(ctx context.Context, e Event) {
		for _, o := range obs {
			if o != nil {
				safeObserve(o, ctx, e)
			}
		}
	})
}

// EventKind says which operation an Event reports.
type EventKind uint8

const (
	EventCheck EventKind = iota
	EventPeek
	EventClear
)

func (k EventKind) String() string {
	switch k {
	case EventPeek:
		return "peek"
	case EventClear:
		return "clear"
	}
	return "check"
}

func eventKind(m Mode) EventKind {
	if m == ModePeek {
		return EventPeek
	}
	return EventCheck
}

// Event describes one finished operation of a Limiter.
type Event struct {
	Kind       EventKind
	Limiter    string
	Identifier Identifier    // never use its values as metric labels
	Result     *Result       // check and peek
	Cleared    int           // clear: keys removed
	Err        error         // clear: the error, if any (check/peek: Result.Err)
	Duration   time.Duration // time spent in the limiter
}

func (l *Limiter) observe(ctx context.Context, e Event) { safeObserve(l.observer, ctx, e) }

func safeObserve(o Observer, ctx context.Context, e Event) {
	defer func() { _ = recover() }()
	o.Observe(ctx, e)
}
