package main

import (
	"testing"

	"github.com/ratekit/ratekit/internal/httpguard"
)

// Without -listen and -http, both servers bind loopback only.
func TestListensOnLoopbackByDefault(t *testing.T) {
	f, err := parseFlags([]string{"-available", "available_limiters.yaml", "-redis-url", "redis://127.0.0.1:6379"})
	if err != nil {
		t.Fatal(err)
	}
	for name, addr := range map[string]string{"-listen": f.listen, "-http": f.httpAddr} {
		if !httpguard.LoopbackAddr(addr) {
			t.Errorf("%s defaults to %q, not a loopback address", name, addr)
		}
	}
}
