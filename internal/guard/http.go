package guard

import (
	"context"
	"log/slog"
	"net/http"
	"net/netip"
	"slices"
	"sync/atomic"
	"time"

	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/identifiers"
	"github.com/ratekit/ratekit/middleware/adapter"
	ratelimitheaders "github.com/ratekit/ratekit/middleware/headers"
)

// Outcome is what an HTTP adapter knows once the handler has finished; the
// Charge of its deferred limiters reads it.
type Outcome struct {
	Status int            // the response status (200 if the handler never set one, 500 if it panicked)
	Meter  *adapter.Meter // the request's cost meter
	Header http.Header    // the response headers
}

// CountStatus charges l with 1 only for responses with one of the statuses
// (see CountWhen).
func CountStatus(l *ratelimit.Limiter, statuses ...int) adapter.Deferred[Outcome] {
	statuses = slices.Clone(statuses)
	return CountWhen(l, func(o Outcome) bool { return slices.Contains(statuses, o.Status) })
}

// HTTP is what every HTTP adapter (net/http, Echo, Gin) runs a request
// through: the options all adapters share and how the verdict becomes
// headers. R is what the adapter's hooks are told about a request (an
// *http.Request, an echo.Context, a *gin.Context). The adapter's public
// options set its fields directly; the zero value checks nothing.
type HTTP[R any] struct {
	Options[R, Outcome]
	// Forwarded logs the first request that carries a forwarding header
	// from a peer no trusted proxy covers (see WarnForwarded).
	Forwarded ForwardWarning
}

// forwardingHeaders are the headers a proxy names its client in: those
// identifiers.TrustedProxies reads by default.
var forwardingHeaders = [...]string{"X-Forwarded-For", "Forwarded", "X-Real-Ip"}

// WarnForwarded reports r to g.Forwarded when it carries a forwarding
// header. The adapters call it from their default identifier builder, which
// reads the socket peer; until the line is logged it costs a few header
// lookups. pkg names the adapter and option its trusted-proxies option.
func (g *HTTP[R]) WarnForwarded(pkg, option string, r *http.Request) {
	if g.Forwarded.Logged() {
		return
	}
	for _, h := range forwardingHeaders {
		if len(r.Header[h]) > 0 {
			g.Forwarded.Untrusted(pkg, option, h, identifiers.PeerAddr(r.RemoteAddr), g.TrustedProxies)
			return
		}
	}
}

// ForwardWarning logs, once, the first request that carries a forwarding
// header (or metadata) from a socket peer that is no trusted proxy. Its
// client is counted as that peer, whatever the header says, which is right
// for a client naming itself; but where the peer is a proxy nobody listed,
// every client it forwards shares the proxy's one bucket, silently.
type ForwardWarning struct {
	// Logger receives the line; slog.Default() when nil.
	Logger *slog.Logger

	logged atomic.Bool
}

// Logged reports whether the line was logged: nothing is left to check.
func (w *ForwardWarning) Logged() bool { return w.logged.Load() }

// Untrusted logs the line, the first time, when peer (which sent header) is
// valid and tp does not trust it.
func (w *ForwardWarning) Untrusted(pkg, option, header string, peer netip.Addr, tp identifiers.TrustedProxies) {
	if !peer.IsValid() || tp.Trusts(peer) || !w.logged.CompareAndSwap(false, true) {
		return
	}
	l := w.Logger
	if l == nil {
		l = slog.Default()
	}
	l.Warn(pkg+": a request carries "+header+" from "+peer.String()+", which is no trusted proxy, so its client is counted as "+peer.String()+
		"; if the service runs behind a proxy, every client it forwards shares that proxy's bucket: list the proxy with "+option+" (logged once)",
		slog.String("header", header), slog.String("peer", peer.String()))
}

// StatusClientClosedRequest is the status an HTTP adapter answers a request
// whose caller went away during its checks (Checked.Canceled): nginx's 499,
// which grpc-gateway gives codes.Canceled. The handler did not run; no client
// reads the answer, but access logs and outer middleware see it.
const StatusClientClosedRequest = 499

// Handle runs one request through the guard, the same way in every HTTP
// adapter: Check (one clock read); when the caller went away during the
// checks (Checked.Canceled), gone answers StatusClientClosedRequest and the
// handler does not run (no rate-limit headers: nothing was decided).
// Otherwise the headers go on header; when the
// decision blocks, deny answers with the decision and its problem details,
// and the handler does not run. Otherwise next runs the handler with ctx and
// returns the response status. When the guard meters (it has Deferred
// limiters), ctx carries an adapter.Meter, and the Deferred limiters are
// charged with the status, the meter and header once next returns; otherwise
// ctx is the caller's and the status is unused. A next that panics is
// charged as a 500 (what Echo's and Gin's recovery answer), and the panic
// goes on. Skipping is left to the adapter (see Options.Skipped), which knows
// how to call its handler.
func (g *HTTP[R]) Handle(ctx context.Context, r R, header http.Header,
	deny func(d *ratelimitheaders.Decision, p *ratelimitheaders.Problem), gone func(status int),
	next func(ctx context.Context) (status int)) {
	c := g.Check(ctx, r)
	if c.Canceled != nil {
		gone(StatusClientClosedRequest)
		return
	}
	if p := g.SetHeaders(header, c.Decision, c.Now); p != nil {
		deny(c.Decision, p)
		return
	}
	g.Run(ctx, c.ID, func(ctx context.Context) Outcome {
		return Outcome{Status: next(ctx), Meter: adapter.MeterFrom(ctx), Header: header}
	}, func(ctx context.Context) Outcome {
		return Outcome{Status: http.StatusInternalServerError, Meter: adapter.MeterFrom(ctx), Header: header}
	})
}

// SetHeaders writes d's headers in the guard's profile at now, with the
// guard's Retry-After jitter (see ratelimitheaders.Profile.SetHeaders). When d
// blocks it returns the problem details of the 429; otherwise nil.
func (g *HTTP[R]) SetHeaders(h http.Header, d *ratelimitheaders.Decision, now time.Time) *ratelimitheaders.Problem {
	if !d.Blocked() {
		g.Profile.SetHeaders(h, d, now, 0)
		return nil
	}
	g.Profile.SetHeaders(h, d, now, Jitter(g.RetryAfterJitter))
	p := ratelimitheaders.NewProblem(d, now)
	return &p
}

// Hook adapts a hook of an HTTP adapter's public options, which is told the
// request but not the context, to the identifier, skip or cost hook of
// Options. A nil f gives a nil hook, so that an option given nil keeps the
// default, as the gRPC and asynq adapters' options (which set the hook as
// it is) do.
func Hook[R, T any](f func(R) T) func(context.Context, R) T {
	if f == nil {
		return nil
	}
	return func(_ context.Context, r R) T { return f(r) }
}

// PropertiesHook is Hook for Options.Properties.
func PropertiesHook[R any](f func(R, ratelimit.Identifier)) func(context.Context, R, ratelimit.Identifier) {
	if f == nil {
		return nil
	}
	return func(_ context.Context, r R, id ratelimit.Identifier) { f(r, id) }
}
