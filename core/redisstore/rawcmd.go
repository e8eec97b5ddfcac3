package redisstore

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"sync"

	"github.com/redis/go-redis/v9"

	ratelimit "github.com/ratekit/ratekit/core"
)

// A check on one shard through one of go-redis' own clients is one pooled
// command whose reply go-redis streams, as raw RESP, into the command's own
// buffer, where the pipelined connection's reader (readReply, decodeReply)
// decodes it. The usual command (redis.NewCmd and its args) costs the Cmd, the
// args slice, a boxed string per key, and for the reply an []any, its box and
// a boxed int64 per value of 256 or more; on a *redis.Client this one
// allocates nothing in steady state.
//
// It serves the clients whose Process runs the command synchronously on the
// caller's goroutine and has let go of it when it returns: *redis.Client, and
// *redis.ClusterClient and *redis.Ring, which route it to a node's
// *redis.Client (the autopipeliner may run a command after Process returns:
// it keeps redis.Cmd). A cluster or ring client routes the command by its
// first key, and a cluster client keeps the command's slot in it, so for them
// (rawRouted) the first key is a string and the Cmd is made afresh for each
// call: 2 allocations. A hook that keeps a command past its call must copy
// what it needs (cmd.String(), cmd.Args() with each argument formatted): the
// command's arguments are reused afterwards.

// rawMode says whether, and how, a Store's checks go through evalRaw.
type rawMode uint8

const (
	rawNone   rawMode = iota // a Client that is not go-redis' own, or an autopipeliner
	rawReused                // *redis.Client: the whole command is pooled
	rawRouted                // *redis.ClusterClient, *redis.Ring: a fresh Cmd, and KEYS[1] a string
)

// rawEval is one evaluate.lua call: a redis.RawWriteToCmd whose writer is
// reply, and the arguments it sends. Its length (len(args)) is fixed when it is
// made, so rawEvals are pooled by length; everything else is refilled per call.
type rawEval struct {
	*redis.RawWriteToCmd
	args  []any     // the command; the Cmd's own args, filled in place
	strs  []bulkArg // the keys and members that args point to
	bytes []byte    // the bytes of strs, one block
	reply rawReply  // the reply, as go-redis streamed it
	rd    bytes.Reader
	br    *bufio.Reader // reads reply for readReply
	r     request       // the decoded reply
}

// NoRetry lets go-redis retry the command (as it retries a redis.Cmd: a pool
// timeout, a dial error, a connection found closed, LOADING, READONLY…) as
// long as no part of the reply has been read: a reply cut short would be
// followed, in the same buffer, by the retry's. A command whose reply was cut
// short ran on the server, and is not run twice.
func (e *rawEval) NoRetry() bool { return len(e.reply.buf) > 0 }

// bulkArg is a string argument that costs no allocation to pass: go-redis
// writes a BinaryMarshaler's bytes as a bulk string, and a pointer converts to
// an interface for free, where a string does not. String is for the hooks and
// logs that format a command's arguments.
type bulkArg struct {
	s string
	b []byte // s, copied into the rawEval's bytes
}

func (a *bulkArg) MarshalBinary() ([]byte, error) { return a.b, nil }
func (a *bulkArg) String() string                 { return a.s }

// rawReply is the writer of a rawEval: it keeps the raw reply, and turns a
// top-level error reply into an error, as go-redis does for its own commands
// (so that its retries, its connection handling and its hooks see the same
// error, and HasErrorPrefix finds NOSCRIPT).
type rawReply struct{ buf []byte }

func (w *rawReply) Write(p []byte) (int, error) {
	if len(w.buf) == 0 && len(p) > 0 && p[0] == '-' {
		return 0, redisError(p[1:])
	}
	w.buf = append(w.buf, p...)
	return len(p), nil
}

// redisError is an error reply of Redis in the go-redis path: a redis.Error,
// like go-redis' own.
type redisError string

func (e redisError) Error() string { return string(e) }
func (redisError) RedisError()     {}

var _ redis.Error = redisError("")

// maxPooledArgs is the longest command that is pooled: about ten rules.
// Longer ones are made afresh for each call.
const maxPooledArgs = 64

var rawEvals [maxPooledArgs + 1]sync.Pool

func getRawEval(nargs int) *rawEval {
	if nargs <= maxPooledArgs {
		if e, ok := rawEvals[nargs].Get().(*rawEval); ok {
			return e
		}
	}
	e := &rawEval{args: make([]any, nargs)} // its Cmd is made by run
	e.br = bufio.NewReaderSize(&e.rd, 256)
	return e
}

