package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekit/ratekit/core/redisstore"
	"github.com/ratekit/ratekit/internal/redistest"
)

// No error of ParseURL shows the password of the URL it refuses.
func TestParseURLHidesPassword(t *testing.T) {
	for _, c := range []struct {
		name, url, want string
	}{
		{"bad port", "redis://:s3cr3t-pw@localhost:port/0", "invalid port"},
		{"bad escape in the password", "redis://user:s3cr3t%zz-pw@localhost:6379/0", "invalid %-escape"},
		{"bad scheme", "http://user:s3cr3t-pw@localhost:6379/0", "invalid URL scheme"},
		{"bad database", "redis://user:s3cr3t-pw@localhost:6379/x", "invalid database number"},
		{"control character", "redis://user:s3cr3t-pw@local\x7fhost:6379/0", "redis URL"},
		{"sentinel without master", "redis-sentinel://user:s3cr3t-pw@localhost:26379", "master name"},
		// A password with a character that ends the userinfo ('/', '?', '#'
		// unescaped, as in a base64 one) leaves a piece of it where net/url
		// or rueidis reads a port, a path or a database.
		{"slash in the password", "redis://:s3cr3t/pw@localhost:6379/0", "invalid port"},
		{"slash in the password, user", "redis://user:s3cr3t/pw@localhost:6379/0", "invalid port"},
		{"question mark in the password", "redis://:s3cr3t?pw@localhost:6379/0", "invalid port"},
		{"hash in the password", "redis://:s3cr3t#pw@localhost:6379/0", "invalid port"},
		{"digits and a slash in the password", "redis://:1234/s3cr3t@localhost:6379", "invalid database number"},
		{"digits and slashes in the password", "redis://:1234/s3cr3t@localhost:6379/0", "invalid URL path"},
		{"slash in the sentinels' password", "redis-sentinel://:s3cr3t/pw@s1:26379,s2:26379/mymaster", "invalid port"},
		{"scheme left out: the user name read as one", "s3cr3t:pw@localhost:6379", "no scheme: write redis://host:port"},
		{"scheme left out", "localhost:6379", "no scheme: write redis://host:port"},
		{"bad scheme named", "https://user:s3cr3t-pw@localhost:6379/0", "use redis://, rediss:// (TLS), redis-sentinel:// or unix://"},
		// Addresses that no server can have: Dial would return a store that
		// never connects, and the limiter would fail open for good.
		{"port out of range", "redis://:s3cr3t-pw@localhost:99999/0", "invalid port"},
		{"port zero", "redis://:s3cr3t-pw@localhost:0/0", "invalid port"},
		{"cluster node with a bad port", "redis://:s3cr3t-pw@a:7001?addr=b:7002&addr=c:70o3", "invalid port"},
		{"sentinel with a bad port", "redis-sentinel://:s3cr3t-pw@s1:26379,s2:2637x/mymaster", "invalid port"},
		{"negative database", "redis://:s3cr3t-pw@localhost:6379/-1", "invalid database number"},
		{"negative db option", "redis://:s3cr3t-pw@localhost:6379?db=-3", "invalid database number"},
		{"negative dial timeout", "redis://:s3cr3t-pw@localhost:6379?dial_timeout=-1s", "invalid dial timeout"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := redisstore.ParseURL(c.url)
			if err == nil {
				t.Fatalf("ParseURL(%q) accepted it", c.url)
			}
			if strings.Contains(err.Error(), "s3cr3t") {
				t.Errorf("error shows the credentials: %v", err)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %q lacks %q", err, c.want)
			}
		})
	}
}

// TestParseURL: one server, a Cluster's nodes, and sentinels in both forms.
func TestParseURL(t *testing.T) {
	for _, c := range []struct {
		url          string
		addrs        []string
		user, pw     string
		db           int
		master       string
		tls, unixDia bool
	}{
		{url: "redis://user:s3cr3t-pw@localhost:6379/2", addrs: []string{"localhost:6379"}, user: "user", pw: "s3cr3t-pw", db: 2},
		{url: "rediss://h:6380", addrs: []string{"h:6380"}, tls: true},
		{url: "unix:///run/redis.sock", addrs: []string{"/run/redis.sock"}, unixDia: true},
		{url: "redis://a:7001?addr=b:7002&addr=c:7003", addrs: []string{"a:7001", "b:7002", "c:7003"}},
		{url: "redis://s1:26379?addr=s2:26379&master_set=mymaster", addrs: []string{"s1:26379", "s2:26379"}, master: "mymaster"},
		{url: "redis-sentinel://:pw@s1:26379,s2:26380/mymaster?dial_timeout=2s", addrs: []string{"s1:26379", "s2:26380"}, pw: "pw", master: "mymaster"},
	} {
		t.Run(c.url, func(t *testing.T) {
			o, err := redisstore.ParseURL(c.url)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(o.InitAddress, c.addrs) || o.Username != c.user || o.Password != c.pw || o.SelectDB != c.db ||
				o.Sentinel.MasterSet != c.master || (o.TLSConfig != nil) != c.tls || (o.DialCtxFn != nil) != c.unixDia {
				t.Fatalf("ParseURL(%q) = addrs %v user %q password %q db %d master %q tls %v unix %v",
					c.url, o.InitAddress, o.Username, o.Password, o.SelectDB, o.Sentinel.MasterSet, o.TLSConfig != nil, o.DialCtxFn != nil)
			}
		})
	}
}

