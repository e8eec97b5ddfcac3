package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/rueidis"
)

// ErrReplica is the error of a call on a Store from Dial or Open whose
// standalone server or Sentinel master answered READONLY: it has become a
// replica (a failover moved the name the store dialed to another server, or
// the store missed a Sentinel's failover). The store dials the
// name again, at most once per redialInterval while calls come, until the
// server it reaches is a master; until then calls fail at once, peeks too,
// so that the Limiter's breaker, whose probe only reads, stays open.
var ErrReplica = errors.New("redisstore: the Redis server is a replica (READONLY); dialing it again")

// redialInterval is the least time between two re-dials after READONLY.
const redialInterval = time.Second

// readOnly reports whether err holds a READONLY reply: a write sent to a
// replica.
func readOnly(err error) bool {
	var re *rueidis.RedisError
	return errors.As(err, &re) && strings.HasPrefix(re.Error(), "READONLY")
}

// failed looks at the error of a call on c: a READONLY reply of a
// standalone server or of a Sentinel's master marks the store as talking to
// a replica and starts a re-dial. rueidis keeps a connection that gets
// READONLY (go-redis drops it), so without this every check failed until a
// restart. rueidis follows a Sentinel's failover when the sentinel it
// watches announces it (+switch-master); when that sentinel hangs, it missed
// it and kept writing to the old master, back as a replica, for as long as
// the sentinel hung (TestSentinelFailoverWatchedSentinelHung). A re-dial
// asks the sentinels again. A Cluster's failovers are rueidis' to follow.
func (d *dialed) failed(c *rueidisClient, err error) {
	if err == nil || !readOnly(err) || !redialable(c.Mode()) {
		return
	}
	if d.client.Load() != c {
		return // a call of a client already replaced
	}
	d.replica.Store(true)
	d.redial()
}

// redialable reports whether a client of mode follows one master that a
// re-dial finds again: a standalone server's name, or a Sentinel's master.
func redialable(mode rueidis.ClientMode) bool {
	return mode == rueidis.ClientModeStandalone || mode == rueidis.ClientModeSentinel
}

// redial dials the store's URL again in the background, unless a re-dial
// runs or one started less than redialInterval ago. When the new client's
// server is a master, it replaces the old client, which is closed.
func (d *dialed) redial() {
	now := time.Now().UnixNano()
	last := d.lastRedial.Load()
	if now-last < int64(redialInterval) || !d.lastRedial.CompareAndSwap(last, now) {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed.Load() {
		return
	}
	d.redials.Add(1)
	go func() {
		defer d.redials.Done()
		// On failure, a call after redialInterval tries again.
		_ = d.replace()
	}()
}

// replace builds a client as connect did and swaps it in when its server is
// a master.
func (d *dialed) replace() error {
	c, err := rueidis.NewClient(d.opt)
	if err != nil {
		return fmt.Errorf("redisstore: dial again after READONLY: %w", err)
	}
	ctx, cancel := context.WithTimeout(d.life, redialInterval)
	defer cancel()
	role, err := c.Do(ctx, c.B().Role().Build()).ToArray()
	if err == nil && len(role) > 0 {
		var r string
		if r, err = role[0].ToString(); err == nil && r != "master" {
			err = fmt.Errorf("the server is a %s", r)
		}
	}
	if err != nil || d.life.Err() != nil || !redialable(c.Mode()) {
		c.Close()
		if err == nil {
			err = ErrClosed // or, from a Cluster node, not this store's to follow
		}
		return fmt.Errorf("redisstore: dial again after READONLY: %w", err)
	}
	c = &boundedClient{Client: c, tries: &d.tries}
	if d.wrap != nil {
		c = d.wrap(c)
	}
	old := d.client.Swap(&rueidisClient{c})
	d.replica.Store(false)
	if old != nil {
		old.Close() // its calls in flight fail, as on a broken connection
	}
	return nil
}
