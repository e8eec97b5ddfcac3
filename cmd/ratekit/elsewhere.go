package main

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	ratelimit "github.com/ratekit/ratekit/core"
)

// maxScanKeys bounds the keys one search for another prefix examines on each
// Redis node (SCAN, so Redis is never blocked): a large keyspace is searched
// partly, and the report says so.
const maxScanKeys = 100_000

// elsewhere is what a search for an identifier's keys under other prefixes
// found.
type elsewhere struct {
	prefixes  map[string]int // prefix -> keys found under it
	truncated bool           // a node held more than maxScanKeys keys
}

// findElsewhere looks for the keys of limiterKeys (all under prefix) under
// any other prefix. A counter key is the prefix then a hash tag naming the
// limiter, rule and identifier, so the same counter kept under another
// prefix ends with the same text; one SCAN per node, bounded by maxScanKeys.
func findElsewhere(ctx context.Context, client redis.UniversalClient, prefix, limiter string, limiterKeys []string, timeout time.Duration) (elsewhere, error) {
	found := elsewhere{prefixes: map[string]int{}}
	suffixes := map[string]bool{}
	for _, k := range limiterKeys {
		if s, ok := strings.CutPrefix(k, prefix); ok {
			suffixes[s] = true
		}
	}
	if len(suffixes) == 0 {
		return found, nil
	}
	// Limiter names are [a-z0-9_]: nothing to escape but the brace.
	pattern := `*\{` + limiter + `:*`
	// A key longer than the longest prefix a limiter takes before the
	// longest suffix is no counter of this identifier: left on the server.
	maxLen := 0
	for s := range suffixes {
		maxLen = max(maxLen, ratelimit.MaxKeyPrefixLen+len(s))
	}
	truncated, err := scanNodes(ctx, client, pattern, maxLen, timeout, func(keys []string) {
		for _, k := range keys {
			for s := range suffixes {
				if p, ok := strings.CutSuffix(k, s); ok && p != prefix {
					found.prefixes[p]++
				}
			}
		}
	})
	found.truncated = truncated
	if err != nil {
		return found, fmt.Errorf("search other prefixes: %w", err)
	}
	return found, nil
}

// scanNodes runs one SCAN of pattern on each node (every master of a
// Cluster), at most maxScanKeys keys a node, and hands each batch of keys of
// at most maxLen bytes to found, one call at a time. It reports whether a
// node held more keys than the bound let it examine.
func scanNodes(ctx context.Context, client redis.UniversalClient, pattern string, maxLen int, timeout time.Duration, found func(keys []string)) (bool, error) {
	var mu sync.Mutex
	truncated := false
	scan := func(ctx context.Context, node redis.Cmdable) error {
		var cursor uint64
		for scanned := 0; ; {
			sctx, cancel := context.WithTimeout(ctx, timeout)
			res, err := scanScript.Run(sctx, node, nil, cursor, pattern, 1000, maxLen).Slice()
			cancel()
			if err != nil {
				return err
			}
			keys, next, err := scanReply(res)
			if err != nil {
				return err
			}
			scanned += 1000
			mu.Lock()
			found(keys)
			mu.Unlock()
			if cursor = next; cursor == 0 {
				return nil
			}
			if scanned >= maxScanKeys {
				mu.Lock()
				truncated = true
				mu.Unlock()
				return nil
			}
		}
	}
	var err error
	if cc, ok := client.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error { return scan(ctx, node) })
	} else {
		err = scan(ctx, client)
	}
	return truncated, err
}

// scanScript is one SCAN that answers only the keys of at most ARGV[4]
// bytes: a key written by hand may be as long as Redis allows (512 MB),
// and a search for counters has no use for one longer than a counter.
var scanScript = redis.NewScript(`
local res = redis.call('SCAN', ARGV[1], 'MATCH', ARGV[2], 'COUNT', tonumber(ARGV[3]))
local keys, maxlen = {}, tonumber(ARGV[4])
for _, k in ipairs(res[2]) do
  if #k <= maxlen then keys[#keys + 1] = k end
end
return {res[1], keys}
`)

// scanReply reads scanScript's reply: the next cursor and the keys.
func scanReply(res []any) ([]string, uint64, error) {
	if len(res) != 2 {
		return nil, 0, fmt.Errorf("scan: unexpected reply %v", res)
	}
	c, _ := res[0].(string)
	next, err := strconv.ParseUint(c, 10, 64)
	if err != nil {
		return nil, 0, fmt.Errorf("scan: cursor %q: %w", c, err)
	}
	items, _ := res[1].([]any)
	keys := make([]string, 0, len(items))
	for _, k := range items {
		if s, ok := k.(string); ok {
			keys = append(keys, s)
		}
	}
	return keys, next, nil
}

// describe says where the keys were found and what to run instead.
func (e elsewhere) describe(service string) string {
	var b strings.Builder
	prefixes := slices.Sorted(maps.Keys(e.prefixes))
	for i, p := range prefixes {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%q (%s)", p, count(e.prefixes[p], "key"))
	}
	hint := "--key-prefix '" + prefixes[0] + "'"
	if name, ok := serviceOf(prefixes[0]); ok && name != service {
		hint = "--service " + name + " (or " + hint + ")"
	}
	return fmt.Sprintf("%s; rerun with %s", b.String(), hint)
}

// serviceOf returns the service whose counters live under prefix, as the
// copier template (and --service) names it: "ratekit:NAME:rl:".
func serviceOf(prefix string) (string, bool) {
	rest, ok := strings.CutPrefix(prefix, "ratekit:")
	if !ok {
		return "", false
	}
	name, ok := strings.CutSuffix(rest, ":rl:")
	if !ok || name == "" || strings.Contains(name, ":") {
		return "", false
	}
	return name, true
}