// A start-up error names the variable, never the URL with its password.
func ExampleParseURL() {
	_, err := redisstore.ParseURL("redis://:hunter2@localhost:port/0")
	fmt.Println("REDIS_URL:", err)
	// Output: REDIS_URL: redis URL: invalid port after host (the URL is not shown: it may hold a password)
}

// TestGoRedisOptions: the go-redis options of a URL reach the same
// deployment as Dial, on one server and through the sentinels.
func TestGoRedisOptions(t *testing.T) {
	for _, url := range []string{redistest.URL(t) + "/2", redistest.SentinelURL(t)} {
		o, err := redisstore.ParseURL(url)
		if err != nil {
			t.Fatal(err)
		}
		c := redis.NewUniversalClient(redisstore.GoRedisOptions(o))
		key := redistest.Prefix(t) + "k"
		if err := c.Set(context.Background(), key, "v", time.Minute).Err(); err != nil {
			t.Fatalf("%s: %v", url, err)
		}
		s, err := redisstore.Open(context.Background(), redisstore.Options{Client: o, RequireConnection: true})
		if err != nil {
			t.Fatal(err)
		}
		n, err := s.Delete(context.Background(), []string{key})
		_ = s.Close()
		_ = c.Close()
		if err != nil || n != 1 {
			t.Fatalf("%s: the store deleted %d keys (%v), want the go-redis client's one", url, n, err)
		}
	}
}

// TestGoRedisOptionsProtocol: protocol=2, which Dial's client honours, is
// the go-redis client's protocol too: one URL names one protocol for both
// (a proxy or server that serves RESP2 only). Without it go-redis speaks
// RESP3, its default.
func TestGoRedisOptionsProtocol(t *testing.T) {
	for _, c := range []struct {
		query string
		want  string
	}{
		{"?protocol=2", "resp=2"},
		{"", "resp=3"},
	} {
		o, err := redisstore.ParseURL(redistest.URL(t) + c.query)
		if err != nil {
			t.Fatal(err)
		}
		cl := redis.NewUniversalClient(redisstore.GoRedisOptions(o))
		info, err := cl.ClientInfo(context.Background()).Result()
		_ = cl.Close()
		if err != nil {
			t.Fatalf("%q: %v", c.query, err)
		}
		if got := fmt.Sprintf("resp=%d", info.Resp); got != c.want {
			t.Errorf("URL query %q: the go-redis client speaks %s, want %s", c.query, got, c.want)
		}
	}
}

// A client from GoRedisOptions ends a call when its context does: on a
// server that never answers, the caller's deadline is the error, not
// go-redis' own read timeout.
func TestGoRedisOptionsHonourTheContext(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() { // accept, read, never answer
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { _ = c.Close() })
			go func() { _, _ = io.Copy(io.Discard, c) }()
		}
	}()
	o, err := redisstore.ParseURL("redis://" + ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	opts := redisstore.GoRedisOptions(o)
	opts.ReadTimeout, opts.WriteTimeout = time.Hour, time.Hour // only the context can end the call
	c := redis.NewUniversalClient(opts)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- c.Ping(ctx).Err() }()
	select {
	case err := <-done:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Ping on a server that never answers: %v, want the context's deadline", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("Ping on a server that never answers still waits a minute after its context ended")
	}
}

