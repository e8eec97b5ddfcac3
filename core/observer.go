package ratelimit

import (
	"context"
	"time"
)

// EventKind says which operation an Event reports: EventCheck, EventPeek or
// EventClear.
type EventKind uint8

const (
	// EventCheck reports a Check.
	EventCheck EventKind = 0
	// EventPeek reports a Peek.
	EventPeek EventKind = 1
	// EventClear reports a Clear.
	EventClear EventKind = 2
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

// Event describes one finished operation of a Limiter, for Config.Observer.
type Event struct {
	Kind       EventKind
	Limiter    string
	Identifier Identifier    // never use its values as metric labels
	Result     *Result       // check and peek
	Cleared    int           // clear: keys removed
	Err        error         // clear: the error, if any (check/peek: Result.Err)
	Duration   time.Duration // time spent in the limiter
}

func (l *Limiter) observe(ctx context.Context, e Event) {
	if l.observer == nil {
		return
	}
	defer func() { _ = recover() }()
	l.observer(ctx, e)
}
