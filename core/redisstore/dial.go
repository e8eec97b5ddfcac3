package redisstore

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
)

// ErrClosed is the error of a call on a Store from Dial or Open after Close.
var ErrClosed = errors.New("redisstore: store closed")

// ErrNotConnected is the error of a call on a Store from Dial or Open that has
// not connected yet: the Limiter fails open, and its breaker opens, until
// the store connects in the background. The error of a call wraps it with
// the last connection attempt's error.
var ErrNotConnected = errors.New("redisstore: not connected to Redis yet")

// Options configures Open.
type Options struct {
	// Client is the configuration of the rueidis client the store talks
	// through: the addresses (InitAddress: one server, several Cluster nodes,
	// or the sentinels when Sentinel.MasterSet is set), credentials, TLS,
	// dialer and pipelining. ParseURL fills it from a URL. Open turns off
	// rueidis' client-side caching, which the store never uses.
	Client rueidis.ClientOption

	// RequireConnection makes Open fail when it cannot connect within its
	// context: a wrong address or password then stops the service at
	// start-up. By default Open returns a Store that keeps connecting in the
	// background, so that a service starts while Redis is down.
	RequireConnection bool

	wrap func(rueidis.Client) rueidis.Client // tests: wraps the client once connected
}

// Dial returns a Store on the Redis at url: a standalone server, a Redis
// Cluster or a Sentinel-monitored master, through one rueidis client. url is
// as for ParseURL. Dial is Open with the options of the URL: it waits within
// ctx for a first connection attempt and, when that fails, returns the Store
// anyway, still connecting in the background (its checks fail with
// ErrNotConnected meanwhile, and the Limiter fails open). Use Open with
// RequireConnection to fail at start-up instead. Close the Store when done.
func Dial(ctx context.Context, url string) (*Store, error) {
	o, err := ParseURL(url)
	if err != nil {
		return nil, err
	}
	return Open(ctx, Options{Client: o})
}

// Open returns a Store on a rueidis client built from o.Client. Concurrent
// checks are pipelined over a few connections per server (rueidis'
// auto-pipelining); on a Cluster the commands of one round trip are sent to
// every node involved at once. The plain-form checks that arrive while 8
// calls are in flight (on a Cluster: 8 to all masters together, one at least
// to the check's own master) are combined into one call; the package doc
// ("Pipelining") has the figures, and those of o.Client's MaxFlushDelay,
// which Open leaves off. Open waits
// within ctx for the first connection attempt; see Options.RequireConnection
// for what happens when it fails.
func Open(ctx context.Context, o Options) (*Store, error) {
	if len(o.Client.InitAddress) == 0 {
		return nil, errors.New("redisstore: no Redis address")
	}
	life, cancel := context.WithCancel(context.Background())
	s := &Store{evaluate: evaluateScript, bounded: true, dialed: &dialed{windows: newWindows(), cancel: cancel, done: make(chan struct{}), life: life, wrap: o.wrap}}
	opt := o.Client
	opt.InitAddress = append([]string(nil), opt.InitAddress...) // rueidis may shuffle it
	opt.DisableCache = true
	opt.DialCtxFn = s.dialed.cancelOnClose(life, opt.DialCtxFn, opt.DisableTCPNoDelay)
	s.dialed.opt = opt
	s.dialed.opt.InitAddress = append([]string(nil), opt.InitAddress...) // a re-dial's own copy
	first := make(chan error, 1)
	go s.dialed.connect(life, s, opt, o.wrap, first)
	select {
	case err := <-first:
		if err != nil && o.RequireConnection {
			_ = s.Close()
			return nil, fmt.Errorf("redisstore: connect: %w", err)
		}
	case <-ctx.Done():
		if o.RequireConnection {
			_ = s.Close()
			return nil, fmt.Errorf("redisstore: connect: %w", ctx.Err())
		}
	}
	return s, nil
}

