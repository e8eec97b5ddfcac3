package remoterules

import "time"

// lru is the answer cache: a map and a recency list, guarded by Client.mu.
type lru struct {
	max        int
	items      map[string]*entry
	head, tail *entry // most and least recently used
}

// get looks key up without allocating (the conversion is optimised away).
func (l *lru) get(key []byte) *entry { return l.items[string(key)] }

func (l *lru) touch(e *entry) {
	if l.head == e {
		return
	}
	l.unlink(e)
	l.pushFront(e)
}

func (l *lru) add(e *entry) {
	l.items[e.key] = e
	l.pushFront(e)
	for len(l.items) > l.max && l.tail != nil {
		l.remove(l.tail)
	}
}

func (l *lru) remove(e *entry) {
	l.unlink(e)
	delete(l.items, e.key)
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
