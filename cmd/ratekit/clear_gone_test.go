package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/url"
	"strings"
	"sync"
	"testing"

	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/redistest"
)

// TestClearKeysGoneBeforeTheDelete: clear finds the keys, and they expire
// (or another client removes them) before its delete. A clear that deleted
// nothing says so and exits 1; one that deleted some of them says how many,
// and lists none as removed.
func TestClearKeysGoneBeforeTheDelete(t *testing.T) {
	for _, tt := range []struct {
		name     string
		gone     int // keys removed between clear's EXISTS and its DEL
		code     int
		stdout   []string
		stderr   string
		noStdout string
	}{
		{name: "all", gone: 3, code: 1, noStdout: "  removed ",
			stderr: "nothing cleared: the 3 keys found under %q were gone before the delete (expired, or removed by another client)"},
		{name: "some", gone: 1, code: 0, noStdout: "  removed ",
			stdout: []string{"  found ban ", "cleared 2 of the 3 keys found: the others were gone before the delete (expired, or removed by another client)\n"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			client := redistest.Client(t)
			ctx := context.Background()
			var e *explainEnv
			bob := ratelimit.Identifier{"user": "bob", "ip": "10.0.0.9", "request_type": "web", "path": "/login"}
			proxy := delProxy(t, redistest.URL(t), func() {
				keys := e.limiter.Keys(bob)
				var present []string
				for _, k := range keys {
					if n, err := client.Exists(ctx, k).Result(); err == nil && n == 1 {
						present = append(present, k)
					}
				}
				if err := client.Del(ctx, present[:tt.gone]...).Err(); err != nil {
					t.Error(err)
				}
			})
			e = newExplainEnv(t, client, proxy, false)
			e.check(t, 3, bob) // login_by_ip: limit 2, the third bans
			args := append([]string{"clear"}, e.flags()[1:]...)
			stdout, stderr, code := e.run(t, append(args, "ip=10.0.0.9", "path=/login", "user=bob", "request_type=web")...)
			want := tt.stderr
			if want != "" {
				want = strings.ReplaceAll(want, "%q", `"`+e.prefix+`"`)
			}
			if code != tt.code || !strings.Contains(stderr, want) || strings.Contains(stdout, tt.noStdout) {
				t.Fatalf("exit %d, want %d\nstdout %s\nstderr %s\nwant on stderr %s", code, tt.code, stdout, stderr, want)
			}
			for _, w := range tt.stdout {
				if !strings.Contains(stdout, w) {
					t.Errorf("stdout lacks %q:\n%s", w, stdout)
				}
			}
		})
	}
}

// delProxy serves a TCP proxy to the Redis of redisURL and returns the URL
// that reaches Redis through it. Before it forwards the first DEL command it
// calls beforeDel: what a key's expiry or another client does between two
// commands of the CLI, at a known point.
func delProxy(t *testing.T, redisURL string, beforeDel func()) string {
	var once sync.Once
	// RESP: a command is an array of bulk strings; go-redis writes each in
	// one write, so a read holds all of it.
	del := []byte("\r\n$3\r\ndel\r\n")
	return redisProxy(t, redisURL, func(b []byte) {
		if bytes.Contains(bytes.ToLower(b), del) {
			once.Do(beforeDel)
		}
	})
}

// redisProxy serves a TCP proxy to the Redis of redisURL and returns the
// URL that reaches Redis through it. It calls before with each read of a
// client before it forwards it to Redis.
func redisProxy(t *testing.T, redisURL string, before func(b []byte)) string {
	t.Helper()
	u, err := url.Parse(redisURL)
	if err != nil {
		t.Fatal(err)
	}
	target := u.Host
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		open []net.Conn
	)
	track := func(c net.Conn) {
		mu.Lock()
		defer mu.Unlock()
		open = append(open, c)
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			r, err := net.Dial("tcp", target)
			if err != nil {
				_ = c.Close()
				t.Error(err)
				return
			}
			track(c)
			track(r)
			wg.Add(2)
			go func() {
				defer wg.Done()
				_, _ = io.Copy(c, r)
				_ = c.Close()
			}()
			go func() {
				defer wg.Done()
				defer r.Close()
				buf := make([]byte, 64<<10)
				for {
					n, err := c.Read(buf)
					if n > 0 {
						before(buf[:n])
						if _, werr := r.Write(buf[:n]); werr != nil {
							return
						}
					}
					if err != nil {
						if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
							t.Log(err)
						}
						return
					}
				}
			}()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		for _, c := range open {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	u.Host = ln.Addr().String()
	return u.String()
}