// dialed is the state of a Store from Open: its client once connected, and
// the background connection attempts until then.
type dialed struct {
	client  atomic.Pointer[rueidisClient] // nil until connected
	lastErr atomic.Pointer[error]         // the last failed connection attempt
	noPlain atomic.Bool                   // the server refused PEXPIRE NX (before Redis 7.0): no plain form
	windows *windows                      // when the windows of the counters charged in the plain form end
	combine combiner                      // the plain form's DoMulti calls on a single server
	nodes   nodeCombiners                 // and on a Cluster
	closed  atomic.Bool                   // Close was called
	tries   attempts                      // connection attempts once connected, bounded by the checks' deadlines
	cancel  context.CancelFunc            // ends the connection attempts
	done    chan struct{}                 // closed when connect has returned
	once    sync.Once

	// Re-dialing a standalone server that became a replica (replica.go).
	replica    atomic.Bool                         // the server answered READONLY, and no re-dial found a master since
	lastRedial atomic.Int64                        // when the last re-dial started (Unix ns)
	redials    sync.WaitGroup                      // the re-dial running; Close waits for it
	life       context.Context                     // canceled by Close
	opt        rueidis.ClientOption                // connect's
	wrap       func(rueidis.Client) rueidis.Client // Options.wrap

	mu         sync.Mutex    // guards handshakes; orders a re-dial's start with Close
	handshakes []func() bool // stop the closing at Close of the connections of a connection attempt
}

// rueidisClient is a connected client, in a struct for atomic.Pointer.
type rueidisClient struct{ rueidis.Client }

// Back-off between connection attempts while Redis is unreachable.
const (
	minRetryDelay = 50 * time.Millisecond
	maxRetryDelay = time.Second
)

// connect builds the rueidis client, retrying until it connects or life
// ends. rueidis reconnects a connected client's broken connections itself;
// only the first connection, which tells a Cluster from a single server and
// finds a Sentinel's master, needs this loop. The first attempt's outcome is
// sent on first.
func (d *dialed) connect(life context.Context, s *Store, opt rueidis.ClientOption, wrap func(rueidis.Client) rueidis.Client, first chan<- error) {
	defer close(d.done)
	delay := minRetryDelay
	for attempt := 0; ; attempt++ {
		c, err := rueidis.NewClient(opt)
		d.endHandshakes() // the client owns the attempt's connections, or closed them
		if err == nil {
			if life.Err() != nil { // closed while connecting
				c.Close()
				err = ErrClosed
			} else {
				if c.Mode() == rueidis.ClientModeCluster {
					s.sharding = bySlot    // read only after client is loaded
					d.nodes.start(life, c) // combine from the first check on
				}
				c = &boundedClient{Client: c, tries: &d.tries}
				if wrap != nil {
					c = wrap(c)
				}
				d.client.Store(&rueidisClient{c})
			}
		} else {
			err = connectHint(err)
			d.lastErr.Store(&err)
		}
		if attempt == 0 {
			first <- err
		}
		if err == nil || life.Err() != nil {
			return
		}
		select {
		case <-life.Done():
			return
		case <-time.After(delay):
		}
		delay = min(2*delay, maxRetryDelay)
	}
}

// connectHint adds what to change in the URL to a connection attempt that the
// server refused for its credentials or database: the server's own words
// (WRONGPASS, NOAUTH, "DB index is out of range") do not say that the URL
// holds them.
func connectHint(err error) error {
	msg := err.Error()
	switch {
	case strings.HasPrefix(msg, "WRONGPASS") || strings.HasPrefix(msg, "NOAUTH"):
		return fmt.Errorf("%w (check the user and password of the Redis URL: redis://user:password@host:port)", err)
	case strings.Contains(msg, "DB index is out of range"):
		return fmt.Errorf("%w (the database of the Redis URL, redis://host:port/DB, is past the server's: 0 to 15 unless its databases setting says more)", err)
	}
	return err
}

// get returns the connected client, or the error of a call made before the
// store connected.
func (d *dialed) get() (*rueidisClient, error) {
	if d.closed.Load() {
		return nil, ErrClosed
	}
	if d.replica.Load() {
		d.redial()
		return nil, ErrReplica
	}
	if c := d.client.Load(); c != nil {
		return c, nil
	}
	if err := d.lastErr.Load(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNotConnected, *err)
	}
	return nil, ErrNotConnected
}

