package rulestore

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekit/ratekit/controlplane/config"
	ratelimit "github.com/ratekit/ratekit/core"
	configv1 "github.com/ratekit/ratekit/proto/ratelimit/config/v1"
)

//go:embed read.lua
var readLua string

var readScript = redis.NewScript(readLua)

// ErrInvalidDocument is wrapped by every error about a stored document that
// no process would load: one that is not valid JSON of the schema, breaks a
// bound of docs/limits.md (more than ratelimit.MaxDocumentBytes, more than
// ratelimit.MaxRulesPerTier rules in a tier, ...), or a key of another Redis
// type. Processes keep their last good rules while it is there; Delete can
// still shrink it and Remove takes it away, whatever it holds.
var ErrInvalidDocument = errors.New("rulestore: stored document is invalid")

// MaxReadBytes bounds the bytes of documents that one read of many of them
// receives and holds (docs/limits.md): the index may name MaxLimiters
// limiters of up to ratelimit.MaxDocumentBytes each, a gigabyte. List returns
// the documents past it unread (ErrNotRead); Refresh and the write path read
// them by further calls, each within it. A single document (Document,
// VersionedDocument, RawDocument) is always read.
const MaxReadBytes = 16 << 20

// ErrNotRead is wrapped by the error of a List entry whose document was not
// read: the documents before it in the list took the read past MaxReadBytes.
// The document may well be valid; Document reads it alone.
var ErrNotRead = errors.New("rulestore: document not read")

// stored is one document key as the read script found it.
type stored struct {
	present bool   // the key exists, whatever it holds
	raw     string // the document, when it is a string within the size bound
	// later is set for a document the read left out, past MaxReadBytes;
	// size is its length.
	later bool
	size  int64
	// bad says why a present key is not a document a reader would even parse
	// (another Redis type, too many bytes); it wraps ErrInvalidDocument.
	bad error
	// fingerprint identifies a bad key's content (its type or size), so a
	// replica remembers that it rejected it; a document is its own (raw).
	fingerprint string
}

// readStored reads document keys (all in one slot) without receiving a value
// no reader would accept: a key of another type or over
// ratelimit.MaxDocumentBytes is answered by its type or size. It receives at
// most MaxReadBytes of documents (and always the first): the documents past
// the bound, and all after the first of them, come back later, unread.
func (s *Store) readStored(ctx context.Context, keys []string) ([]stored, error) {
	res, err := readScript.Run(ctx, s.client, keys, ratelimit.MaxDocumentBytes, MaxReadBytes).StringSlice()
	if err != nil {
		return nil, err
	}
	if len(res) != 2*len(keys) {
		return nil, fmt.Errorf("unexpected reply of %d elements for %d keys", len(res), len(keys))
	}
	out := make([]stored, len(keys))
	for i, key := range keys {
		kind, v := res[2*i], res[2*i+1]
		switch kind {
		case "none":
		case "doc":
			out[i] = stored{present: true, raw: v}
		case "type":
			out[i] = stored{present: true, fingerprint: "type " + v,
				bad: fmt.Errorf("%w: %s is a Redis %s, not a string", ErrInvalidDocument, key, v)}
		case "later":
			n, _ := strconv.ParseInt(v, 10, 64)
			out[i] = stored{present: true, later: true, size: n}
		case "size":
			n, _ := strconv.ParseInt(v, 10, 64)
			out[i] = stored{present: true, fingerprint: "size " + v,
				bad: fmt.Errorf("%w: %s holds %d bytes, at most %d (docs/limits.md)", ErrInvalidDocument, key, n, ratelimit.MaxDocumentBytes)}
		default:
			return nil, fmt.Errorf("unexpected reply %q for %s", kind, key)
		}
	}
	return out, nil
}

// readEach reads document keys (all in one slot) as readStored does, by as
// many calls as MaxReadBytes needs, and gives each key's content to f in
// order, so that no more than one call's documents are held at once beyond
// what f keeps. It stops at the first error, of a call or of f. A timeout
// above 0 bounds each call, not the whole read: what f does between calls
// (a refresh parses and applies up to MaxReadBytes of documents) is not
// Redis's time. A first that is not zero bounds the first call instead (a
// refresh shares its deadline with the owed seed written before it).
func (s *Store) readEach(ctx context.Context, keys []string, timeout time.Duration, first time.Time, f func(i int, st stored) error) error {
	for done := 0; done < len(keys); {
		cctx, cancel := ctx, context.CancelFunc(func() {})
		switch {
		case done == 0 && !first.IsZero():
			cctx, cancel = context.WithDeadline(ctx, first)
		case timeout > 0:
			cctx, cancel = context.WithTimeout(ctx, timeout)
		}
		sts, err := s.readStored(cctx, keys[done:])
		cancel()
		if err != nil {
			return err
		}
		n := 0
		for ; n < len(sts) && !sts[n].later; n++ {
			if err := f(done+n, sts[n]); err != nil {
				return err
			}
		}
		if n == 0 {
			return fmt.Errorf("read %s: no document received", keys[done]) // the script always sends the first
		}
		done += n
	}
	return nil
}

// notRead is the error of a List entry whose document st was left unread.
func (st stored) notRead(key string) error {
	return fmt.Errorf("%w: %s holds %d bytes, and with the documents listed before it one List would receive more than %d (rulestore.MaxReadBytes, docs/limits.md): read it alone (ratekit rules show)",
		ErrNotRead, key, st.size, MaxReadBytes)
}

// decode returns the document st holds: nil when there is none, an error
// wrapping ErrInvalidDocument (and the *config.ValidationError, when there
// is one) when no process would load it.
func (st stored) decode(key string) (*configv1.LimiterRules, error) {
	switch {
	case !st.present:
		return nil, nil
	case st.bad != nil:
		return nil, st.bad
	case st.later:
		return nil, st.notRead(key)
	}
	doc, err := config.UnmarshalLimiterRules([]byte(st.raw))
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrInvalidDocument, key, err)
	}
	return doc, nil
}
