package servers_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ratekit/ratekit/internal/servers"
)

// grpcServer stands in for *grpc.Server (the root module never imports gRPC;
// the commands' own tests run Run with the real one): it accepts on its
// listener until stopped and records the calls Run makes, in order.
type grpcServer struct {
	mu       sync.Mutex
	calls    []string
	lis      net.Listener
	hang     bool          // GracefulStop waits for Stop
	stop     chan struct{} // closed by Stop
	stopOnce sync.Once
}

func newGRPCServer(hang bool) *grpcServer {
	return &grpcServer{hang: hang, stop: make(chan struct{})}
}

func (g *grpcServer) record(c string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.calls = append(g.calls, c)
}

func (g *grpcServer) Calls() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.calls)
}

func (g *grpcServer) Serve(l net.Listener) error {
	g.mu.Lock()
	g.lis = l
	g.mu.Unlock()
	for {
		c, err := l.Accept()
		if err != nil {
			return nil // closed by a stop, as grpc.Server.Serve returns
		}
		_ = c.Close()
	}
}

func (g *grpcServer) GracefulStop() {
	g.record("graceful")
	if g.hang {
		<-g.stop
	}
	g.closeListener()
}

func (g *grpcServer) Stop() {
	g.record("stop")
	g.stopOnce.Do(func() { close(g.stop) })
	g.closeListener()
}

func (g *grpcServer) closeListener() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.lis != nil {
		_ = g.lis.Close()
	}
}

func listen(t *testing.T) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// waitRun waits for Run's result with a deadline generous for a loaded machine.
func waitRun(t *testing.T, done <-chan error) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return")
		return nil
	}
}

// Run serves HTTP and the gRPC server until ctx ends, then drains in order:
// Draining, the graceful gRPC stop, the HTTP shutdown; it returns nil.
func TestRunServesAndDrains(t *testing.T) {
	g := newGRPCServer(false)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ready := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- servers.Run(ctx, servers.Config{GRPC: g, GRPCListener: listen(t), HTTP: hs, HTTPListener: listen(t),
			Drain: time.Minute, Draining: func() { g.record("draining") },
			Ready: func(grpcAddr, httpAddr string) { ready <- httpAddr }})
	}()
	httpAddr := <-ready
	resp, err := http.Get("http://" + httpAddr + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if string(body) != "ok\n" {
		t.Fatalf("healthz = %q", body)
	}
	cancel()
	if err := waitRun(t, done); err != nil {
		t.Fatalf("Run = %v, want nil after ctx ended", err)
	}
	if got, want := g.Calls(), []string{"draining", "graceful"}; !slices.Equal(got, want) {
		t.Fatalf("calls %v, want %v", got, want)
	}
	if _, err := http.Get("http://" + httpAddr + "/healthz"); err == nil {
		t.Fatal("HTTP still serves after Run returned")
	}
}

// A graceful stop that does not finish within Drain is cut off by Stop.
func TestRunStopsAfterDrain(t *testing.T) {
	g := newGRPCServer(true)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	done := make(chan error, 1)
	go func() {
		done <- servers.Run(ctx, servers.Config{GRPC: g, GRPCListener: listen(t), Drain: 10 * time.Millisecond})
	}()
	if err := waitRun(t, done); err != nil {
		t.Fatal(err)
	}
	if got, want := g.Calls(), []string{"graceful", "stop"}; !slices.Equal(got, want) {
		t.Fatalf("calls %v, want %v", got, want)
	}
}

// A server that fails ends Run with its error.
func TestRunReturnsServerError(t *testing.T) {
	g := newGRPCServer(false)
	hl := listen(t)
	_ = hl.Close() // HTTP Serve fails at once
	done := make(chan error, 1)
	go func() {
		done <- servers.Run(context.Background(), servers.Config{GRPC: g, GRPCListener: listen(t),
			HTTP: &http.Server{ReadHeaderTimeout: time.Second}, HTTPListener: hl, Drain: time.Minute})
	}()
	err := waitRun(t, done)
	var opErr *net.OpError
	if !errors.As(err, &opErr) {
		t.Fatalf("Run = %v, want the HTTP listener's error", err)
	}
}

