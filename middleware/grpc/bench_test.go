package ratelimitgrpc

import (
	"context"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/identifiers"
)

// BenchmarkUnaryInterceptor measures the interceptor's own overhead per call
// (identifier, one memory-store check, metadata), without the network.
func BenchmarkUnaryInterceptor(b *testing.B) {
	l, err := ratelimit.New(ratelimit.Config{Name: "api", Store: ratelimit.NewMemoryStore(),
		Rules: []ratelimit.Rule{{Name: "per_ip", Characteristics: []string{identifiers.IP},
			Limit: 1 << 40, Period: time.Hour}}})
	if err != nil {
		b.Fatal(err)
	}
	ic := UnaryServerInterceptor(l)
	ctx := peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 4242}})
	// A stream that takes the headers, as a server's does: without one
	// grpc.SetHeader fails, and formats its error, on every call.
	ctx = grpc.NewContextWithServerTransportStream(ctx, headerStream{})
	info := &grpc.UnaryServerInfo{FullMethod: healthCheck}
	h := func(context.Context, any) (any, error) { return nil, nil }
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ic(ctx, nil, info, h); err != nil {
			b.Fatal(err)
		}
	}
}

// headerStream is a grpc.ServerTransportStream that drops what it is sent.
type headerStream struct{}

func (headerStream) Method() string               { return healthCheck }
func (headerStream) SetHeader(metadata.MD) error  { return nil }
func (headerStream) SendHeader(metadata.MD) error { return nil }
func (headerStream) SetTrailer(metadata.MD) error { return nil }
