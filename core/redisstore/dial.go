package redisstore

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	ratelimit "github.com/ratekit/ratekit/core"
)

// Defaults of Dial.
const (
	defaultConns       = 2
	defaultDialTimeout = 5 * time.Second
	defaultReadTimeout = 3 * time.Second
)

// WithConns sets how many connections a Store from Dial opens (default 2,
// at most 16). Each connection pipelines all the checks its callers send
// concurrently, so a few carry any number of callers; more than one lets
// checks go on over the others while one is re-dialled. New ignores it.
func WithConns(n int) Option {
	return func(s *Store) { s.conns = min(max(n, 1), 16) }
}

// WithDialer replaces the net.Dialer that a Store from Dial connects with,
// for instance to go through a proxy or to count connections in a test. TLS
// (rediss://) is layered on top of the connection it returns. New ignores it.
func WithDialer(dial func(ctx context.Context, network, addr string) (net.Conn, error)) Option {
	return func(s *Store) { s.dial = dial }
}

// Dial returns a Store on the standalone Redis at url, over its own few
// pipelined connections instead of a go-redis client: concurrent checks are
// written together and their replies read together, so a check costs a small
// share of a round trip and allocates nothing in the store. It is the store
// to use for a single Redis server (see the package documentation for when
// New fits better).
//
// url is as for ParseURL: redis://[[user]:password@]host:port[/db],
// rediss:// for TLS or unix:///path/to/socket, with the dial_timeout (default 5s) and read_timeout
// (default 3s) query options; other options of go-redis' pool do not apply.
// A read timeout is how long a connection waits for a reply before it counts
// the server as hung, fails its pending checks and dials again; a check
// itself waits no longer than its context (the Limiter's Config.Timeout).
//
// Dial connects before it returns, within ctx and the dial timeout, so that
// a wrong address or password fails at start-up; connections that break
// later are re-dialled in the background while the checks that need them
// fail (the Limiter then fails open). Close the Store when done.
func Dial(ctx context.Context, url string, opts ...Option) (*Store, error) {
	o, err := ParseURL(url)
	if err != nil {
		return nil, err
	}
	s := &Store{evaluate: evaluateScript, bounded: true, conns: defaultConns}
	for _, opt := range opts {
		opt(s)
	}
	s.sharding = single // one server, whatever WithClusterMode said
	cfg := connConfig{
		network:     o.Network,
		addr:        o.Addr,
		user:        o.Username,
		password:    o.Password,
		db:          o.DB,
		tls:         o.TLSConfig,
		dialTimeout: o.DialTimeout,
		readTimeout: o.ReadTimeout,
		dial:        s.dial,
	}
	if cfg.network == "" {
		cfg.network = "tcp"
	}
	if cfg.dialTimeout <= 0 {
		cfg.dialTimeout = defaultDialTimeout
	}
	if cfg.readTimeout <= 0 {
		cfg.readTimeout = defaultReadTimeout
	}
	if cfg.dial == nil {
		var d net.Dialer
		cfg.dial = d.DialContext
	}
	s.pool, err = newConnPool(ctx, cfg, s.conns)
	if err != nil {
		return nil, fmt.Errorf("redisstore: %w", err)
	}
	return s, nil
}

// Close closes the connections of a Store from Dial: pending and later calls
// fail with ErrClosed. It returns when the connections' goroutines have
// ended. For a Store from New it does nothing: the caller owns the client.
func (s *Store) Close() error {
	if s.pool != nil {
		s.pool.close()
	}
	return nil
}

// evalConn is evalOne over the pipelined connections: EVALSHA, and EVAL when
// the server lost the script (Dial loads it on every new connection, but a
// SCRIPT FLUSH drops it).
func (s *Store) evalConn(ctx context.Context, mode ratelimit.Mode, ops []ratelimit.Op, out []ratelimit.OpResult) ([]ratelimit.OpResult, error) {
	if plainOps(mode, ops) && !s.noPlain.Load() {
		return s.evalPlain(ctx, ops, out)
	}
	return s.evalScript(ctx, mode, ops, out)
}

// evalScript is evalConn with the script.
func (s *Store) evalScript(ctx context.Context, mode ratelimit.Mode, ops []ratelimit.Op, out []ratelimit.OpResult) ([]ratelimit.OpResult, error) {
	r := getRequest()
	r.cmd = appendEval(r.cmd[:0], false, mode, ops)
	abandoned, err := s.pool.call(ctx, r)
	if !abandoned && r.noScript {
		r.state.Store(reqPending)
		r.cmd = appendEval(r.cmd[:0], true, mode, ops)
		abandoned, err = s.pool.call(ctx, r)
	}
	if !abandoned {
		defer putRequest(r)
	}
	if err != nil {
		return nil, fmt.Errorf("redisstore: eval: %w", err)
	}
	if err := decodeReply(r, out); err != nil {
		return nil, err
	}
	return out, nil
}

// decodeReply is decode for a reply read by the pipelined connection.
func decodeReply(r *request, out []ratelimit.OpResult) error {
	if !r.array || len(r.vals)%3 != 0 || len(r.vals)/3 > len(out) {
		return fmt.Errorf("redisstore: eval: %d reply values for %d ops", len(r.vals), len(out))
	}
	for j := range len(r.vals) / 3 {
		c, ttl, b := r.vals[3*j], r.vals[3*j+1], r.vals[3*j+2]
		var count float64
		var err error
		switch c.kind {
		case '$':
			count, err = parseCount(r.str(c))
		case ':':
			count = float64(c.n)
		default:
			err = errors.New("unexpected reply type")
		}
		if err != nil {
			return fmt.Errorf("redisstore: eval: op %d count: %w", j, err)
		}
		if ttl.kind != ':' || b.kind != ':' {
			return fmt.Errorf("redisstore: eval: op %d: unexpected reply types %q %q", j, ttl.kind, b.kind)
		}
		out[j] = outcome(count, ttl.n, b.n)
	}
	return nil
}

// deleteConn is Delete over the pipelined connections: one DEL.
func (s *Store) deleteConn(ctx context.Context, keys []string) (int, error) {
	r := getRequest()
	r.cmd = appendArrayHeader(r.cmd[:0], 1+len(keys))
	r.cmd = appendBulk(r.cmd, "DEL")
	for _, k := range keys {
		r.cmd = appendBulk(r.cmd, k)
	}
	abandoned, err := s.pool.call(ctx, r)
	if !abandoned {
		defer putRequest(r)
	}
	if err == nil && (r.array || len(r.vals) != 1 || r.vals[0].kind != ':') {
		err = errors.New("unexpected reply")
	}
	if err != nil {
		return 0, fmt.Errorf("redisstore: delete: %w", err)
	}
	return int(r.vals[0].n), nil
}