// cancelOnClose wraps dial (rueidis' own dialing when nil) so that Close also
// ends a dial in progress, which would otherwise keep Close waiting for the
// dial timeout, and, until the store has connected, the handshake on a
// dialed connection: a hung server accepts the connection and never answers,
// and rueidis waits for its dial and write timeouts. Once connected, an
// attempt is bounded by the deadlines of the checks that wait for it (see
// attempts). noDelayOff is rueidis' DisableTCPNoDelay, which it cannot
// apply through the wrapped connection of such an attempt.
func (d *dialed) cancelOnClose(life context.Context, dial func(context.Context, string, *net.Dialer, *tls.Config) (net.Conn, error), noDelayOff bool) func(context.Context, string, *net.Dialer, *tls.Config) (net.Conn, error) {
	return func(ctx context.Context, addr string, nd *net.Dialer, cfg *tls.Config) (net.Conn, error) {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		defer context.AfterFunc(life, cancel)()
		var at *attempt
		if d.client.Load() != nil {
			at = d.tries.start(cancel)
		}
		var conn net.Conn
		var err error
		switch {
		case dial != nil:
			conn, err = dial(ctx, addr, nd, cfg)
		case cfg != nil:
			conn, err = (&tls.Dialer{NetDialer: nd, Config: cfg}).DialContext(ctx, "tcp", addr)
		default:
			conn, err = nd.DialContext(ctx, "tcp", addr)
		}
		if at != nil {
			if err != nil {
				if d.tries.end(at) {
					err = errGivenUp // not the caller's cancellation
				}
				return nil, err
			}
			if noDelayOff {
				raw := conn
				if tc, ok := raw.(*tls.Conn); ok {
					raw = tc.NetConn()
				}
				if tc, ok := raw.(*net.TCPConn); ok {
					_ = tc.SetNoDelay(false)
				}
			}
			if conn, ok := d.tries.dialed(at, conn); ok {
				return conn, nil
			}
			return nil, errGivenUp
		}
		if err == nil && d.client.Load() == nil {
			d.mu.Lock()
			d.handshakes = append(d.handshakes, context.AfterFunc(life, func() { _ = conn.Close() }))
			d.mu.Unlock()
		}
		return conn, err
	}
}

// errGivenUp is the error of a connection attempt that the server did not
// answer by the deadline of a check waiting for it.
var errGivenUp = errors.New("redisstore: connection attempt given up: no answer by a waiting check's deadline")

// endHandshakes ends the closing at Close of the connections of a connection
// attempt that has returned: rueidis closed them, or the connected client
// owns them and Close closes the client.
func (d *dialed) endHandshakes() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, stop := range d.handshakes {
		stop()
	}
	d.handshakes = nil
}

// Close closes the client of a Store from Dial or Open, or stops its
// connection attempts: pending and later calls fail. It returns when the
// client is closed. For a Store from New it does nothing: the caller owns the
// client.
func (s *Store) Close() error {
	d := s.dialed
	if d == nil {
		return nil
	}
	d.once.Do(func() {
		d.mu.Lock() // no re-dial starts after this (redial)
		d.closed.Store(true)
		d.mu.Unlock()
		d.cancel()
		<-d.done
		d.redials.Wait()
		d.nodes.stop()
		if c := d.client.Load(); c != nil {
			c.Close()
		}
	})
	return nil
}

