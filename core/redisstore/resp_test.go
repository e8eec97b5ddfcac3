package redisstore

import (
	"bufio"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	ratelimit "github.com/ratekit/ratekit/core"
)

// TestAppendEvalMatchesEvalCmd: the pipelined connection sends exactly the
// command the go-redis path builds (evalCmd), written as go-redis writes it.
func TestAppendEvalMatchesEvalCmd(t *testing.T) {
	ops := []ratelimit.Op{
		{Kind: ratelimit.OpCount, Key: "k1", Cost: 0.25, Limit: 10, Period: 1500 * time.Microsecond, Terminal: true},
		{Kind: ratelimit.OpDistinct, Key: "k2", BanKey: "k2:ban", Member: "m", Cost: 1, Limit: 3, Period: time.Hour, BanFor: time.Minute},
	}
	for _, mode := range []ratelimit.Mode{ratelimit.ModeCheck, ratelimit.ModePeek} {
		args := evalCmd(mode, ops, nil)
		var want []byte
		want = appendArrayHeader(want, len(args))
		for _, a := range args {
			switch a := a.(type) {
			case string:
				want = appendBulk(want, a)
			default:
				want = appendBulk(want, fmt.Sprint(a))
			}
		}
		got := appendEval(nil, false, mode, ops)
		// go-redis sends the command name as given ("evalsha"); Redis does not
		// mind the case.
		if g, w := strings.Replace(string(got), "EVALSHA", "evalsha", 1), string(want); g != w {
			t.Errorf("%s:\n got %q\nwant %q", mode, g, w)
		}
	}
}

func reply(t *testing.T, raw string) (*request, error) {
	t.Helper()
	var r request
	err := readReply(bufio.NewReaderSize(strings.NewReader(raw), 32), &r)
	return &r, err
}

func TestReadReply(t *testing.T) {
	r, err := reply(t, "*3\r\n$3\r\n1.5\r\n:60000\r\n:2\r\n")
	if err != nil || !r.array || len(r.vals) != 3 || string(r.str(r.vals[0])) != "1.5" || r.vals[1].n != 60000 || r.vals[2].n != 2 {
		t.Fatalf("array: %+v %v", r, err)
	}
	out := make([]ratelimit.OpResult, 1)
	if err := decodeReply(r, out); err != nil || out[0].Count != 1.5 || out[0].TTL != time.Minute || !out[0].Exceeded || out[0].Banned {
		t.Fatalf("decode: %+v %v", out, err)
	}
	if r, err = reply(t, ":-42\r\n"); err != nil || r.array || r.vals[0].n != -42 {
		t.Fatalf("integer: %+v %v", r, err)
	}
	if r, err = reply(t, "-NOSCRIPT No matching script\r\n"); err != nil || !r.noScript || r.err.Error() != "NOSCRIPT No matching script" {
		t.Fatalf("error reply: %+v %v", r, err)
	}
	var e replyError
	if !errors.As(r.err, &e) {
		t.Fatalf("error reply is not a replyError: %T", r.err)
	}
	if r, err = reply(t, "-ERR other\r\n"); err != nil || r.noScript {
		t.Fatalf("error reply: %+v %v", r, err)
	}
	if r, err = reply(t, "$-1\r\n"); err != nil || r.vals[0].kind != '_' {
		t.Fatalf("nil: %+v %v", r, err)
	}
	if r, err = reply(t, "*2\r\n*2\r\n:1\r\n*1\r\n$1\r\nx\r\n+OK\r\n"); err != nil || len(r.vals) != 2 || r.vals[0].kind != '*' || string(r.str(r.vals[1])) != "OK" {
		t.Fatalf("nested: %+v %v", r, err)
	}
	long := strings.Repeat("0123456789", 5)
	if r, err = reply(t, "$50\r\n"+long+"\r\n"); err != nil || string(r.str(r.vals[0])) != long {
		t.Fatalf("bulk longer than the reader's buffer: %+v %v", r, err)
	}
	for _, bad := range []string{
		"?\r\n", ":12x\r\n", ":\r\n", "*99999999\r\n", "$99999999\r\n", ":1\n", ":1", "$3\r\nab",
		":" + strings.Repeat("9", 21) + "\r\n", ":" + strings.Repeat("1", 64) + "\r\n", "+" + strings.Repeat("x", 40) + "\r\n",
	} {
		if _, err := reply(t, bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
	for _, bad := range []string{":1\r\n", "*2\r\n:1\r\n:2\r\n", "*3\r\n+x\r\n:1\r\n:2\r\n", "*3\r\n:1\r\n$1\r\n1\r\n:2\r\n"} {
		r, err := reply(t, bad)
		if err != nil {
			t.Fatal(err)
		}
		if err := decodeReply(r, make([]ratelimit.OpResult, 1)); err == nil {
			t.Errorf("decode %q: no error", bad)
		}
	}
}

func TestParseCount(t *testing.T) {
	for in, want := range map[string]float64{"0": 0, "17": 17, "-3": -3, "0.30000000000000004": 0.30000000000000004, "1e+20": 1e20} {
		if got, err := parseCount([]byte(in)); err != nil || got != want {
			t.Errorf("parseCount(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	if _, err := parseCount([]byte("x")); err == nil {
		t.Error("parseCount(x): no error")
	}
}
