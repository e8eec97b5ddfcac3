// Command scriptcpu measures the Redis CPU that ratekit's check script costs
// per call, as Redis itself reports it (INFO commandstats, usec_per_call of
// EVALSHA), for the shapes of check that matter: one rule with a ban, five
// rules, and one rule of each algorithm, without a ban (the script's short
// forms) and with one (its general code). It resets the server's
// statistics, so point it at a Redis of its own:
//
//	go run ./cmd/scriptcpu -redis redis://127.0.0.1:6379 -n 20000
//
// With -store dial the checks go through a Store from redisstore.Dial,
// which sends a counter whose window it remembers as INCRBY alone inside the
// script (and a check of one rule without a ban as plain commands, no
// EVALSHA at all); the default, -store new, through redisstore.New on a
// go-redis client, which always sends the full forms.
//
// The figures are the server's CPU per call; the client and the network are
// not in them. They vary with the machine: compare shapes and versions of
// the script on one machine, not across machines.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekit/ratekit/bench/internal/cliflags"
	"github.com/ratekit/ratekit/bench/internal/redisinfo"
	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/redisstore"
)

// options are scriptcpu's flags.
type options struct {
	url, only, store string
	n, keys, rounds  int
}

// parseArgs reads the flags: it reports whether to run, and otherwise the
// exit status (cliflags.Parse: -h prints the help on stdout, a mistake is a
// usage error).
func parseArgs(args []string, stdout, stderr io.Writer) (*options, int, bool) {
	o := &options{}
	fs := flag.NewFlagSet("scriptcpu", flag.ContinueOnError)
	fs.StringVar(&o.url, "redis", "redis://127.0.0.1:6379", "Redis URL (its statistics are reset)")
	fs.IntVar(&o.n, "n", 20000, "checks per shape")
	fs.IntVar(&o.keys, "keys", 1000, "distinct identifiers the checks spread over")
	fs.StringVar(&o.only, "shapes", "", "measure only the shapes whose name contains this")
	fs.IntVar(&o.rounds, "rounds", 5, "rounds per shape; the least figure of each is reported (a busy machine only adds)")
	fs.StringVar(&o.store, "store", "new", "the Store: new (redisstore.New on go-redis) or dial (redisstore.Dial)")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: scriptcpu [flags]\n\nMeasures the Redis CPU of ratekit's check script per call, by shape of check.")
		fs.PrintDefaults()
	}
	code, ok := cliflags.Parse(fs, args, stdout, stderr)
	if ok && o.store != "new" && o.store != "dial" {
		fmt.Fprintf(stderr, "scriptcpu: -store %q: want new or dial\n", o.store)
		return o, 2, false
	}
	return o, code, ok
}

func main() {
	o, code, ok := parseArgs(os.Args[1:], os.Stdout, os.Stderr)
	if !ok {
		os.Exit(code)
	}
	url, n, keys, only, rounds := &o.url, &o.n, &o.keys, &o.only, &o.rounds
	opt, err := parseRedisURL(*url)
	if err != nil {
		log.Fatal(err)
	}
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	ctx := context.Background()
	var store ratelimit.Store = redisstore.New(rdb)
	if o.store == "dial" {
		d, err := redisstore.Dial(ctx, *url)
		if err != nil {
			log.Fatal(err)
		}
		defer d.Close()
		store = d
	}
	rule := func(name string, limit int64, f func(*ratelimit.Rule)) ratelimit.Rule {
		r := ratelimit.Rule{Name: name, Characteristics: []string{"user"}, Limit: limit, Period: time.Hour, Action: ratelimit.ActionLimit}
		if f != nil {
			f(&r)
		}
		return r
	}
	five := make([]ratelimit.Rule, 5)
	for i := range five {
		five[i] = rule(fmt.Sprintf("r%d", i), 1<<40, nil)
	}
	shapes := []struct {
		name  string
		rules []ratelimit.Rule
	}{
		{"1 rule with a ban", []ratelimit.Rule{rule("login", 1<<40, func(r *ratelimit.Rule) { r.BanFor = time.Hour })}},
		{"5 rules", five},
		{"1 rule", []ratelimit.Rule{rule("one", 1<<40, nil)}},
		{"1 sliding window", []ratelimit.Rule{rule("sliding", 1<<40, func(r *ratelimit.Rule) { r.Algorithm = ratelimit.SlidingWindow })}},
		{"1 token bucket", []ratelimit.Rule{rule("bucket", 1<<40, func(r *ratelimit.Rule) { r.Algorithm = ratelimit.TokenBucket })}},
		{"1 sliding window with a ban", []ratelimit.Rule{rule("sliding_ban", 1<<40, func(r *ratelimit.Rule) { r.Algorithm, r.BanFor = ratelimit.SlidingWindow, time.Hour })}},
		{"1 token bucket with a ban", []ratelimit.Rule{rule("bucket_ban", 1<<40, func(r *ratelimit.Rule) { r.Algorithm, r.BanFor = ratelimit.TokenBucket, time.Hour })}},
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "shape\tcalls\tµs per EVALSHA\tmain thread CPU µs per call\tcommands inside per call\t")
	for _, sh := range shapes {
		if !strings.Contains(sh.name, *only) {
			continue
		}
		best, bestCPU := -1.0, -1.0
		var calls, inner int64
		for range *rounds {
			c, u, cpu, in := measure(ctx, rdb, store, sh.rules, *n, *keys)
			if best < 0 || u < best {
				best = u
			}
			if bestCPU < 0 || cpu < bestCPU {
				bestCPU = cpu
			}
			calls, inner = c, in
		}
		fmt.Fprintf(tw, "%s\t%d\t%.2f\t%.2f\t%.1f\t\n", sh.name, calls, best, bestCPU, float64(inner)/float64(max(calls, 1)))
	}
	tw.Flush()
}

