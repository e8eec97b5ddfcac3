package redisstore

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// A pipelined connection to one standalone Redis: ratekit's own lean client
// behind Dial. Callers encode their command into a pooled request and queue
// it; the connection's writer sends everything queued in one write, then
// whatever arrived meanwhile (pipelining by construction: the more callers,
// the larger the writes, and no timer ever delays a lone caller), and its
// reader matches replies to requests in order. A caller waits for its reply
// or its context, whichever comes first.
//
// When the connection breaks (an I/O error, or no reply for readTimeout while
// requests are pending: a hung server) every pending request fails at once and
// the connection is dialled again in the background; until it is back, new
// requests fail at once instead of waiting.

// ErrClosed is returned by a Store's calls after Close.
var ErrClosed = errors.New("redisstore: store closed")

const (
	maxQueued   = 4096 // requests waiting for the writer, per connection
	maxInflight = 4096 // requests written and waiting for their reply, per connection
	readBufSize = 32 << 10
	maxBackoff  = time.Second
)

// connConfig is how the connections of one Store dial and greet the server.
type connConfig struct {
	network     string // "tcp" or "unix"
	addr        string
	user        string
	password    string
	db          int
	tls         *tls.Config
	dialTimeout time.Duration
	readTimeout time.Duration // a pending request with no reply for this long breaks the connection
	dial        func(ctx context.Context, network, addr string) (net.Conn, error)
}

// connPool is a Store's few pipelined connections.
type connPool struct {
	cfg     connConfig
	conns   []*conn
	next    atomic.Uint32
	closing chan struct{}
	wg      sync.WaitGroup
	once    sync.Once
}

// conn is one pipelined connection, re-dialled whenever it breaks.
type conn struct {
	pool *connPool

	up atomic.Bool // sess != nil, read without the lock by pick

	mu      sync.Mutex
	sess    *session   // the running session, nil while down
	down    error      // why there is no session
	closed  bool       // Close was called
	queue   []*request // requests waiting to be written
	writing bool       // a writer (a caller or the session's writer) owns the queue's next batch

	// The writer's buffers, used only by whoever has writing set.
	spare []*request
	wbuf  []byte
}

// session is one TCP (or TLS) connection of a conn.
type session struct {
	nc       net.Conn
	dead     chan struct{} // closed when the session ends
	kill     sync.Once
	cause    error
	wake     chan struct{} // cap 1: the writer goroutine takes over the queue
	inflight chan *request // written, in order, awaiting their reply
	pending  atomic.Int64  // requests written and not yet answered
	armed    atomic.Int64  // unix nanos when a writer last started the hung-server clock
	writers  sync.WaitGroup
}

func (s *session) end(err error) {
	s.kill.Do(func() {
		s.cause = err
		close(s.dead)
		_ = s.nc.Close()
	})
}

// newConnPool dials n connections. The first dial's error is returned, so
// that a wrong address or password fails at start-up; after that connections
// come back on their own.
func newConnPool(ctx context.Context, cfg connConfig, n int) (*connPool, error) {
	p := &connPool{cfg: cfg, closing: make(chan struct{})}
	for range n {
		c := &conn{pool: p}
		nc, br, err := p.connect(ctx)
		if err != nil {
			p.close()
			return nil, err
		}
		p.conns = append(p.conns, c)
		p.wg.Add(1)
		go c.run(c.start(nc), br)
	}
	return p, nil
}

// close stops every connection, fails what is pending with ErrClosed and
// waits for the connections' goroutines to end.
func (p *connPool) close() {
	p.once.Do(func() { close(p.closing) })
	p.wg.Wait()
}

