package ratelimit

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// panicStore panics on every call, as a store with a bug would.
type panicStore struct{ bounded bool }

func (panicStore) Eval(context.Context, Mode, []Op) ([]OpResult, error) { panic("store bug") }
func (panicStore) Delete(context.Context, []string) (int, error)        { panic("store bug") }
func (s panicStore) ContextBounded() bool                               { return s.bounded }

// localPanicStore is an in-process store (no timeout goroutine) that panics.
type localPanicStore struct{ panicStore }

func (localPanicStore) inProcess() {}

// TestStorePanicFailsOpen: a panic inside a store, whichever way the limiter
// calls it (in process, directly under a deadline, or in its guard goroutine),
// is a fail-open result wrapping ErrStorePanic, never a crash.
func TestStorePanicFailsOpen(t *testing.T) {
	for name, store := range map[string]Store{
		"in process":      localPanicStore{},
		"context bound":   panicStore{bounded: true},
		"guard goroutine": panicStore{},
	} {
		t.Run(name, func(t *testing.T) {
			l, err := New(Config{Name: "panics", Store: store, Rules: []Rule{{
				Name: "r", Characteristics: []string{"user"}, Limit: 1, Period: time.Minute, Action: ActionLimit,
			}}})
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range []Result{l.Check(context.Background(), Identifier{"user": "u"}), l.Peek(context.Background(), Identifier{"user": "u"})} {
				if r.Action != ActionAllow || !errors.Is(r.Err, ErrStorePanic) {
					t.Fatalf("result %+v, want allow with ErrStorePanic", r)
				}
			}
			if _, err := l.Clear(context.Background(), Identifier{"user": "u"}); !errors.Is(err, ErrStorePanic) {
				t.Fatalf("clear: %v, want ErrStorePanic", err)
			}
		})
	}
}

// errPanicStore panics with an error value, as a store or a library under it
// may (panic(err), http.ErrAbortHandler).
type errPanicStore struct{ panicStore }

var errStoreBug = errors.New("store bug")

func (errPanicStore) Eval(context.Context, Mode, []Op) ([]OpResult, error) { panic(errStoreBug) }
func (errPanicStore) Delete(context.Context, []string) (int, error)        { panic(errStoreBug) }

// TestStorePanicKeepsItsError: a store that panics with an error fails the
// check open with an Err that wraps both ErrStorePanic and that error, so
// errors.Is finds the cause (it was formatted into the message, and lost).
func TestStorePanicKeepsItsError(t *testing.T) {
	for name, bounded := range map[string]bool{"context bound": true, "guard goroutine": false} {
		t.Run(name, func(t *testing.T) {
			l, err := New(Config{Name: "panics", Store: errPanicStore{panicStore{bounded: bounded}}, Rules: []Rule{{
				Name: "r", Characteristics: []string{"user"}, Limit: 1, Period: time.Minute, Action: ActionLimit,
			}}})
			if err != nil {
				t.Fatal(err)
			}
			r := l.Check(context.Background(), Identifier{"user": "u"})
			if !errors.Is(r.Err, ErrStorePanic) || !errors.Is(r.Err, errStoreBug) {
				t.Fatalf("check: Err %v, want it to wrap ErrStorePanic and the store's error", r.Err)
			}
			if _, err := l.Clear(context.Background(), Identifier{"user": "u"}); !errors.Is(err, ErrStorePanic) || !errors.Is(err, errStoreBug) {
				t.Fatalf("clear: %v, want it to wrap ErrStorePanic and the store's error", err)
			}
		})
	}
}

// TestMemoryStoreForeignKindEntry: an entry of the other counting kind under
// an op's key (only a caller building its own keys can make one) is treated
// as absent; the shard stays usable from every goroutine afterwards.
func TestMemoryStoreForeignKindEntry(t *testing.T) {
	s := MemoryConfig{Shards: 1}.New()
	ctx := context.Background()
	count := Op{Kind: OpCount, Key: "{k}", Cost: 1, Limit: 5, Period: time.Minute}
	set := Op{Kind: OpDistinct, Key: "{k}", Member: "m", Cost: 1, Limit: 5, Period: time.Minute}
	for i, op := range []Op{count, count, set, count, set, set} {
		out, err := s.Eval(ctx, ModeCheck, []Op{op})
		if err != nil {
			t.Fatalf("op %d: %v", i, err)
		}
		want := 1.0
		if i == 1 {
			want = 2
		}
		if out[0].Count != want {
			t.Fatalf("op %d: count %v, want %v", i, out[0].Count, want)
		}
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			if _, err := s.Eval(ctx, ModePeek, []Op{count, set}); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
}

// FuzzOverrideKinds replaces one rule by name with rules of either counting
// kind, with or without a ban, between checks and peeks: the memory store
// never panics or errs, and a distinct set never exceeds the highest limit it
// was counted under by more than one member.
func FuzzOverrideKinds(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7})
	f.Add([]byte{1, 1, 1, 0, 0, 0, 9, 9, 9})
	f.Fuzz(func(t *testing.T, steps []byte) {
		if len(steps) > 200 {
			steps = steps[:200]
		}
		ctx := context.Background()
		l, err := New(Config{Name: "fuzz", Store: NewMemoryStore()})
		if err != nil {
			t.Fatal(err)
		}
		var setLimit int64 // the highest limit the set was counted under
		for i, b := range steps {
			limit := int64(b>>4)%4 + 1
			r := Rule{Name: "r", Characteristics: []string{"ip"}, Limit: limit, Period: time.Minute, Action: ActionLimit}
			if b&1 == 1 {
				r.CountDistinct = "user"
			} else if b&2 == 2 {
				r.BanFor = time.Hour
			}
			if b&4 == 4 {
				r.Action = ActionLog
			}
			if err := l.SetRules([]Rule{r}); err != nil {
				t.Fatalf("step %d: %v", i, err)
			}
			id := Identifier{"ip": "192.0.2.1", "user": string(rune('a' + int(b>>3)%5))}
			res := l.Check(ctx, id)
			if b&8 == 8 {
				res = l.Peek(ctx, id)
			}
			if res.Err != nil || res.Info == nil {
				t.Fatalf("step %d (%08b): %+v", i, b, res)
			}
			if r.CountDistinct != "" {
				setLimit = max(setLimit, limit) // the set outlives volume rules between
			}
			if r.CountDistinct != "" && res.Info.Count > float64(setLimit)+1 {
				t.Fatalf("step %d: set of %v members, limits up to %d", i, res.Info.Count, setLimit)
			}
		}
	})
}