// ParseURL returns the rueidis client options of a Redis URL, with errors
// that never contain the URL (it may hold a password, and start-up errors end
// in logs). It accepts rueidis' URLs:
//
//   - redis://[[user]:password@]host:port[/db]: one server; rediss:// for TLS,
//     unix:///path/to/socket for a Unix socket;
//   - redis://host1:port1?addr=host2:port2&addr=host3:port3: a Redis Cluster,
//     from any of its nodes (a single address that turns out to be a cluster
//     node works too);
//   - redis://sentinel1:port?addr=sentinel2:port&master_set=mymaster: the
//     master that the sentinels name mymaster, followed across failovers
//     (the sentinels are dialed as the master: TLS for rediss://, the same
//     dial_timeout and client_name);
//
// with the query options dial_timeout and write_timeout (how long a
// connection waits for replies before it counts the server as hung, 10s by
// default), client_name, protocol=2 (RESP2) and, for TLS, skip_verify.
// redis-sentinel://[[user]:password@]host:port[,host:port...]/mastername is
// accepted as well, as the Sentinel form. A port left out is 6379; one
// outside 1 to 65535 is an error, as are a negative database and a negative
// dial_timeout.
func ParseURL(raw string) (rueidis.ClientOption, error) {
	raw, err := sentinelURL(raw)
	if err != nil {
		return rueidis.ClientOption{}, err
	}
	o, err := rueidis.ParseURL(raw)
	if err != nil {
		return rueidis.ClientOption{}, schemeError(raw, err)
	}
	// rueidis takes any integer and any duration: no server has a negative
	// database (SELECT fails) and a negative dial timeout fails every dial,
	// either of which would leave Dial's store connecting for good.
	if o.SelectDB < 0 {
		return rueidis.ClientOption{}, errors.New("redis URL: invalid database number" + urlHidden)
	}
	if o.Dialer.Timeout < 0 {
		return rueidis.ClientOption{}, errors.New("redis URL: invalid dial timeout" + urlHidden)
	}
	if o.Sentinel.MasterSet != "" {
		// rueidis dials the sentinels with Sentinel's own TLS config, dialer
		// and client name, which its URL form leaves empty: a rediss:// URL
		// spoke plain text to sentinels that speak TLS (go-redis, through
		// GoRedisOptions, uses TLS for both), and dial_timeout and
		// client_name did not reach them. Each sentinel's certificate is
		// checked against its own address, not the first one's name.
		if o.TLSConfig != nil {
			o.Sentinel.TLSConfig = o.TLSConfig.Clone()
			o.Sentinel.TLSConfig.ServerName = ""
		}
		o.Sentinel.Dialer = o.Dialer
		o.Sentinel.ClientName = o.ClientName
	}
	if o.DialCtxFn == nil { // host:port addresses, not a Unix socket
		for _, a := range o.InitAddress {
			// net/url checks the host's port for digits only, and rueidis
			// not the addr options' at all: a port no server can have would
			// leave Dial's store connecting for good.
			if _, port, err := net.SplitHostPort(a); err != nil || !validPort(port) {
				return rueidis.ClientOption{}, errors.New("redis URL: invalid port in an address" + urlHidden)
			}
		}
	}
	return o, nil
}

// validPort reports whether port is a TCP port number, 1 to 65535, in
// decimal digits.
func validPort(port string) bool {
	n, err := strconv.ParseUint(port, 10, 16)
	return err == nil && n > 0
}

// sentinelURL rewrites redis-sentinel://auth@h1:p1,h2:p2/master?q into
// rueidis' form, redis://auth@h1:p1?addr=h2:p2&master_set=master&q, and
// returns other URLs as they are.
func sentinelURL(raw string) (string, error) {
	rest, ok := strings.CutPrefix(raw, "redis-sentinel://")
	if !ok {
		return raw, nil
	}
	rest, query, _ := strings.Cut(rest, "?")
	auth, hosts := "", rest
	if i := strings.LastIndexByte(rest, '@'); i >= 0 {
		auth, hosts = rest[:i+1], rest[i+1:]
	}
	hosts, master, _ := strings.Cut(hosts, "/")
	if master == "" {
		return "", errors.New("redis URL: redis-sentinel:// needs the master name as its path (the URL is not shown: it may hold a password)")
	}
	addrs := strings.Split(hosts, ",")
	q := url.Values{}
	for _, a := range addrs[1:] {
		q.Add("addr", a)
	}
	q.Set("master_set", master)
	if query != "" {
		query = "&" + query
	}
	return "redis://" + auth + addrs[0] + "?" + q.Encode() + query, nil
}