// measure runs n checks of rules over keys identifiers on a fresh key
// prefix and returns what INFO commandstats says of them, and the CPU time
// of Redis's main thread per check (the script and the request's I/O, which a
// busy machine inflates less than it does wall time); it deletes its keys
// afterwards.
func measure(ctx context.Context, rdb *redis.Client, store ratelimit.Store, rules []ratelimit.Rule, n, keys int) (calls int64, usec, cpu float64, inner int64) {
	prefix := fmt.Sprintf("scriptcpu:%d:", time.Now().UnixNano())
	l, err := ratelimit.New(ratelimit.Config{Name: "scriptcpu", Store: store, KeyPrefix: prefix, Rules: rules, Timeout: 5 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	ids := make([]ratelimit.Identifier, keys)
	for i := range ids {
		ids[i] = ratelimit.Identifier{"user": "u" + strconv.Itoa(i)}
	}
	l.Check(ctx, ids[0]) // loads the script
	if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
		log.Fatal(err)
	}
	cpu0 := mainThreadCPU(ctx, rdb)
	for i := range n {
		if r := l.Check(ctx, ids[i%len(ids)]); r.Err != nil {
			log.Fatal(r.Err)
		}
	}
	cpu = (mainThreadCPU(ctx, rdb) - cpu0) * 1e6 / float64(n)
	stats, err := rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		log.Fatal(err)
	}
	calls, usec, inner = commandStats(stats)
	var cursor uint64
	for {
		ks, next, err := rdb.Scan(ctx, cursor, prefix+"*", 1000).Result()
		if err != nil {
			log.Fatal(err)
		}
		if len(ks) > 0 {
			rdb.Del(ctx, ks...)
		}
		if cursor = next; cursor == 0 {
			break
		}
	}
	return calls, usec, cpu, inner
}

// mainThreadCPU returns the CPU seconds of Redis's main thread so far.
// parseRedisURL parses -redis. Its error does not quote the URL, as
// go-redis's (url.Parse's) does: it may hold a password.
func parseRedisURL(s string) (*redis.Options, error) {
	opt, err := redis.ParseURL(s)
	if err != nil {
		return nil, errors.New("-redis: not a valid Redis URL (the URL is not shown: it may hold a password)")
	}
	return opt, nil
}

func mainThreadCPU(ctx context.Context, rdb *redis.Client) float64 {
	cpu, err := redisinfo.MainThreadCPU(ctx, rdb)
	if err != nil {
		log.Fatal(err)
	}
	return cpu
}

// commandStats returns the calls and usec_per_call of EVALSHA, and how many
// other commands ran meanwhile (the calls the script made, the statistics
// commands of this program aside).
func commandStats(info string) (calls int64, usecPerCall float64, inner int64) {
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		var c int64
		var u float64
		for _, kv := range strings.Split(rest, ",") {
			k, v, _ := strings.Cut(kv, "=")
			switch k {
			case "calls":
				c, _ = strconv.ParseInt(v, 10, 64)
			case "usec_per_call":
				u, _ = strconv.ParseFloat(v, 64)
			}
		}
		switch name {
		case "cmdstat_evalsha":
			calls, usecPerCall = c, u
		case "cmdstat_config", "cmdstat_info":
		default:
			inner += c
		}
	}
	return calls, usecPerCall, inner
}
