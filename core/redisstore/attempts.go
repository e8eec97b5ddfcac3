package redisstore

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	ratelimit "github.com/ratekit/ratekit/core"
)

// withDeadline adds ctx's error to err, the failure of a call made with ctx,
// once ctx's deadline has passed: a call waiting for a connection attempt
// gets the attempt's outcome whatever its context, here the closed
// connection of an attempt given up at the call's deadline (often before
// ctx's own timer has fired: Err is still nil), and a caller tells a timeout
// by errors.Is(err, context.DeadlineExceeded). Each check of a
// *ratelimit.BatchError gets it too.
func withDeadline(ctx context.Context, err error) error {
	if err == nil {
		return err
	}
	cerr := ctx.Err()
	if dl, ok := ctx.Deadline(); cerr == nil && ok && !time.Now().Before(dl) {
		cerr = context.DeadlineExceeded
	}
	if cerr == nil || errors.Is(err, cerr) {
		return err
	}
	if be := (*ratelimit.BatchError)(nil); errors.As(err, &be) {
		for i, e := range be.Errs {
			be.Errs[i] = withDeadline(ctx, e)
		}
		return err
	}
	return fmt.Errorf("%w: %w", err, cerr)
}

// attempts bounds rueidis' connection attempts made once the store is
// connected, so that a check returns by its deadline while a connection to a
// hung server is re-established. rueidis dials one connection per server at
// a time, and every other call to that server waits for the attempt in
// mux._pipe, whatever its context (rueidis v1.0.80, as upstream in
// redis/rueidis#683). Its own refreshes (a Cluster's topology, a Sentinel's
// master check) dial with context.Background, so the attempt lasts up to the
// dial timeout (5s by default), which also bounds the handshake: a stopped
// server's kernel accepts the connection and nothing ever answers HELLO.
//
// So an attempt is given up (its dial canceled, its connection closed) when
// the server has answered nothing by the earliest deadline of the calls
// that may wait for it: the rueidis calls made while it runs (boundedClient
// registers their deadlines; a check queued in a combiner calls nothing and
// returns by its own deadline) and those of the checks already on their way
// when it starts, whose time is estimated by the shortest check time noted
// (note) in this second or the previous one. A check is noted before its
// calls look for attempts, and an attempt is published before it reads the
// shortest time: with sequentially consistent atomics, a call either is
// seen by the attempt or sees it. Giving an attempt up fails every call
// waiting for it, those with later deadlines too: rueidis hands them all
// the attempt's outcome. While a limiter's breaker is open its prober is
// the only caller, with a deadline of its own (BreakerConfig.ProbeTimeout),
// so a connection whose set-up outlasts the checks' timeout still comes.
type attempts struct {
	cur, prev atomic.Int64 // shortest check time (ns) noted this second and the one before; 0: none
	sec       atomic.Int64 // the second (Unix) of cur
	running   atomic.Int32 // attempts not yet answered

	mu     sync.Mutex
	active map[*attempt]struct{}
}

// attempt is one connection attempt until the server answers.
type attempt struct {
	cancel   context.CancelFunc // ends the dial
	timer    *time.Timer        // gives the attempt up at deadline
	deadline time.Time
	conn     net.Conn // once dialed
	done     bool     // answered, failed or given up
	givenUp  bool     // by giveUp
}

// note notes the time that ctx leaves a check. A context without deadline,
// or one already past, bounds nothing.
func (a *attempts) note(ctx context.Context) {
	dl, ok := ctx.Deadline()
	if !ok {
		return
	}
	now := time.Now()
	left := int64(dl.Sub(now))
	if left <= 0 {
		return
	}
	sec := now.Unix()
	if s := a.sec.Load(); s != sec && a.sec.CompareAndSwap(s, sec) {
		// A new second. The last time noted is kept, so that an idle second
		// does not forget the checks' timeout; it is in prev before cur is
		// cleared, so a start between the two still sees it (and a time
		// noted meanwhile stays in cur).
		if c := a.cur.Load(); c != 0 {
			a.prev.Store(c)
			a.cur.CompareAndSwap(c, 0)
		}
	}
	for {
		c := a.cur.Load()
		if c != 0 && c <= left {
			break
		}
		if a.cur.CompareAndSwap(c, left) {
			break
		}
	}
}