// An HTTP request still in flight when Drain runs out is cut off, as a gRPC
// call is: Run does not return with its handler still running.
func TestRunCutsOffHTTPAfterDrain(t *testing.T) {
	entered := make(chan struct{})
	cutOff := make(chan struct{})
	hs := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		close(entered)
		<-r.Context().Done() // the client never hangs up: only a closed connection ends it
		close(cutOff)
	})}
	t.Cleanup(func() { _ = hs.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ready := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- servers.Run(ctx, servers.Config{GRPC: newGRPCServer(false), GRPCListener: listen(t), HTTP: hs,
			HTTPListener: listen(t), Drain: 10 * time.Millisecond, Ready: func(_, httpAddr string) { ready <- httpAddr }})
	}()
	httpAddr := <-ready
	go func() {
		if resp, err := http.Get("http://" + httpAddr + "/slow"); err == nil {
			_ = resp.Body.Close()
		}
	}()
	<-entered
	cancel()
	if err := waitRun(t, done); err != nil {
		t.Fatal(err)
	}
	select {
	case <-cutOff:
	case <-time.After(10 * time.Second):
		t.Fatal("the HTTP request in flight was not cut off after Drain")
	}
}

// The two servers drain at once: the HTTP server stops serving while the gRPC
// server's graceful stop still waits for its calls, so that a stop takes at
// most Drain; the HTTP shutdown used to start only after the gRPC stop, up to
// twice Drain.
func TestRunDrainsBothAtOnce(t *testing.T) {
	g := newGRPCServer(true) // GracefulStop waits until Stop: here, the test
	hs := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.NotFoundHandler()}
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- servers.Run(ctx, servers.Config{GRPC: g, GRPCListener: listen(t), HTTP: hs, HTTPListener: listen(t),
			Drain: time.Hour, Ready: func(_, httpAddr string) { ready <- httpAddr }})
	}()
	httpAddr := <-ready
	cancel()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		c, err := net.Dial("tcp", httpAddr)
		if err != nil {
			break // the HTTP listener is closed, the gRPC stop still waiting
		}
		_ = c.Close()
		if time.Now().After(deadline) {
			t.Fatal("HTTP still accepts 30s into a drain whose gRPC stop waits: it drains after gRPC, not beside it")
		}
	}
	g.Stop() // the gRPC calls end
	if err := waitRun(t, done); err != nil {
		t.Fatal(err)
	}
}

// holdServer stands in for *grpc.Server as a server of long-lived
// connections: it hands each connection it accepts to the test, open.
type holdServer struct {
	accepted chan net.Conn
	mu       sync.Mutex
	lis      net.Listener
}

func (g *holdServer) Serve(l net.Listener) error {
	g.mu.Lock()
	g.lis = l
	g.mu.Unlock()
	for {
		c, err := l.Accept()
		if err != nil {
			return nil
		}
		g.accepted <- c
	}
}

func (g *holdServer) GracefulStop() { g.Stop() }

func (g *holdServer) Stop() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.lis != nil {
		_ = g.lis.Close()
	}
}

// A gRPC connection over Config.MaxConnections waits in the listen queue:
// the server accepts it once a connection it serves closes. Without the cap
// every connection was accepted at once (servers.MaxConnections for the
// commands).
func TestRunCapsConnections(t *testing.T) {
	g := &holdServer{accepted: make(chan net.Conn, 8)}
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- servers.Run(ctx, servers.Config{GRPC: g, GRPCListener: listen(t), MaxConnections: 2, Drain: time.Minute,
			Ready: func(grpcAddr, _ string) { ready <- grpcAddr }})
	}()
	t.Cleanup(func() {
		cancel()
		_ = waitRun(t, done)
	})
	addr := <-ready
	dial := func() {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
	}
	accepted := func(what string) net.Conn {
		select {
		case c := <-g.accepted:
			t.Cleanup(func() { _ = c.Close() })
			return c
		case <-time.After(30 * time.Second):
			t.Fatalf("%s: not accepted within 30s", what)
			return nil
		}
	}
	dial()
	dial()
	first := accepted("the first connection")
	accepted("the second connection")
	dial()
	// Only a server that accepts it fails here; the wait gives one time to.
	select {
	case <-g.accepted:
		t.Fatal("a third connection was accepted while two were served, over MaxConnections 2")
	case <-time.After(500 * time.Millisecond):
	}
	_ = first.Close()
	accepted("the third connection, once the first closed")
}
