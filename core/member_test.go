package ratelimit

import (
	"context"
	"strings"
	"testing"
	"time"
)

func TestDistinctMembersStoredBounded(t *testing.T) {
	store := NewMemoryStore()
	l, err := New(Config{Name: "d", Store: store, Rules: []Rule{{Name: "paths", Characteristics: []string{"ip"}, CountDistinct: "path",
		Limit: 3, Period: time.Minute, Action: ActionLimit}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	big := strings.Repeat("p", 512<<10)
	for i, p := range []string{big + "1", big + "2", big + "1"} {
		r := l.Check(ctx, Identifier{"ip": "1.2.3.4", "path": p})
		want := []float64{1, 2, 2}[i]
		if r.Err != nil || r.Info == nil || r.Info.Count != want {
			t.Fatalf("check %d: %+v", i, r)
		}
	}
}
