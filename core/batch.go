package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"time"
)

// BatchStore is implemented by a Store that can apply the ops of several
// checks in one call: one round trip to a network store instead of one per
// check. CheckBatch sends it the checks of a batch whose limiters share it;
// a Store without it gets one Eval per check.
type BatchStore interface {
	// EvalBatch applies each element of batch as Eval would apply it on its
	// own, element after element in order, and returns one []OpResult per
	// element (each as long as its ops). The elements are independent
	// checks: an exceeded Terminal op stops the later ops of its own
	// element only. An element's ops see the writes of the elements before
	// it, exactly as consecutive Eval calls would. An error fails the whole
	// batch, unless it is a *BatchError with an error per element: then
	// only the elements whose error is not nil failed, and the others'
	// outcomes are in the lists returned with it.
	EvalBatch(ctx context.Context, mode Mode, batch [][]Op) ([][]OpResult, error)
}

// BatchError is the error of an EvalBatch call that failed for some of its
// checks only: a Redis Cluster master that does not answer fails the checks
// with a key on it, not those of the masters that answered, which
// CheckBatch then enforces. Errs[i] is the error of the batch's check i, nil
// when its outcomes are in the call's results.
type BatchError struct {
	Errs []error
}

func (e *BatchError) Error() string {
	n, first := 0, error(nil)
	for _, err := range e.Errs {
		if err != nil {
			if first == nil {
				first = err
			}
			n++
		}
	}
	return fmt.Sprintf("%d of %d checks failed: %v", n, len(e.Errs), first)
}

