package remoterules

import (
	"time"

	ratelimit "github.com/ratekit/ratekit/core"
)

// lru is the answer cache, guarded by Client.mu: a map of answers keyed by
// limiter and vary values with a recency list, and the compiled rule sets
// those answers share, keyed by what selects them. It is bounded by entries
// (max) and by estimated bytes (maxBytes: every entry's own cost plus, once,
// every compiled set an entry refers to).
type lru struct {
	max        int
	maxBytes   int64
	bytes      int64
	items      map[string]*entry
	sets       map[string]*compiled // by selection key; present while an entry refers to it
	head, tail *entry               // most and least recently used
}

// compiled is one validated, compiled answer's rules, shared by every entry
// whose answer carried the same rules.
type compiled struct {
	key   string
	rules *ratelimit.RuleSet // nil: an empty answer
	cost  int64              // estimated heap bytes of rules
	refs  int                // entries referring to it
}

// entryOverhead estimates an entry's heap bytes besides its key: the struct,
// its map slot and the key's string header.
const entryOverhead = 192

func (e *entry) cost() int64 { return int64(len(e.key)) + entryOverhead }

// get looks key up without allocating (the conversion is optimised away).
func (l *lru) get(key []byte) *entry { return l.items[string(key)] }

func (l *lru) touch(e *entry) {
	if l.head == e {
		return
	}
	l.unlink(e)
	l.pushFront(e)
}

// set returns the cached compiled set under key, or nil.
func (l *lru) set(key string) *compiled { return l.sets[key] }

// add caches e, which refers to e.set, then evicts least recently used
// entries while either bound is exceeded; e itself is never evicted, so an
// answer larger than maxBytes is still cached, alone.
func (l *lru) add(e *entry) {
	if cs := l.sets[e.set.key]; cs != nil {
		e.set = cs // a set compiled concurrently for the same selection
	} else {
		l.sets[e.set.key] = e.set
		l.bytes += e.set.cost
	}
	e.set.refs++
	e.rules = e.set.rules
	l.items[e.key] = e
	l.bytes += e.cost()
	l.pushFront(e)
	for (len(l.items) > l.max || l.bytes > l.maxBytes) && l.tail != nil && l.tail != e {
		l.remove(l.tail)
	}
}

func (l *lru) remove(e *entry) {
	l.unlink(e)
	delete(l.items, e.key)
	l.bytes -= e.cost()
	if e.set.refs--; e.set.refs == 0 {
		delete(l.sets, e.set.key)
		l.bytes -= e.set.cost
	}
}

func (l *lru) pushFront(e *entry) {
	e.prev, e.next = nil, l.head
	if l.head != nil {
		l.head.prev = e
	}
	l.head = e
	if l.tail == nil {
		l.tail = e
	}
}

func (l *lru) unlink(e *entry) {
	if e.prev != nil {
		e.prev.next = e.next
	} else if l.head == e {
		l.head = e.next
	}
	if e.next != nil {
		e.next.prev = e.prev
	} else if l.tail == e {
		l.tail = e.prev
	}
	e.prev, e.next = nil, nil
}

// breaker is a consecutive-failure circuit breaker, guarded by Client.mu.
// Closed, every miss may call. After threshold consecutive failures it opens:
// no call for the cooldown, then one probe whose success closes it and whose
// failure opens it again.
type breaker struct {
	threshold int // < 0 disables
	cooldown  time.Duration
	failures  int
	open      bool
	until     time.Time
	probing   bool
}

func (b *breaker) allow(now time.Time) bool {
	if b.threshold < 0 || !b.open {
		return true
	}
	if b.probing || now.Before(b.until) {
		return false
	}
	b.probing = true
	return true
}

func (b *breaker) failure(now time.Time) {
	b.failures++
	b.probing = false
	if b.threshold >= 0 && b.failures >= b.threshold {
		b.open, b.until = true, now.Add(b.cooldown)
	}
}

func (b *breaker) success() { b.failures, b.open, b.probing = 0, false, false }

func (b *breaker) isOpen() bool { return b.open }