// schemeError says how to write the scheme when raw has none or one that no
// store takes: net/url's "first path segment in URL cannot contain colon"
// for host:port, or rueidis' bare "invalid URL scheme" for http://, told an
// adopter neither what was wrong nor what to write. Other errors go to
// hideURL.
func schemeError(raw string, err error) error {
	if !strings.Contains(raw, "://") {
		return errors.New("redis URL: no scheme: write redis://host:port[/db] (rediss:// for TLS, redis-sentinel://host:port/master for Sentinel)" + urlHidden)
	}
	if strings.Contains(err.Error(), "invalid URL scheme") {
		return errors.New("redis URL: invalid URL scheme: use redis://, rediss:// (TLS), redis-sentinel:// or unix://" + urlHidden)
	}
	return hideURL(err)
}

// hideURL rewrites a parse error to its cause alone, without the pieces of
// the URL that net/url and rueidis quote: net/url the whole URL (in
// url.Error), a bad escape, port or host; rueidis the scheme, the path, the
// database or a query value. Any of them may be a piece of the password: a
// password with an unescaped '/', '?' or '#' (as a base64 one may hold)
// ends the userinfo early, and what follows is read as the port, the path
// or the query.
func hideURL(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		var esc url.EscapeError
		if errors.As(ue.Err, &esc) {
			return errors.New("redis URL: invalid %-escape" + urlHidden)
		}
		return errors.New("redis URL: " + quoted.ReplaceAllString(ue.Err.Error(), "") + urlHidden)
	}
	// rueidis: "redis: <what is invalid>: <the piece of the URL>".
	what, _, _ := strings.Cut(strings.TrimPrefix(err.Error(), "redis: "), ": ")
	return errors.New("redis URL: " + quoted.ReplaceAllString(what, "") + urlHidden)
}

// urlHidden ends an error about a URL that does not show it.
const urlHidden = " (the URL is not shown: it may hold a password)"

// quoted matches a Go-quoted string and the space before it: how net/url and
// net/netip name the piece of a URL they refuse.
var quoted = regexp.MustCompile(` ?"(?:[^"\\]|\\.)*"`)

// GoRedisOptions returns go-redis options for the deployment that o (from
// ParseURL) names, for a program that needs a go-redis client beside its
// Store (a rule store, a job queue) and one URL for both:
// redis.NewUniversalClient builds a failover client when o names a Sentinel
// master, a cluster client for several addresses (set IsClusterMode for one
// address of a cluster), and a plain client otherwise. Its calls end when
// their context does (ContextTimeoutEnabled): a caller's timeout, such as a
// rule store's, bounds them on a Redis that hangs, where go-redis would
// otherwise wait out its own read timeout per call. The URL's credentials,
// database, TLS (skip_verify), dial_timeout, client_name and protocol=2
// carry over; write_timeout is rueidis' alone.
func GoRedisOptions(o rueidis.ClientOption) *redis.UniversalOptions {
	u := &redis.UniversalOptions{
		ContextTimeoutEnabled: true,
		Addrs:                 append([]string(nil), o.InitAddress...),
		Username:              o.Username,
		Password:              o.Password,
		DB:                    o.SelectDB,
		TLSConfig:             o.TLSConfig,
		DialTimeout:           o.Dialer.Timeout,
		ClientName:            o.ClientName,
		MasterName:            o.Sentinel.MasterSet,
	}
	if o.AlwaysRESP2 { // protocol=2: go-redis' default is RESP3
		u.Protocol = 2
	}
	if o.DialCtxFn != nil { // a Unix socket (see ParseURL), or a custom dialer
		dial := o.DialCtxFn
		u.Dialer = func(ctx context.Context, _, addr string) (net.Conn, error) {
			return dial(ctx, addr, &o.Dialer, o.TLSConfig)
		}
	}
	if o.Sentinel.MasterSet != "" { // the sentinels' own credentials
		u.SentinelUsername, u.SentinelPassword = o.Sentinel.Username, o.Sentinel.Password
	}
	return u
}
