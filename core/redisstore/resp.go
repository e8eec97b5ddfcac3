package redisstore

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"
	"sync/atomic"
)

// A request is one command on a pipelined connection and, once done, its
// reply. Requests are pooled: in steady state a command allocates nothing.
type request struct {
	cmd []byte // the command, RESP-encoded by the caller

	// The reply: one value, or the elements of an array reply (array set).
	// Strings are kept in data, values point into it.
	vals     []respVal
	data     []byte
	array    bool
	err      error // a Redis error reply (a replyError), or why the command got no reply
	noScript bool  // err is NOSCRIPT: the server does not have the script cached
	replies  int   // several commands, whose replies are read as one value each (0: one command)

	// state hands the request over between the caller and the connection:
	// whoever moves it out of pending decides who returns it to the pool.
	state atomic.Uint32
	done  chan struct{} // receives once when the reply is in (state done)
}

const (
	reqPending   = iota
	reqDone      // the connection filled the reply; the caller owns it
	reqAbandoned // the caller gave up; the connection recycles it
)

// respVal is one scalar of a reply.
type respVal struct {
	kind     byte  // ':' integer, '$' bulk string, '+' simple string, '_' nil, '-' error, '*' nested array
	n        int64 // the integer
	off, end int   // the string: data[off:end]
}

var requests = sync.Pool{New: func() any { return &request{done: make(chan struct{}, 1)} }}

func getRequest() *request { return requests.Get().(*request) }

// putRequest recycles r. Requests that grew unusually large are dropped so
// that the pool keeps memory bounded.
func putRequest(r *request) {
	if cap(r.cmd) > 64<<10 || cap(r.data) > 64<<10 || cap(r.vals) > 1024 {
		return
	}
	r.cmd, r.vals, r.data, r.array, r.err, r.noScript, r.replies = r.cmd[:0], r.vals[:0], r.data[:0], false, nil, false, 0
	r.state.Store(reqPending)
	requests.Put(r)
}

// complete hands a finished request (reply or err set) to its caller, or
// recycles it when the caller has given up.
func (r *request) complete() {
	if r.state.CompareAndSwap(reqPending, reqDone) {
		r.done <- struct{}{}
		return
	}
	putRequest(r)
}

// fail completes r with err.
func (r *request) fail(err error) {
	r.vals, r.data, r.array, r.err, r.noScript = r.vals[:0], r.data[:0], false, err, false
	r.complete()
}

// str returns the string of v.
func (r *request) str(v respVal) []byte { return r.data[v.off:v.end] }

// replyError is an error reply of Redis, such as "NOSCRIPT No matching script".
type replyError string

func (e replyError) Error() string { return string(e) }

// Limits of what a reply may hold; a reply beyond them is a protocol error
// that closes the connection, so a confused peer cannot make the reader
// allocate without bound.
const (
	maxReplyArray = 1 << 16
	maxReplyBulk  = 1 << 20
)

var errProtocol = errors.New("RESP protocol error")

// readReply reads one reply from br into r. An error reply goes to r.err; a
// returned error means the stream is unusable (I/O or protocol error).
func readReply(br *bufio.Reader, r *request) error {
	r.vals, r.data, r.array, r.err, r.noScript = r.vals[:0], r.data[:0], false, nil, false
	line, err := readLine(br)
	if err != nil {
		return err
	}
	if line[0] != '*' {
		return readValue(br, r, line)
	}
	n, err := parseInt(line[1:])
	if err != nil {
		return err
	}
	r.array = true
	if n < 0 { // nil array
		return nil
	}
	if n > maxReplyArray {
		return fmt.Errorf("%w: array of %d", errProtocol, n)
	}
	for range n {
		line, err := readLine(br)
		if err != nil {
			return err
		}
		if line[0] == '*' { // never sent by evaluate.lua: skip it, as an opaque value
			if err := skipArray(br, line, 1); err != nil {
				return err
			}
			r.vals = append(r.vals, respVal{kind: '*'})
			continue
		}
		if err := readValue(br, r, line); err != nil {
			return err
		}
	}
	return nil
}

