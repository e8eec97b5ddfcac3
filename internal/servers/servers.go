// Package servers runs the gRPC and HTTP servers of ratekit's service commands
// (ratekit-rules, ratekit-envoy) and stops them gracefully. It lives in the
// root module, which never imports gRPC, so it takes the gRPC server through
// the few methods it calls.
package servers

import (
	"context"
	"errors"
	"net"
	"net/http"
	"time"

	"golang.org/x/net/netutil"
)

// MaxConcurrentStreams bounds the streams one client connection to a gRPC
// server of these commands holds open at once (grpc.MaxConcurrentStreams;
// HTTP/2's SETTINGS_MAX_CONCURRENT_STREAMS). Each stream is a goroutine
// waiting for its request: without a bound, one connection that opened
// streams and never sent their messages held 20,000 goroutines and 230 MB.
// Envoy's connection pool opens another connection when it needs more.
const MaxConcurrentStreams = 1024

// MaxConnectionIdle bounds how long a client connection to a gRPC server of
// these commands stays open with no call in flight (keepalive's
// MaxConnectionIdle): the server then sends GOAWAY and closes it. A
// connection that completed the HTTP/2 handshake and sent nothing stayed
// open for good. Idle means no call: pings do not count, and a connection
// with a call in flight (Envoy's, busy) is never idle; Envoy opens a new
// one at its next request. The HTTP servers' idle bound is the same.
const MaxConnectionIdle = 2 * time.Minute

// MaxConnections bounds the connections a gRPC server of these commands
// serves at once (Config.MaxConnections). Streams are bounded per connection
// (MaxConcurrentStreams), so without it the number of connections was the
// only unbounded factor. A connection over it is not refused: it waits in
// the listen queue until a served one closes (an idle one does within
// MaxConnectionIdle). Envoy holds one connection per worker thread.
const MaxConnections = 4096

// GRPC is the part of *grpc.Server that Run uses.
type GRPC interface {
	Serve(net.Listener) error
	GracefulStop()
	Stop()
}

// Config is what Run serves.
type Config struct {
	GRPC         GRPC
	GRPCListener net.Listener
	// MaxConnections bounds the gRPC connections served at once (0:
	// MaxConnections); tests set a smaller one.
	MaxConnections int
	// HTTP, when set, serves on HTTPListener beside the gRPC server.
	HTTP         *http.Server
	HTTPListener net.Listener
	// Drain bounds each server's graceful stop: calls in flight that have not
	// finished by then are cut off.
	Drain time.Duration
	// Draining, when set, is called first when Run stops: it tells health
	// checkers (gRPC health NOT_SERVING) before the servers stop accepting.
	Draining func()
	// Ready, when set, is told the bound addresses once both servers serve
	// (httpAddr is "" without HTTP); tests listen on port 0.
	Ready func(grpcAddr, httpAddr string)
}

// Run serves until ctx ends or a server fails, then drains: Draining, then
// at once the gRPC server's graceful stop (a hard stop after Drain) and the
// HTTP server's shutdown (its connections closed after Drain), so that a
// stop takes at most Drain, not one Drain per server. It returns the error a
// server failed with, or nil when ctx ended.
func Run(ctx context.Context, c Config) error {
	errc := make(chan error, 2)
	maxConns := c.MaxConnections
	if maxConns <= 0 {
		maxConns = MaxConnections
	}
	// The gRPC server accepts no more until one of its connections closes.
	glis := netutil.LimitListener(c.GRPCListener, maxConns)
	go func() { errc <- c.GRPC.Serve(glis) }()
	httpAddr := ""
	if c.HTTP != nil {
		httpAddr = c.HTTPListener.Addr().String()
		go func() {
			if err := c.HTTP.Serve(c.HTTPListener); !errors.Is(err, http.ErrServerClosed) {
				errc <- err
			}
		}()
	}
	if c.Ready != nil {
		c.Ready(c.GRPCListener.Addr().String(), httpAddr)
	}

	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-errc:
	}
	if c.Draining != nil {
		c.Draining()
	}
	dctx, cancel := context.WithTimeout(context.Background(), c.Drain)
	defer cancel()
	httpStopped := make(chan struct{})
	go func() {
		defer close(httpStopped)
		if c.HTTP != nil {
			if err := c.HTTP.Shutdown(dctx); err != nil {
				_ = c.HTTP.Close() // Shutdown leaves the requests still in flight running: cut them off
			}
		}
	}()
	stopped := make(chan struct{})
	go func() { c.GRPC.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-dctx.Done():
		c.GRPC.Stop()
	}
	<-httpStopped
	return serveErr
}
