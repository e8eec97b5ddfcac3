package redisstore

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
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

	mu     sync.Mutex
	up     bool       // a session is running: requests may be queued
	down   error      // why not, when !up
	queue  []*request // requests waiting for the writer
	closed bool

	wake chan struct{} // cap 1: the queue went from empty to non-empty
}

// session is one TCP (or TLS) connection of a conn.
type session struct {
	nc       net.Conn
	dead     chan struct{} // closed when the session ends
	kill     sync.Once
	cause    error
	inflight chan *request // written, in order, awaiting their reply
	pending  atomic.Int64  // requests written and not yet answered
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
		c := &conn{pool: p, wake: make(chan struct{}, 1)}
		nc, br, err := p.connect(ctx)
		if err != nil {
			p.close()
			return nil, err
		}
		p.conns = append(p.conns, c)
		c.up = true
		p.wg.Add(1)
		go c.run(nc, br)
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
	nc, err := p.cfg.dial(ctx, "tcp", p.cfg.addr)
	if err != nil {
		return nil, nil, fmt.Errorf("redisstore: dial %s: %w", p.cfg.addr, err)
	}
	if p.cfg.tls != nil {
		tc := tls.Client(nc, p.cfg.tls)
		if err := tc.HandshakeContext(ctx); err != nil {
			_ = nc.Close()
			return nil, nil, fmt.Errorf("redisstore: TLS handshake with %s: %w", p.cfg.addr, err)
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
		return nil, nil, fmt.Errorf("redisstore: greeting %s: %w", p.cfg.addr, err)
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

func (c *conn) isUp() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.up
}

// do sends r and waits for its reply or for ctx. On return the caller owns r
// again, unless ctx ended first: then the connection recycles it once its
// reply has been read, which keeps the replies in order.
func (p *connPool) do(ctx context.Context, r *request) (abandoned bool, err error) {
	if err := p.pick().enqueue(r); err != nil {
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

// enqueue queues r for the writer, or fails at once when the connection is
// down or its queue full: a check never waits for a server that is gone.
func (c *conn) enqueue(r *request) error {
	c.mu.Lock()
	switch {
	case c.closed:
		c.mu.Unlock()
		return ErrClosed
	case !c.up:
		err := c.down
		c.mu.Unlock()
		return err
	case len(c.queue) >= maxQueued:
		c.mu.Unlock()
		return fmt.Errorf("redisstore: %d requests queued on a connection to %s", maxQueued, c.pool.cfg.addr)
	}
	first := len(c.queue) == 0
	c.queue = append(c.queue, r)
	c.mu.Unlock()
	if first {
		select {
		case c.wake <- struct{}{}:
		default: // the writer has a wake-up pending already
		}
	}
	return nil
}

// run serves the connection until Close: one session per TCP connection,
// dialling again with a backoff after each breaks.
func (c *conn) run(nc net.Conn, br *bufio.Reader) {
	defer c.pool.wg.Done()
	backoff := 10 * time.Millisecond
	for {
		if nc != nil {
			c.serve(nc, br)
			backoff = 10 * time.Millisecond
		}
		select {
		case <-c.pool.closing:
			c.mu.Lock()
			c.closed, c.up = true, false
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
		var err error
		nc, br, err = c.pool.connect(ctx)
		cancel()
		if err == nil {
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

// serve runs one session: the writer here, the reader in its own goroutine.
// When either fails, or on Close, everything pending fails with the cause.
func (c *conn) serve(nc net.Conn, br *bufio.Reader) {
	s := &session{nc: nc, dead: make(chan struct{}), inflight: make(chan *request, maxInflight)}
	c.mu.Lock()
	c.up, c.down = true, nil
	c.mu.Unlock()
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		c.read(s, br)
	}()
	c.write(s)

	err := fmt.Errorf("redisstore: connection to %s: %w", c.pool.cfg.addr, s.cause)
	c.mu.Lock()
	c.up, c.down = false, err
	queued := c.queue
	c.queue = nil
	c.mu.Unlock()
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

// write sends the queued requests until the session ends: all that is
// queued in one write, then all that arrived during that write.
func (c *conn) write(s *session) {
	var batch []*request
	var buf []byte
	rt := c.pool.cfg.readTimeout
	for {
		select {
		case <-c.wake:
		case <-s.dead:
			return
		case <-c.pool.closing:
			s.end(ErrClosed)
			return
		}
		c.mu.Lock()
		batch, c.queue = c.queue, batch[:0]
		c.mu.Unlock()
		buf = buf[:0]
		n := 0
		for i, r := range batch {
			batch[i] = nil
			if r.state.Load() == reqAbandoned { // its caller is gone and it was never sent
				putRequest(r)
				continue
			}
			buf = append(buf, r.cmd...)
			if s.pending.Add(1) == 1 {
				// The first request after a quiet spell starts the clock of the
				// hung-server check; later ones are covered by the reader,
				// which restarts it with every reply.
				_ = s.nc.SetReadDeadline(time.Now().Add(rt))
			}
			select {
			case s.inflight <- r:
				n++
			case <-s.dead:
				r.fail(fmt.Errorf("redisstore: connection to %s: %w", c.pool.cfg.addr, s.cause))
				for _, r := range batch[i+1:] {
					if r != nil {
						r.fail(fmt.Errorf("redisstore: connection to %s: %w", c.pool.cfg.addr, s.cause))
					}
				}
				clear(batch)
				return
			}
		}
		batch = batch[:0]
		if n == 0 {
			continue
		}
		if _, err := s.nc.Write(buf); err != nil {
			s.end(err)
			return
		}
		if cap(buf) > 1<<20 { // a burst grew it: do not keep it for good
			buf = nil
		}
	}
}

var errHung = errors.New("no reply within the read timeout")

// read matches replies to the written requests, in order, until the session
// ends.
func (c *conn) read(s *session, br *bufio.Reader) {
	rt := c.pool.cfg.readTimeout
	for {
		// Wait for a reply's first byte: the connection is read even while
		// idle, so that a server that goes away is noticed before the next
		// request is written to it.
		if _, err := br.Peek(1); err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() && s.pending.Load() == 0 {
				// Idle, not hung: look again in a while.
				_ = s.nc.SetReadDeadline(time.Now().Add(rt))
				continue
			}
			if errors.As(err, &ne) && ne.Timeout() {
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
		if err := readReply(br, r); err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				err = errHung
			}
			s.end(err)
			r.fail(fmt.Errorf("redisstore: connection to %s: %w", c.pool.cfg.addr, err))
			return
		}
		r.complete()
		if s.pending.Add(-1) > 0 && br.Buffered() == 0 {
			// More replies are due and none is buffered: restart the clock.
			_ = s.nc.SetReadDeadline(time.Now().Add(rt))
		}
	}
}
