package ratelimitgrpc

import (
	"context"
	"net/netip"
	"strings"

	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/identifiers"
)

// Call describes the RPC being checked. Hooks (identifier, skip, deny, cost)
// receive it.
type Call struct {
	// FullMethod is "/package.Service/Method".
	FullMethod string
	// Service ("package.Service") and Method ("Method") split FullMethod.
	Service, Method string
	// Stream is true for streaming RPCs, which are checked once, at stream open.
	Stream bool
	// Peer is the socket peer's IP; invalid for non-IP transports.
	Peer netip.Addr
	// ClientIP is Peer, or the address a trusted proxy forwarded in the
	// x-forwarded-for, forwarded or x-real-ip metadata (see WithTrustedProxies).
	ClientIP netip.Addr
	// IPv6Prefix is the prefix length DefaultIdentifier aggregates an IPv6
	// ClientIP to in the ip property (WithIPv6Prefix; 0 means
	// identifiers.DefaultIPv6Prefix): pass it to identifiers.SetIP in a
	// custom identifier.
	IPv6Prefix int
	// Metadata is the incoming request metadata (do not modify it).
	Metadata metadata.MD
}

func newCall(ctx context.Context, fullMethod string, stream bool, tp identifiers.TrustedProxies, ipv6Bits int) *Call {
	c := &Call{FullMethod: fullMethod, Stream: stream, IPv6Prefix: ipv6Bits}
	c.Service, c.Method = splitMethod(fullMethod)
	if p, ok := peer.FromContext(ctx); ok {
		c.Peer = identifiers.AddrFromNet(p.Addr)
	}
	c.Metadata, _ = metadata.FromIncomingContext(ctx)
	c.ClientIP = tp.ClientIP(c.Peer, c.Metadata.Get)
	return c
}

// splitMethod splits "/pkg.Service/Method" into its service and method.
func splitMethod(full string) (service, method string) {
	s := strings.TrimPrefix(full, "/")
	if i := strings.LastIndexByte(s, '/'); i >= 0 {
		return s[:i], s[i+1:]
	}
	return "", s
}

// DefaultIdentifier is the identifier of a call unless WithIdentifier replaces
// it: ip and ip_full (the client IP, an IPv6 one aggregated to its prefix of
// call.IPv6Prefix bits in ip; see identifiers.SetIP; both omitted when the
// transport has none), grpc_service,
// grpc_method and endpoint (both the full method, which is already a
// low-cardinality route), and user = identifiers.Anonymous (set the caller's
// principal with WithProperties).
func DefaultIdentifier(call *Call) ratelimit.Identifier {
	id := ratelimit.Identifier{
		identifiers.GRPCService: call.Service,
		identifiers.GRPCMethod:  call.FullMethod,
		identifiers.Endpoint:    call.FullMethod,
		identifiers.User:        identifiers.Anonymous,
	}
	identifiers.SetIP(id, call.ClientIP, call.IPv6Prefix)
	return id
}

// SkipMethods returns a skip function (for WithSkip) that exempts the given
// full methods, for example "/grpc.health.v1.Health/Check".
func SkipMethods(fullMethods ...string) func(ctx context.Context, call *Call) bool {
	set := make(map[string]struct{}, len(fullMethods))
	for _, m := range fullMethods {
		set[m] = struct{}{}
	}
	return func(_ context.Context, call *Call) bool {
		_, ok := set[call.FullMethod]
		return ok
	}
}