// readReplies reads the r.replies replies of a request of several commands
// into r.vals, one value each: an error reply is a value of kind '-' whose
// text is r.str of it, and does not fail the request.
func readReplies(br *bufio.Reader, r *request) error {
	r.vals, r.data, r.array, r.err, r.noScript = r.vals[:0], r.data[:0], false, nil, false
	for range r.replies {
		line, err := readLine(br)
		if err != nil {
			return err
		}
		switch line[0] {
		case '*': // never the reply of the commands sent this way
			if err := skipArray(br, line, 1); err != nil {
				return err
			}
			r.vals = append(r.vals, respVal{kind: '*'})
		case '-':
			off := len(r.data)
			r.data = append(r.data, line[1:]...)
			r.vals = append(r.vals, respVal{kind: '-', off: off, end: len(r.data)})
		default:
			if err := readValue(br, r, line); err != nil {
				return err
			}
		}
	}
	return nil
}

// readValue appends the scalar starting with line to r.vals.
func readValue(br *bufio.Reader, r *request, line []byte) error {
	switch line[0] {
	case ':':
		n, err := parseInt(line[1:])
		if err != nil {
			return err
		}
		r.vals = append(r.vals, respVal{kind: ':', n: n})
	case '+':
		off := len(r.data)
		r.data = append(r.data, line[1:]...)
		r.vals = append(r.vals, respVal{kind: '+', off: off, end: len(r.data)})
	case '-':
		if !r.array {
			r.err = replyError(line[1:])
			// The server restarted, failed over or ran SCRIPT FLUSH.
			r.noScript = bytes.HasPrefix(line[1:], []byte("NOSCRIPT"))
		}
		r.vals = append(r.vals, respVal{kind: '-'})
	case '$':
		n, err := parseInt(line[1:])
		if err != nil {
			return err
		}
		if n < 0 {
			r.vals = append(r.vals, respVal{kind: '_'})
			return nil
		}
		if n > maxReplyBulk {
			return fmt.Errorf("%w: bulk string of %d bytes", errProtocol, n)
		}
		off := len(r.data)
		r.data = append(r.data, make([]byte, n+2)...) // +2: the CRLF
		if _, err := io.ReadFull(br, r.data[off:]); err != nil {
			return err
		}
		r.data = r.data[:off+int(n)]
		r.vals = append(r.vals, respVal{kind: '$', off: off, end: len(r.data)})
	default:
		return fmt.Errorf("%w: unexpected %q", errProtocol, line[0])
	}
	return nil
}

// skipArray reads past the array whose header is line.
func skipArray(br *bufio.Reader, line []byte, depth int) error {
	if depth > 8 {
		return fmt.Errorf("%w: arrays nested too deep", errProtocol)
	}
	n, err := parseInt(line[1:])
	if err != nil {
		return err
	}
	if n > maxReplyArray {
		return fmt.Errorf("%w: array of %d", errProtocol, n)
	}
	var scratch request
	for range n {
		line, err := readLine(br)
		if err != nil {
			return err
		}
		if line[0] == '*' {
			err = skipArray(br, line, depth+1)
		} else {
			scratch.vals, scratch.data, scratch.array = scratch.vals[:0], scratch.data[:0], true
			err = readValue(br, &scratch, line)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// readLine returns the next line without its CRLF; it is valid until the next
// read from br.
func readLine(br *bufio.Reader) ([]byte, error) {
	line, err := br.ReadSlice('\n')
	if err != nil {
		if errors.Is(err, bufio.ErrBufferFull) {
			return nil, fmt.Errorf("%w: line too long", errProtocol)
		}
		return nil, err
	}
	if len(line) < 3 || line[len(line)-2] != '\r' {
		return nil, fmt.Errorf("%w: malformed line", errProtocol)
	}
	return line[:len(line)-2], nil
}

// parseInt parses a decimal int64 without allocating.
func parseInt(b []byte) (int64, error) {
	if len(b) == 0 || len(b) > 20 {
		return 0, fmt.Errorf("%w: bad integer", errProtocol)
	}
	neg := b[0] == '-'
	if neg {
		b = b[1:]
		if len(b) == 0 {
			return 0, fmt.Errorf("%w: bad integer", errProtocol)
		}
	}
	var n int64
	for _, c := range b {
		if c < '0' || c > '9' || n > (1<<63-1-9)/10 {
			return 0, fmt.Errorf("%w: bad integer", errProtocol)
		}
		n = n*10 + int64(c-'0')
	}
	if neg {
		n = -n
	}
	return n, nil
}

// parseCount parses a counter as INCRBYFLOAT prints it: an integer in the
// usual case, which parses without allocating, else a float.
func parseCount(b []byte) (float64, error) {
	if n, err := parseInt(b); err == nil && n > -1<<53 && n < 1<<53 {
		return float64(n), nil
	}
	return strconv.ParseFloat(string(b), 64)
}
