package identifiers

import (
	"net/http"
	"net/netip"
	"path"
	"reflect"

	ratelimit "github.com/ratekit/ratekit/core"
)

// HTTPOptions configures FromHTTP.
type HTTPOptions struct {
	// TrustedProxies whose forwarding headers are believed. The zero value
	// trusts nobody: the client IP is the socket peer.
	TrustedProxies TrustedProxies
	// Mux, when set, is the ServeMux the middleware wraps: the endpoint is
	// its pattern for the request, resolved up front with Mux.Handler(r) (an
	// outer mux may already have set r.Pattern to its own, coarser pattern).
	// Set it when the middleware wraps the whole ServeMux. A request the
	// mux answers with a trailing-slash redirect gets the pattern it is
	// redirected to, as ServeMux reports it, but a CONNECT request, for which
	// ServeMux reports the redirect's path instead: it gets Unmatched.
	Mux *http.ServeMux
	// IPv6Prefix is the prefix length IPv6 client addresses are aggregated to
	// in the ip property (default DefaultIPv6Prefix, /64; 128 keeps every
	// address apart); ip_full always holds the whole address. See IPValue.
	IPv6Prefix int
	// Properties, when set, is called last to add or replace properties, for
	// example the authenticated user found by an earlier auth middleware:
	//
	//	func(r *http.Request, id ratelimit.Identifier) {
	//		if u, ok := auth.UserFrom(r.Context()); ok {
	//			id[identifiers.User] = "user:" + u.ID
	//		}
	//	}
	Properties func(r *http.Request, id ratelimit.Identifier)
}

// FromHTTP builds the identifier of a net/http request: ip and ip_full (see
// TrustedProxies and SetIP), method, path, endpoint (the ServeMux pattern,
// e.g. "GET /users/{id}", or Unmatched) and user (Anonymous unless Properties
// sets it).
func FromHTTP(r *http.Request, o HTTPOptions) ratelimit.Identifier {
	pattern := r.Pattern
	if o.Mux != nil {
		pattern = muxPattern(o.Mux, r)
	}
	id := NewHTTP(r, netip.Addr{}, pattern)
	SetIP(id, HTTPClientIP(r, o.TrustedProxies), o.IPv6Prefix)
	if o.Properties != nil {
		o.Properties(r, id)
	}
	return id
}

// muxPattern returns the pattern of mux for r. For a CONNECT request that
// mux redirects to its path with a slash appended, ServeMux.Handler returns
// that path (where it returns the pattern redirected to for any other
// method): a path the client chose, one endpoint per path, so it is "" then.
// A route's pattern may read the same (a CONNECT to "/static/a/.." matches
// "/static/"), so the handler must be a redirect too.
func muxPattern(mux *http.ServeMux, r *http.Request) string {
	h, pattern := mux.Handler(r)
	if r.Method == http.MethodConnect && pattern == cleanPath(r.URL.Path)+"/" && reflect.TypeOf(h) == redirectType {
		return ""
	}
	return pattern
}

// redirectType is the type of the handler ServeMux.Handler returns for a
// redirect.
var redirectType = reflect.TypeOf(http.RedirectHandler("/", http.StatusTemporaryRedirect))

// cleanPath is ServeMux's canonical form of a path: rooted, without "." and
// ".." elements or repeated slashes, a trailing slash kept.
func cleanPath(p string) string {
	if p == "" {
		return "/"
	}
	if p[0] != '/' {
		p = "/" + p
	}
	np := path.Clean(p)
	if p[len(p)-1] == '/' && np != "/" {
		np += "/"
	}
	return np
}

// HTTPClientIP returns the client IP of r: its socket peer (r.RemoteAddr), or
// what a trusted proxy's forwarding headers say.
func HTTPClientIP(r *http.Request, tp TrustedProxies) netip.Addr {
	return tp.ClientIP(PeerAddr(r.RemoteAddr), r.Header.Values)
}

// NewHTTP builds the identifier of an HTTP request from parts a framework has
// resolved: the client IP (omitted when invalid; an IPv6 one aggregated to
// its /64, see SetIP for another prefix) and the endpoint template (Unmatched
// when empty). It sets ip, ip_full, method, path, endpoint, and user =
// Anonymous. Framework adapters call it; services use FromHTTP or the adapters.
func NewHTTP(r *http.Request, clientIP netip.Addr, endpoint string) ratelimit.Identifier {
	id := ratelimit.Identifier{
		Method:   r.Method,
		Path:     r.URL.Path,
		Endpoint: EndpointOrUnmatched(endpoint),
		User:     Anonymous,
	}
	SetIP(id, clientIP, DefaultIPv6Prefix)
	return id
}

// RouteEndpoint returns "METHOD template" for routers that register routes per
// method and report the template alone (Echo's c.Path(), Gin's c.FullPath()),
// so that endpoints read like ServeMux patterns ("GET /users/:id"). An empty
// template gives Unmatched.
func RouteEndpoint(method, template string) string {
	if template == "" {
		return Unmatched
	}
	return method + " " + template
}