// connect dials the server and greets it: AUTH, SELECT and SCRIPT LOAD of
// evaluate.lua (so that EVALSHA finds it), within the dial timeout.
func (p *connPool) connect(ctx context.Context) (net.Conn, *bufio.Reader, error) {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.dialTimeout)
	defer cancel()
	nc, err := p.cfg.dial(ctx, p.cfg.network, p.cfg.addr)
	if err != nil {
		return nil, nil, fmt.Errorf("dial %s: %w", p.cfg.addr, err)
	}
	if p.cfg.tls != nil {
		tc := tls.Client(nc, p.cfg.tls)
		if err := tc.HandshakeContext(ctx); err != nil {
			_ = nc.Close()
			return nil, nil, fmt.Errorf("TLS handshake with %s: %w", p.cfg.addr, err)
		}
		nc = tc
	}
	dl, _ := ctx.Deadline()
	_ = nc.SetDeadline(dl)
	// Closing the connection when ctx ends (Close, or the caller of Dial
	// giving up) unblocks the greeting below.
	unblock := context.AfterFunc(ctx, func() { _ = nc.Close() })
	defer unblock()
	br := bufio.NewReaderSize(nc, readBufSize)
	var hello [][]string
	switch {
	case p.cfg.password != "" && p.cfg.user != "":
		hello = append(hello, []string{"AUTH", p.cfg.user, p.cfg.password})
	case p.cfg.password != "":
		hello = append(hello, []string{"AUTH", p.cfg.password})
	}
	if p.cfg.db != 0 {
		hello = append(hello, []string{"SELECT", fmt.Sprint(p.cfg.db)})
	}
	hello = append(hello, []string{"SCRIPT", "LOAD", evaluateLua})
	var buf []byte
	for _, args := range hello {
		buf = appendArrayHeader(buf, len(args))
		for _, a := range args {
			buf = appendBulk(buf, a)
		}
	}
	fail := func(err error) (net.Conn, *bufio.Reader, error) {
		_ = nc.Close()
		if ctx.Err() != nil {
			err = fmt.Errorf("%w (%w)", err, ctx.Err())
		}
		return nil, nil, fmt.Errorf("greeting %s: %w", p.cfg.addr, err)
	}
	if _, err := nc.Write(buf); err != nil {
		return fail(err)
	}
	var r request
	for _, args := range hello {
		if err := readReply(br, &r); err != nil {
			return fail(err)
		}
		if r.err != nil {
			return fail(fmt.Errorf("%s: %w", args[0], r.err))
		}
	}
	if !unblock() {
		return fail(ctx.Err())
	}
	_ = nc.SetDeadline(time.Time{})
	return nc, br, nil
}

// pick returns the connection for the next request: round robin over those
// that are up.
func (p *connPool) pick() *conn {
	n := uint32(len(p.conns))
	i := p.next.Add(1)
	for k := range n {
		c := p.conns[(i+k)%n]
		if c.isUp() {
			return c
		}
	}
	return p.conns[i%n]
}

func (c *conn) isUp() bool { return c.up.Load() }

// do sends r and waits for its reply or for ctx. On return the caller owns r
// again, unless ctx ended first: then the connection recycles it once its
// reply has been read, which keeps the replies in order.
func (p *connPool) do(ctx context.Context, r *request) (abandoned bool, err error) {
	if err := p.send(r); err != nil {
		return false, err
	}
	select {
	case <-r.done:
		return false, nil
	case <-ctx.Done():
		if r.state.CompareAndSwap(reqPending, reqAbandoned) {
			return true, ctx.Err()
		}
		<-r.done // completed meanwhile: the reply is ours
		return false, nil
	}
}

// call is do, with the reply's error (an error reply, or why the request got
// none) returned as err.
func (p *connPool) call(ctx context.Context, r *request) (abandoned bool, err error) {
	abandoned, err = p.do(ctx, r)
	if err == nil {
		err = r.err
	}
	return abandoned, err
}

// send queues r on the next connection; see conn.send.
func (p *connPool) send(r *request) error { return p.pick().send(r) }

