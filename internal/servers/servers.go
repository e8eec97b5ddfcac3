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
)

// MaxConcurrentStreams bounds the streams one client connection to a gRPC
// server of these commands holds open at once (grpc.MaxConcurrentStreams;
// HTTP/2's SETTINGS_MAX_CONCURRENT_STREAMS). Each stream is a goroutine
// waiting for its request: without a bound, one connection that opened
// streams and never sent their messages held 20,000 goroutines and 230 MB.
// Envoy's connection pool opens another connection when it needs more.
const MaxConcurrentStreams = 1024

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
	go func() { errc <- c.GRPC.Serve(c.GRPCListener) }()
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
