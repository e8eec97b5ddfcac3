package ratelimit

import (
	"context"
	"strings"
	"testing"
	"time"
	"unsafe"
)

// TestDistinctMemberCopied: a distinct set keeps a copy of each member, not
// the caller's string, which may be a slice of a far larger one (a value cut
// from a request body): kept, the slice would hold the whole body for the
// window, past the bound on a member's bytes.
func TestDistinctMemberCopied(t *testing.T) {
	body := strings.Repeat("x", 1<<20)
	from := uintptr(unsafe.Pointer(unsafe.StringData(body)))
	s := NewMemoryStore()
	defer s.Close()
	op := Op{Kind: OpDistinct, Key: "{k}", Member: body[:10], Cost: 1, Limit: 10, Period: time.Minute}
	out, err := s.Eval(context.Background(), ModeCheck, []Op{op})
	if err != nil || out[0].Count != 1 {
		t.Fatalf("Eval = %+v, %v: want a set of one member", out, err)
	}
	e := s.shard(op.Key).m[op.Key]
	if e == nil || len(e.set) != 1 {
		t.Fatalf("entry %+v: want a set of one member", e)
	}
	for m := range e.set {
		if p := uintptr(unsafe.Pointer(unsafe.StringData(m))); p >= from && p < from+uintptr(len(body)) {
			t.Fatalf("the set keeps the caller's member %q, which holds its %d-byte string", m, len(body))
		}
	}
}