// send queues r, or fails at once when the connection is down or its queue
// full: a check never waits for a server that is gone.
//
// When nothing is being written and no reply is due, the caller writes its
// request itself, saving the hand-over to the writer goroutine: the usual
// case with few callers. Its write cannot block, as the server has read all
// that came before. Otherwise the request waits for the writer goroutine,
// which sends all that is queued in one write, then whatever arrived
// meanwhile, and is the only one to wait for a slow server.
func (c *conn) send(r *request) error {
	c.mu.Lock()
	s := c.sess
	switch {
	case c.closed:
		c.mu.Unlock()
		return ErrClosed
	case s == nil:
		err := c.down // set before sess is cleared
		c.mu.Unlock()
		return err
	case len(c.queue) >= maxQueued:
		c.mu.Unlock()
		return fmt.Errorf("%d requests queued on a connection to %s", maxQueued, c.pool.cfg.addr)
	}
	c.queue = append(c.queue, r)
	if c.writing {
		c.mu.Unlock() // the writer takes it with its next batch
		return nil
	}
	c.writing = true
	if s.pending.Load() != 0 {
		c.mu.Unlock()
		s.wakeWriter()
		return nil
	}
	s.writers.Add(1)
	defer s.writers.Done()
	batch := c.takeLocked()
	c.mu.Unlock()
	if !c.writeBatch(s, batch) {
		return nil // the session ended: r has failed with it
	}
	c.mu.Lock()
	if c.sess == s && len(c.queue) == 0 {
		c.writing = false
		c.mu.Unlock()
		return nil
	}
	c.mu.Unlock()
	s.wakeWriter() // more arrived meanwhile: the writer goroutine takes over
	return nil
}

func (s *session) wakeWriter() {
	select {
	case s.wake <- struct{}{}:
	default: // a wake-up is pending already
	}
}

// takeLocked returns the queue as the next batch and gives the queue the
// spare slice. c.mu is held, and c.writing owned by the caller.
func (c *conn) takeLocked() []*request {
	batch := c.queue
	c.queue, c.spare = c.spare[:0], nil
	return batch
}

// run serves the connection until Close: one session per TCP connection,
// dialling again with a backoff after each breaks.
func (c *conn) run(s *session, br *bufio.Reader) {
	defer c.pool.wg.Done()
	backoff := 10 * time.Millisecond
	for {
		if s != nil {
			c.serve(s, br)
			s = nil
			backoff = 10 * time.Millisecond
		}
		select {
		case <-c.pool.closing:
			c.mu.Lock()
			c.closed = true
			c.mu.Unlock()
			return
		default:
		}
		// Close cancels a dial or greeting in progress.
		ctx, cancel := context.WithCancel(context.Background())
		go func() {
			select {
			case <-c.pool.closing:
				cancel()
			case <-ctx.Done():
			}
		}()
		nc, r, err := c.pool.connect(ctx)
		cancel()
		if err == nil {
			s, br = c.start(nc), r
			continue
		}
		c.mu.Lock()
		c.down = err
		c.mu.Unlock()
		t := time.NewTimer(backoff)
		select {
		case <-c.pool.closing:
			t.Stop()
		case <-t.C:
		}
		backoff = min(2*backoff, maxBackoff)
	}
}

// start makes nc the connection's session: from here on requests are sent
// on it (and wait in the socket until serve starts the reader).
func (c *conn) start(nc net.Conn) *session {
	s := &session{
		nc:       nc,
		dead:     make(chan struct{}),
		wake:     make(chan struct{}, 1),
		inflight: make(chan *request, maxInflight),
	}
	c.mu.Lock()
	c.sess, c.down, c.writing = s, nil, false
	c.up.Store(true)
	c.mu.Unlock()
	return s
}

// serve runs session s: its writer and reader goroutines, until either fails
// or Close. Then everything pending fails with the cause.
func (c *conn) serve(s *session, br *bufio.Reader) {
	readerDone, writerDone := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(readerDone)
		c.read(s, br)
	}()
	go func() {
		defer close(writerDone)
		c.write(s)
	}()

	select {
	case <-s.dead:
	case <-c.pool.closing:
		s.end(ErrClosed)
	}
	err := fmt.Errorf("connection to %s: %w", c.pool.cfg.addr, s.cause)
	c.mu.Lock()
	c.sess, c.down = nil, err
	c.up.Store(false)
	queued := c.queue
	c.queue = nil
	c.mu.Unlock()
	// No writer can start on s any more; wait for those at work, which stop
	// at their next step now that s is dead, so that nothing enters inflight
	// after it is drained below.
	s.writers.Wait()
	<-writerDone
	<-readerDone
	for _, r := range queued {
		r.fail(err)
	}
	for {
		select {
		case r := <-s.inflight:
			r.fail(err)
		default:
			return
		}
	}
}

