// Package httpguard holds the defences the HTTP surfaces of ratekit share
// (the admin page, the rules service's management API and the binaries that
// serve them): the Host check against DNS rebinding, the loopback tests and
// the server timeouts.
package httpguard

import (
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"
)

// Server timeouts of the binaries and pages: a client that sends its
// headers or body slowly, or never reads the answer, holds a connection at
// most this long.
const (
	ReadHeaderTimeout = 10 * time.Second
	ReadTimeout       = 30 * time.Second
	WriteTimeout      = 30 * time.Second
	IdleTimeout       = 2 * time.Minute
	MaxHeaderBytes    = 64 << 10
)

// Server returns an http.Server for h with the timeouts above.
func Server(h http.Handler) *http.Server {
	return &http.Server{Handler: h, ReadHeaderTimeout: ReadHeaderTimeout, ReadTimeout: ReadTimeout,
		WriteTimeout: WriteTimeout, IdleTimeout: IdleTimeout, MaxHeaderBytes: MaxHeaderBytes}
}

// HostAllowed reports whether a request's Host header names this server, the
// defence against DNS rebinding (a hostile page whose name resolves to
// 127.0.0.1 is the same origin as a loopback server to the browser, so its
// Origin, cookies and tokens all match).
//
// With allowed empty, a request that arrived on a loopback listener must
// name a loopback host (localhost, 127.0.0.1 or another loopback IP, [::1];
// any port), and requests on other listeners pass. With allowed set, the
// Host must be one of its entries on any listener: "name" matches that name
// on any port, "name:port" that exact pair, "*" anything. Names compare
// without case.
func HostAllowed(r *http.Request, allowed []string) bool {
	host := strings.ToLower(r.Host)
	name := host
	if h, _, err := net.SplitHostPort(host); err == nil {
		name = h
	}
	name = strings.TrimSuffix(strings.TrimPrefix(name, "["), "]")
	if len(allowed) > 0 {
		for _, a := range allowed {
			a = strings.ToLower(strings.TrimSpace(a)) // "a, b" from a flag
			if a == "" {
				continue // "a,,b" from a flag names no host, not the empty one
			}
			if a == "*" || a == host || strings.TrimSuffix(strings.TrimPrefix(a, "["), "]") == name {
				return true
			}
		}
		return false
	}
	if !LocalLoopback(r) {
		return true
	}
	return LoopbackName(name)
}

// CheckHost serves h only to requests whose Host HostAllowed accepts with
// allowed; any other gets 403 before h runs, naming setting (the option or
// flag that allows another name). It guards what a listener serves beside
// the pages, which check their Host themselves: /metrics, for one, so that a
// rebound page cannot read the limiters' names and counts either.
func CheckHost(h http.Handler, allowed []string, setting string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !HostAllowed(r, allowed) {
			http.Error(w, "this server does not answer to the name "+QuotedHost(r)+
				"; use localhost or 127.0.0.1, or add the name to "+setting, http.StatusForbidden)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// QuotedHost quotes the request's Host for a refusal, at most its first 80
// characters: the header is the client's, whatever its length, and the
// refusal (an answer, a log line) should not grow with it.
func QuotedHost(r *http.Request) string { return fmt.Sprintf("%.80q", r.Host) }

// LoopbackName reports whether a host name (without port or brackets) is
// localhost or a loopback IP.
func LoopbackName(name string) bool {
	if strings.EqualFold(name, "localhost") {
		return true
	}
	ip := net.ParseIP(name)
	return ip != nil && ip.IsLoopback()
}

// LoopbackAddr reports whether a listen address (host:port) is on loopback
// only. An empty host (":8080") listens on every interface.
func LoopbackAddr(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	return err == nil && LoopbackName(host)
}

// RemoteLoopback reports whether the request's client connected from a
// loopback address.
func RemoteLoopback(r *http.Request) bool {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// LocalLoopback reports whether the request arrived on a loopback address of
// the server (false when the server did not record it): its connection was
// made to 127.0.0.1 or [::1], whatever address the listener is bound to.
func LocalLoopback(r *http.Request) bool {
	a, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	if !ok {
		return false
	}
	tcp, ok := a.(*net.TCPAddr)
	return ok && tcp.IP.IsLoopback()
}