// Unwrap returns the checks' errors, for errors.Is and errors.As.
func (e *BatchError) Unwrap() []error {
	var errs []error
	for _, err := range e.Errs {
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

// batchStore returns s as a BatchStore when CheckBatch may group checks on
// it: it implements the interface, it is not the memory store (whose
// per-check path already costs no round trip and no allocation), and its
// values compare (checks are grouped by store, comparing interface values).
func batchStore(s Store, memory bool) BatchStore {
	b, ok := s.(BatchStore)
	if !ok || memory || !reflect.TypeOf(s).Comparable() {
		return nil
	}
	return b
}

// Request is one check of CheckBatch: the arguments of a Limiter.Check.
type Request struct {
	Limiter    *Limiter
	Identifier Identifier
	// Options are the check's options (Cost, WithRules); nil for cost 1.
	Options []CheckOption
}

// CheckBatch checks every request and returns their results, in order. Each
// result is what reqs[i].Limiter.Check(ctx, reqs[i].Identifier,
// reqs[i].Options...) would return if the requests were checked one after
// another: its own rules, skip, terminal block, ban, enforcement mode,
// blocked-cache answer and observer event. A check's terminal block never
// stops another check's counting.
//
// What a batch saves is store calls: the checks whose limiters share a store
// that implements BatchStore go to it in one EvalBatch call, one round trip,
// under the shortest Timeout of their limiters. A store failure fails open
// every check of that call, or only the checks it names (a *BatchError: on
// a Redis Cluster, those with a key on a master that did not answer); each
// limiter's circuit breaker counts each check's outcome, and a check whose
// breaker is open fails open without joining the call.
//
// The blocked cache is read for every check before the call, as checks
// running concurrently read it: a check is not answered from a block that an
// earlier check of the same batch finds (the store finds it too: a ban
// without counting, an over-limit counter by counting it), and an entry
// that one check of the batch refreshes still answers the others. The
// verdicts are those of one-by-one checks; the count and reset that an
// answer reports for a blocked counter can differ (by the cost of the checks
// before it in the batch), and so can Degraded, which a check sets for the
// rules it planned after a block the store then found.
func CheckBatch(ctx context.Context, reqs []Request) []Result {
	res := make([]Result, len(reqs))
	runBatch(ctx, res, ModeCheck, reqs)
	return res
}

// batchItem is one check of a batch between its phases.
type batchItem struct {
	l     *Limiter
	res   *Result // the caller's result, or one on the heap for the observer
	sc    *scratch
	p     plan
	start time.Time
	enf   Enforcement
	send  bool // the check has ops for the store
	done  bool // the store call of the check was made
	outs  []OpResult
	err   error
}

// batchPool holds the item lists of finished batches. Worth it: without it
// BenchmarkCheckBatch/memory/batch is 56% slower (3 allocations, not 1).
var batchPool = sync.Pool{New: func() any { return new([]batchItem) }}

func runBatch(ctx context.Context, res []Result, mode Mode, reqs []Request) {
	pooled := batchPool.Get().(*[]batchItem)
	items := *pooled
	if cap(items) < len(reqs) {
		items = make([]batchItem, len(reqs))
	}
	items = items[:len(reqs)]
	defer func() {
		for i := range items {
			if items[i].sc != nil {
				putScratch(items[i].sc)
			}
		}
		if cap(items) <= 64 { // a huge batch's list is not worth keeping
			clear(items)
			*pooled = items[:0]
			batchPool.Put(pooled)
		}
	}()
	for i := range reqs {
		rq, it := &reqs[i], &items[i]
		l := rq.Limiter
		if l == nil {
			res[i] = Result{Action: ActionAllow, Err: fmt.Errorf("ratelimit: batch request #%d has no limiter", i)}
			continue
		}
		it.l, it.res, it.start = l, &res[i], l.now()
		it.enf = Enforcement(l.mode.Load())
		if l.observer != nil {
			it.res = new(Result) // the observer gets a pointer, as in run
		}
		o := checkOpts{cost: 1}
		if len(rq.Options) > 0 {
			o = applyOpts(rq.Options)
		}
		it.sc = getScratch()
		it.send = l.prepare(ctx, it.res, &it.p, it.sc, rq.Identifier, o, it.start) && len(it.sc.ops) > 0
	}
	for i := range items {
		it := &items[i]
		if !it.send || it.done {
			continue
		}
		if it.l.batch == nil {
			it.outs, it.err = it.l.eval(ctx, mode, it.sc.ops, it.sc, it.start)
			it.done = true
			continue
		}
		evalGroup(ctx, mode, items[i:])
	}
	for i := range items {
		it := &items[i]
		if it.l == nil {
			continue
		}
		id := reqs[i].Identifier
		switch {
		case it.send && it.err != nil:
			*it.res = it.l.failOpen(ctx, it.err, id)
		case it.send:
			it.l.interpret(it.res, &it.p, it.sc, it.outs, mode, it.start)
			it.l.finish(it.res, &it.p, it.sc)
		case it.res.Err == nil:
			it.l.finish(it.res, &it.p, it.sc)
		}
		it.l.applyMode(it.res, it.enf)
		if it.l.observer != nil {
			it.l.observe(ctx, Event{Kind: eventKind(mode), Limiter: it.l.name, Identifier: id, Result: it.res, Duration: it.l.now().Sub(it.start)})
			res[i] = *it.res
		}
	}
}

// evalGroup makes one EvalBatch call for items[0] and every later item
// still to send whose limiter has the same batch store, leaving each item's
// outcomes or error in it.
func evalGroup(ctx context.Context, mode Mode, items []batchItem) {
	first := items[0].l
	group := make([]*batchItem, 0, len(items))
	ops := make([][]Op, 0, len(items))
	timeout := first.timeout
	for i := range items {
		it := &items[i]
		if !it.send || it.done || it.l.batch == nil || it.l.store != first.store {
			continue
		}
		it.done = true
		if !it.l.allow(it.sc.ops) {
			it.err = fmt.Errorf("ratelimit: store %s: %w", mode, ErrCircuitOpen)
			continue
		}
		group = append(group, it)
		ops = append(ops, it.sc.ops)
		timeout = min(timeout, it.l.timeout)
	}
	if len(group) == 0 {
		return
	}
	outs, err := callBatch(ctx, first, timeout, mode, ops)
	// Some checks failed, each with its own error: the others stand.
	var errs []error
	if be := (*BatchError)(nil); errors.As(err, &be) && len(be.Errs) == len(ops) && len(outs) == len(ops) {
		errs, err = be.Errs, nil
	}
	if err == nil && len(outs) != len(ops) {
		err = fmt.Errorf("store returned %d outcome lists for %d checks", len(outs), len(ops))
	}
	for i := 0; err == nil && i < len(outs); i++ {
		if len(outs[i]) != len(ops[i]) && (errs == nil || errs[i] == nil) {
			err = fmt.Errorf("store returned %d outcomes for %d ops of check #%d", len(outs[i]), len(ops[i]), i)
		}
	}
	for i, it := range group {
		e := err
		if e == nil && errs != nil {
			e = errs[i]
		}
		if e != nil || !it.l.breaker.steady() || it.l.parts != nil && !it.l.partsSteady(ops[i]) {
			it.l.record(ctx, e, ops[i])
		}
		if e != nil {
			it.err = fmt.Errorf("ratelimit: store %s: %w", mode, e)
			continue
		}
		it.outs = outs[i]
	}
}

// callBatch calls l's batch store under timeout, as eval calls a store
// under the limiter's: directly when the store returns by the context's
// deadline on its own, else from a guard goroutine that gets copies of the
// ops (it may still read them after a timeout, when the scratches that hold
// them are reused). The keys need no copy: for a store other than the memory
// store they are the check's own strings already (see ownKeys).
func callBatch(ctx context.Context, l *Limiter, timeout time.Duration, mode Mode, ops [][]Op) ([][]OpResult, error) {
	if !l.local && !l.bounded {
		owned := make([][]Op, len(ops))
		for i := range ops {
			owned[i] = append([]Op(nil), ops[i]...)
		}
		ops = owned
	}
	return callStoreWithin(l, timeout, ctx, func(ctx context.Context) (outs [][]OpResult, err error) {
		defer recoverStore(&err)
		return l.batch.EvalBatch(ctx, mode, ops)
	})
}