// write is the session's writer goroutine: woken when callers queued
// requests while a write was in progress or replies were due, it writes
// everything queued, round after round, until the queue is empty.
func (c *conn) write(s *session) {
	for {
		select {
		case <-s.wake:
		case <-s.dead:
			return
		}
		// Let the callers that are runnable right now (typically those whose
		// replies just came in) queue their next request before the batch is
		// taken: otherwise the writer, woken by the first of them, would run
		// ahead of the others and write one request at a time. This waits for
		// no timer: with no one else runnable it returns at once.
		runtime.Gosched()
		for {
			c.mu.Lock()
			if c.sess != s {
				c.mu.Unlock()
				return
			}
			if len(c.queue) == 0 {
				c.writing = false
				c.mu.Unlock()
				break
			}
			batch := c.takeLocked()
			c.mu.Unlock()
			if !c.writeBatch(s, batch) {
				return
			}
		}
	}
}

// writeBatch writes batch in one write and hands its requests to the reader.
// It reports false when the session ended; the requests not handed over have
// then failed.
func (c *conn) writeBatch(s *session, batch []*request) bool {
	buf := c.wbuf[:0]
	n := 0
	for i, r := range batch {
		batch[i] = nil
		if r.state.Load() == reqAbandoned { // its caller is gone and it was never sent
			putRequest(r)
			continue
		}
		select {
		case <-s.dead:
		default:
			buf = append(buf, r.cmd...)
			if s.pending.Add(1) == 1 {
				// The first request after a quiet spell starts the clock of the
				// hung-server check; later ones are covered by the reader,
				// which restarts it as replies come in.
				now := time.Now()
				s.armed.Store(now.UnixNano())
				_ = s.nc.SetReadDeadline(now.Add(c.pool.cfg.readTimeout))
			}
			select {
			case s.inflight <- r:
				n++
				continue
			case <-s.dead:
			}
		}
		err := fmt.Errorf("connection to %s: %w", c.pool.cfg.addr, s.cause)
		r.fail(err)
		for _, r := range batch[i+1:] {
			r.fail(err)
		}
		clear(batch)
		return false
	}
	c.spare = batch[:0]
	if cap(buf) <= 1<<20 { // a burst may grow it: keep no more than that for good
		c.wbuf = buf
	}
	if n == 0 {
		return true
	}
	if _, err := s.nc.Write(buf); err != nil {
		s.end(err)
		return false
	}
	return true
}

var errHung = errors.New("no reply within the read timeout")

// read matches replies to the written requests, in order, until the session
// ends.
func (c *conn) read(s *session, br *bufio.Reader) {
	rt := c.pool.cfg.readTimeout
	var lastSet time.Time // when the reader last moved the read deadline
	for {
		// Wait for a reply's first byte: the connection is read even while
		// idle, so that a server that goes away is noticed before the next
		// request is written to it.
		if _, err := br.Peek(1); err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				now := time.Now()
				since := min(now.Sub(lastSet), now.Sub(time.Unix(0, s.armed.Load())))
				if s.pending.Load() == 0 || since < rt-rt/8 {
					// Idle, or a request written just as an older deadline
					// passed: not hung. Look again in a while.
					_ = s.nc.SetReadDeadline(now.Add(rt))
					lastSet = now
					continue
				}
				err = errHung
			}
			s.end(err)
			return
		}
		var r *request
		select {
		case r = <-s.inflight:
		default:
			s.end(fmt.Errorf("%w: a reply to no request", errProtocol))
			return
		}
		read := readReply
		if r.replies > 0 {
			read = readReplies
		}
		if err := read(br, r); err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				err = errHung
			}
			s.end(err)
			r.fail(fmt.Errorf("connection to %s: %w", c.pool.cfg.addr, err))
			return
		}
		left := s.pending.Add(-1) // before complete: the caller may send again at once
		r.complete()
		if left > 0 {
			// More replies are due: a reply is progress, restart the clock
			// (not at every reply: it moves by an eighth of the timeout at
			// least, so a server is given up after 7/8 of it without a reply).
			if now := time.Now(); now.Sub(lastSet) > rt/8 {
				_ = s.nc.SetReadDeadline(now.Add(rt))
				lastSet = now
			}
		}
	}
}