func putRawEval(e *rawEval) {
	if len(e.args) > maxPooledArgs || cap(e.reply.buf) > 64<<10 || cap(e.bytes) > 64<<10 || cap(e.r.data) > 64<<10 {
		return
	}
	clear(e.strs) // let go of the caller's strings
	e.rd.Reset(nil)
	rawEvals[len(e.args)].Put(e)
}

// fill writes the EVALSHA command for ops into e.args, with the KEYS and ARGV
// of evalCmd.
func (e *rawEval) fill(raw rawMode, mode ratelimit.Mode, ops []ratelimit.Op, sh evalShape) {
	if cap(e.strs) < sh.nstrs {
		e.strs = make([]bulkArg, sh.nstrs)
	}
	e.strs = e.strs[:0]
	if cap(e.bytes) < sh.size {
		e.bytes = make([]byte, 0, sh.size)
	}
	e.bytes = e.bytes[:0]
	a := append(e.args[:0], "evalsha", evaluateSHA, sh.nkeys)
	for i := range ops {
		if i == 0 && raw == rawRouted {
			a = append(a, ops[0].Key) // routed by: go-redis reads it as a string
		} else {
			a = append(a, e.str(ops[i].Key))
		}
		if ops[i].BanKey != "" {
			a = append(a, e.str(ops[i].BanKey))
		}
	}
	for i := range ops {
		op := &ops[i]
		code := opCode(mode, op)
		a = appendNumArgs(a, code, op)
		if isShort(code) {
			continue
		}
		if op.Kind == ratelimit.OpTokenBucket {
			a = append(a, numArg(op.Burst)) // the burst in the member's place
			continue
		}
		a = append(a, e.str(op.Member))
	}
	if len(a) != len(e.args) {
		panic(fmt.Sprintf("redisstore: evaluate.lua command of %d arguments, want %d", len(a), len(e.args)))
	}
}

// str returns s as an argument. e.strs and e.bytes were sized by fill, so
// neither moves while args point into them.
func (e *rawEval) str(s string) *bulkArg {
	off := len(e.bytes)
	e.bytes = append(e.bytes, s...)
	e.strs = append(e.strs, bulkArg{s: s, b: e.bytes[off:len(e.bytes):len(e.bytes)]})
	return &e.strs[len(e.strs)-1]
}

// run processes e once, with a fresh reply.
func (e *rawEval) run(ctx context.Context, p processor, raw rawMode) error {
	e.reply.buf = e.reply.buf[:0]
	if raw == rawRouted || e.RawWriteToCmd == nil {
		// The Cmd's context is only read by Clone; the call's own goes to Process.
		e.RawWriteToCmd = redis.NewRawWriteToCmd(context.Background(), &e.reply, e.args...)
		e.SetFirstKeyPos(3) // see newEvalCmd
		e.SetStepCount(1)
		return p.Process(ctx, e)
	}
	e.SetErr(nil)
	e.SetVal(0)
	return p.Process(ctx, e)
}

// evalRaw is evalProcess for go-redis' clients but the autopipeliner, with
// ops on one shard: it runs evaluate.lua on ops as EVALSHA, and as EVAL when
// the server does not have the script cached, and decodes the reply into out.
func evalRaw(ctx context.Context, p processor, raw rawMode, mode ratelimit.Mode, ops []ratelimit.Op, out []ratelimit.OpResult) error {
	sh := evalShapeOf(mode, ops)
	e := getRawEval(sh.nargs)
	defer putRawEval(e)
	e.fill(raw, mode, ops, sh)
	err := e.run(ctx, p, raw)
	if err != nil && isNoScript(err) { // HasErrorPrefix allocates even for nil
		e.args[0], e.args[1] = "eval", evaluateSrc
		err = e.run(ctx, p, raw)
	}
	if err != nil {
		return fmt.Errorf("redisstore: eval: %w", err)
	}
	e.rd.Reset(e.reply.buf)
	e.br.Reset(&e.rd)
	if err := readReply(e.br, &e.r); err != nil {
		return fmt.Errorf("redisstore: eval: %w", err)
	}
	if e.br.Buffered() > 0 || e.rd.Len() > 0 { // one reply, and nothing else
		return fmt.Errorf("redisstore: eval: %w: %d bytes after the reply", errProtocol, e.br.Buffered()+e.rd.Len())
	}
	if e.r.err != nil {
		return fmt.Errorf("redisstore: eval: %w", e.r.err)
	}
	return decodeReply(&e.r, out)
}
