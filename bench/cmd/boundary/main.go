// Command boundary measures the boundary burst of each algorithm: with a
// limit of 100 per minute, the most requests a client gets admitted in any
// 60 s span (and in any 1 s span), on a simulated clock, for a client that
// sends steadily and for one that times bursts at the window boundaries. It
// asserts nothing; docs/design.md#algorithms explains the figures.
//
//	go run ./cmd/boundary
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"sort"
	"text/tabwriter"
	"time"

	"github.com/ratekit/ratekit/bench/internal/cliflags"
	ratelimit "github.com/ratekit/ratekit/core"
)

const (
	limit  = 100
	period = time.Minute
)

// strategy is a client: the times, from the start, at which it sends.
type strategy struct {
	name  string
	sends []time.Duration
}

func strategies() []strategy {
	var steady []time.Duration
	for t := time.Duration(0); t < 5*time.Minute; t += 10 * time.Millisecond {
		steady = append(steady, t)
	}
	// One request opens the windows at 0; then bursts of 3×limit just before
	// and just after the first boundary, and just before the second.
	boundary := []time.Duration{0}
	for _, at := range []time.Duration{period - time.Millisecond, period + time.Millisecond, 2*period - 2*time.Millisecond} {
		for range 3 * limit {
			boundary = append(boundary, at)
		}
	}
	both := append(append([]time.Duration(nil), steady...), boundary...)
	sort.Slice(both, func(i, j int) bool { return both[i] < both[j] })
	return []strategy{{"steady (every 10 ms)", steady}, {"boundary bursts", boundary}, {"steady + bursts", both}}
}

func main() {
	if code, ok := parseArgs(os.Args[1:], os.Stdout, os.Stderr); !ok {
		os.Exit(code)
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "algorithm (limit %d per %v)\tclient\tmost admitted in any 60 s\tin any 1 s\t\n", limit, period)
	for _, alg := range []ratelimit.Algorithm{ratelimit.FixedWindow, ratelimit.SlidingWindow, ratelimit.TokenBucket} {
		for _, st := range strategies() {
			admitted := run(alg, st.sends)
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t\n", alg, st.name, maxIn(admitted, period), maxIn(admitted, time.Second))
		}
	}
	tw.Flush()
}

// parseArgs checks the command line, which holds nothing but -h: it reports
// whether to run, and otherwise the exit status (cliflags.Parse).
func parseArgs(args []string, stdout, stderr io.Writer) (int, bool) {
	fs := flag.NewFlagSet("boundary", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: boundary\n\nPrints the most requests each algorithm admits in any 60 s and 1 s span\n"+
			"(limit %d per %v, on a simulated clock). It takes no arguments.\n", limit, period)
	}
	return cliflags.Parse(fs, args, stdout, stderr)
}

// run sends at the given times through a limiter of one rule counting with
// alg on a simulated clock, and returns the times of the admitted requests.
func run(alg ratelimit.Algorithm, sends []time.Duration) []time.Duration {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	now := start
	clock := func() time.Time { return now }
	l, err := ratelimit.New(ratelimit.Config{
		Name: "boundary", Store: ratelimit.MemoryConfig{Now: clock}.New(), Now: clock,
		Rules: []ratelimit.Rule{{Name: "per_client", Limit: limit, Period: period, Action: ratelimit.ActionLimit, Algorithm: alg}},
	})
	if err != nil {
		log.Fatal(err)
	}
	var admitted []time.Duration
	for _, at := range sends {
		now = start.Add(at)
		if r := l.Check(context.Background(), ratelimit.Identifier{}); r.Err != nil {
			log.Fatal(r.Err)
		} else if !r.Blocked() {
			admitted = append(admitted, at)
		}
	}
	return admitted
}

// maxIn returns the most of the sorted times within any span [t, t+d).
func maxIn(times []time.Duration, d time.Duration) int {
	best, j := 0, 0
	for i := range times {
		for times[i]-times[j] >= d {
			j++
		}
		best = max(best, i-j+1)
	}
	return best
}