// FuzzParseURL: no error of ParseURL shows the password, wherever the URL
// puts it (the marker is the password, or a piece of what net/url or
// rueidis read as a port, a path or a query value); an accepted URL names
// only addresses a server can have.
func FuzzParseURL(f *testing.F) {
	const marker = "Pw9zQ"
	for _, s := range [][2]string{
		{"redis://:", "@localhost:6379/0"},
		{"redis://user:", "/x@localhost:6379/0"},
		{"redis://:1234/", "@localhost:6379"},
		{"redis://:", "?dial_timeout=1@h:1"},
		{"redis://h:1?dial_timeout=", ""},
		{"redis://h:1?write_timeout=", ""},
		{"rediss://h:1?skip_verify=", ""},
		{"redis://h:1?db=", ""},
		{"redis://h:1/-1?x=", ""},
		{"redis://h:1?db=-1&x=", ""},
		{"redis://h:1?dial_timeout=-1s&x=", ""},
		{"redis://h:1?addr=", ""},
		{"redis://h:1?addr=x:", ""},
		{"redis://[", "]:1"},
		{"redis://h:1/", ""},
		{"redis://h:1/0/", ""},
		{"redis-sentinel://:", "@s1:26379,s2:26379/m"},
		{"redis-sentinel://:", "/x@s1:26379,s2:2637x/m"},
		{"redis-sentinel://s1:1/m?", "=1"},
		{"unix://:", "@/run/redis.sock"},
		{"", "://h"},
		{"redis://h%", ":1"},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, before, after string) {
		o, err := redisstore.ParseURL(before + marker + after)
		if err != nil {
			if strings.Contains(err.Error(), marker) {
				t.Fatalf("error shows a piece of the URL: %v", err)
			}
			return
		}
		if o.SelectDB < 0 || o.Dialer.Timeout < 0 {
			t.Fatalf("accepted database %d, dial timeout %v: no connection succeeds", o.SelectDB, o.Dialer.Timeout)
		}
		if o.DialCtxFn != nil { // a Unix socket: a path, not host:port
			return
		}
		for _, a := range o.InitAddress {
			_, port, err := net.SplitHostPort(a)
			if n, perr := strconv.Atoi(port); err != nil || perr != nil || n < 1 || n > 65535 {
				t.Fatalf("accepted address %q: no server has that port", a)
			}
		}
	})
}

var masterName = regexp.MustCompile(`^[A-Za-z0-9._-]+$`)

// FuzzParseURLRoundTrip: the credentials, addresses and database written
// into a URL (escaped as net/url escapes them) are what ParseURL reads, in
// the one-server and both Sentinel forms.
func FuzzParseURLRoundTrip(f *testing.F) {
	f.Add("user", "s3cr3t-pw", uint16(6379), uint16(26379), uint8(2), "mymaster")
	f.Add("", "a/b?c#d@e:f%g", uint16(1), uint16(65535), uint8(0), "m")
	f.Add("ü", "", uint16(7000), uint16(7001), uint8(15), "a-b_c.d")
	f.Fuzz(func(t *testing.T, user, pw string, port1, port2 uint16, db uint8, master string) {
		// A master name goes into the URL as it is, unescaped: one of the
		// characters Sentinel names are made of.
		if port1 == 0 || port2 == 0 || !masterName.MatchString(master) {
			return
		}
		auth := url.UserPassword(user, pw).String() + "@"
		h1, h2 := net.JoinHostPort("h1", strconv.Itoa(int(port1))), net.JoinHostPort("h2", strconv.Itoa(int(port2)))
		for _, c := range []struct {
			url    string
			addrs  []string
			db     int
			master string
		}{
			{"redis://" + auth + h1 + "/" + strconv.Itoa(int(db)), []string{h1}, int(db), ""},
			{"redis://" + auth + h1 + "?addr=" + h2 + "&master_set=" + master, []string{h1, h2}, 0, master},
			{"redis-sentinel://" + auth + h1 + "," + h2 + "/" + master, []string{h1, h2}, 0, master},
		} {
			o, err := redisstore.ParseURL(c.url)
			if err != nil {
				t.Fatalf("ParseURL(%q): %v", c.url, err)
			}
			if o.Username != user || o.Password != pw || !slices.Equal(o.InitAddress, c.addrs) ||
				o.SelectDB != c.db || o.Sentinel.MasterSet != c.master {
				t.Fatalf("ParseURL(%q) = user %q password %q addrs %v db %d master %q", c.url,
					o.Username, o.Password, o.InitAddress, o.SelectDB, o.Sentinel.MasterSet)
			}
		}
	})
}

// TestSentinelsDialedLikeTheMaster: with rediss:// the sentinels are dialed
// with TLS, as the master and as go-redis' client of the same URL
// (GoRedisOptions) dial them: a listener standing in for a sentinel reads
// a TLS handshake's first byte, where rueidis' own options sent plain text.
func TestSentinelsDialedLikeTheMaster(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	first := make(chan byte, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		b := make([]byte, 1)
		_ = c.SetReadDeadline(time.Now().Add(time.Minute))
		if _, err := io.ReadFull(c, b); err == nil {
			first <- b[0]
		}
	}()
	o, err := redisstore.ParseURL("rediss://" + ln.Addr().String() + "?master_set=mymaster&skip_verify=true&dial_timeout=3s&client_name=svc")
	if err != nil {
		t.Fatal(err)
	}
	if o.Sentinel.Dialer.Timeout != 3*time.Second || o.Sentinel.ClientName != "svc" {
		t.Errorf("sentinel dial timeout %v, client name %q: want the URL's 3s and svc", o.Sentinel.Dialer.Timeout, o.Sentinel.ClientName)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	s, err := redisstore.Open(ctx, redisstore.Options{Client: o}) // connects in the background
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	select {
	case b := <-first:
		if b != 0x16 { // a TLS record of type handshake
			t.Fatalf("the sentinel's first byte %#x (%q), want a TLS handshake (0x16)", b, b)
		}
	case <-time.After(time.Minute):
		t.Fatal("no connection to the sentinel within a minute")
	}
}