// wait gives the connection attempts running up by ctx's deadline: a call
// with ctx is about to be made, and may wait for one of them.
func (a *attempts) wait(ctx context.Context) {
	if a.running.Load() == 0 {
		return
	}
	dl, ok := ctx.Deadline()
	if !ok || !time.Now().Before(dl) {
		return // as note: a deadline already past must not end others' attempts
	}
	a.mu.Lock()
	for at := range a.active {
		at.giveUpBy(dl)
	}
	a.mu.Unlock()
}

// boundedClient is the store's rueidis client: each call first gives the
// connection attempts running up by its deadline.
type boundedClient struct {
	rueidis.Client
	tries *attempts
}

func (c *boundedClient) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	c.tries.wait(ctx)
	return c.Client.Do(ctx, cmd)
}

func (c *boundedClient) DoMulti(ctx context.Context, multi ...rueidis.Completed) []rueidis.RedisResult {
	c.tries.wait(ctx)
	return c.Client.DoMulti(ctx, multi...)
}

// start publishes a connection attempt that ends by cancel and returns it.
// Until a check with a deadline is noted, only rueidis bounds it.
func (a *attempts) start(cancel context.CancelFunc) *attempt {
	at := &attempt{cancel: cancel}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.active == nil {
		a.active = map[*attempt]struct{}{}
	}
	a.active[at] = struct{}{}
	at.timer = time.AfterFunc(time.Hour, func() { a.giveUp(at) }) // moved earlier by giveUpBy, stopped by end
	a.running.Add(1)
	left := a.cur.Load()
	if p := a.prev.Load(); p != 0 && (left == 0 || p < left) {
		left = p
	}
	if left != 0 {
		at.giveUpBy(time.Now().Add(time.Duration(left)))
	}
	return at
}

// giveUpBy moves the attempt's end to dl if that is earlier. Called with
// a.mu held.
func (at *attempt) giveUpBy(dl time.Time) {
	if at.done || (!at.deadline.IsZero() && !dl.Before(at.deadline)) {
		return
	}
	at.deadline = dl
	at.timer.Reset(time.Until(dl))
}

// giveUp ends an attempt that the server has not answered by its deadline:
// the dial is canceled, the connection closed, and rueidis' handshake fails,
// releasing the calls that wait for it.
func (a *attempts) giveUp(at *attempt) {
	a.mu.Lock()
	if at.done {
		a.mu.Unlock()
		return
	}
	a.endLocked(at)
	at.givenUp = true
	conn := at.conn
	a.mu.Unlock()
	at.cancel()
	if conn != nil {
		_ = conn.Close()
	}
}

// end ends an attempt that needs no bound any longer: the server answered,
// the dial failed, or rueidis closed the connection. It reports whether
// giveUp ended it first.
func (a *attempts) end(at *attempt) (givenUp bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !at.done {
		a.endLocked(at)
		at.timer.Stop()
	}
	return at.givenUp
}

func (a *attempts) endLocked(at *attempt) {
	at.done = true
	delete(a.active, at)
	a.running.Add(-1)
}

// dialed hands the attempt its connection, and returns the connection that
// rueidis gets: one that ends the attempt when the server first answers.
// false: the attempt was given up meanwhile (the connection is closed).
func (a *attempts) dialed(at *attempt, conn net.Conn) (net.Conn, bool) {
	a.mu.Lock()
	given := at.done
	if !given {
		at.conn = conn
	}
	a.mu.Unlock()
	if given {
		_ = conn.Close()
		return nil, false
	}
	return &answerConn{Conn: conn, a: a, at: at}, true
}

// answerConn is a connection of a bounded attempt: its first read of any
// byte ends the attempt (the server is alive; the handshake goes on under
// rueidis' own timeout).
type answerConn struct {
	net.Conn
	a        *attempts
	at       *attempt
	answered atomic.Bool
}

func (c *answerConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 && !c.answered.Load() {
		c.answered.Store(true)
		c.a.end(c.at)
	}
	return n, err
}

func (c *answerConn) Close() error {
	c.a.end(c.at)
	return c.Conn.Close()
}
