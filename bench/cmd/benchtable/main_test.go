package main

import (
	"io"
	"strings"
	"testing"

	"github.com/ratekit/ratekit/bench/internal/cliflags/cliflagstest"
)

const sample = `goos: linux
BenchmarkCheck/redis_1limit/ratekit_1rule/c1-2   	 100	 10000 ns/op	 9000 checks/s	 1.000 rt/check	 1416 B/op	 30 allocs/op
BenchmarkCheck/redis_1limit/ratekit_1rule/c64-2  	 100	 10000 ns/op	 50000 checks/s	 1.000 rt/check	 1420 B/op	 30 allocs/op
BenchmarkCheck/redis_1limit/ratekit_1rule_conn/c1-2   	 100	 10000 ns/op	 15000 checks/s	 1.000 rt/check	 600 B/op	 7 allocs/op
BenchmarkCheck/redis_1limit/ratekit_1rule_conn/c64-2  	 100	 10000 ns/op	 125000 checks/s	 2.5 redis-us/check	 0.2 rt/check	 600 B/op	 7 allocs/op
BenchmarkCheck/redis_1limit/ratekit_1rule_sliding_conn/c1-2   	 100	 10000 ns/op	 3000 checks/s	 1.000 rt/check	 700 B/op	 8 allocs/op
BenchmarkCheck/redis_1limit/ulule/c1-2           	 100	 10000 ns/op	 12000 checks/s	 1.000 rt/check	 543 B/op	 17 allocs/op
BenchmarkCheck/redis_1limit/ulule/c64-2          	 100	 10000 ns/op	 25000 checks/s	 1.000 rt/check	 543 B/op	 17 allocs/op
BenchmarkCheck/redis_1limit/redis_rate/c1-2      	 100	 10000 ns/op	 10000 checks/s	 1.000 rt/check	 768 B/op	 23 allocs/op
BenchmarkCheck/redis_1limit/redis_rate/c64-2     	 100	 10000 ns/op	 20000 checks/s	 1.000 rt/check	 768 B/op	 23 allocs/op
BenchmarkCheck/memory_1limit/ratekit_memory/c1-2 	 100	 1000 ns/op	 1000000 checks/s	 0 rt/check	 408 B/op	 6 allocs/op
PASS
`

func TestTable(t *testing.T) {
	runs, err := parse(strings.NewReader(sample))
	if err != nil {
		t.Fatal(err)
	}
	got := table(summarize(runs))
	for _, want := range []string{
		// 9,000 / 12,000 and 50,000 / 25,000: ulule is the best peer at both.
		"| redis_1limit | **ratekit_1rule** | 9,000 | 50,000 | 0.75× | 2.00× | — | 1 / 1 | — / — | 1416 / 1420 | 30 / 30 |",
		// The Dial row against its go-redis row: 15,000 / 9,000 and 125,000 / 50,000.
		"| redis_1limit | **ratekit_1rule_conn** | 15,000 | 125,000 | 1.25× | 5.00× | 1.67× / 2.50× | 1 / 0.2 | — / 2.5 | 600 / 600 | 7 / 7 |",
		// A Dial row without a go-redis row of its name.
		"| redis_1limit | **ratekit_1rule_sliding_conn** | 3,000 | — | 0.25× | — | — | 1 / — |",
		"| redis_1limit | ulule | 12,000 | 25,000 | 1.00× | 1.00× | — |",
		"| redis_1limit | redis_rate | 10,000 | 20,000 | 0.83× | 0.80× | — |",
		// No peer in the group, no c64 run: no ratio, no figure.
		"| memory_1limit | **ratekit_memory** | 1,000,000 | — | — | — | — | 0 / — | — / — | 408 / — | 6 / — |",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("table lacks %q:\n%s", want, got)
		}
	}
	if n := strings.Count(got, "\n"); n != 2+6 {
		t.Errorf("table has %d lines, want a header, a rule and 6 rows:\n%s", n, got)
	}
}

// TestRounds: of several rounds, the run of median checks/s stands for the
// benchmark with its own other figures, and the ratio is the median of the
// rounds' ratios (here 0.5 in every round, although the medians of checks/s
// alone would give 200/300). So is the Dial row's ratio to its go-redis row:
// 2, 3 and 1.25 in the rounds, median 2 (the medians alone: 300/200).
func TestRounds(t *testing.T) {
	in := `BenchmarkCheck/g/ratekit/c1-2 1 1 ns/op 300 checks/s 10 allocs/op
BenchmarkCheck/g/ratekit_conn/c1-2 1 1 ns/op 600 checks/s 5 allocs/op
BenchmarkCheck/g/peer/c1-2 1 1 ns/op 600 checks/s 1 allocs/op
BenchmarkCheck/g/ratekit/c1-2 1 1 ns/op 100 checks/s 11 allocs/op
BenchmarkCheck/g/ratekit_conn/c1-2 1 1 ns/op 300 checks/s 5 allocs/op
BenchmarkCheck/g/peer/c1-2 1 1 ns/op 200 checks/s 1 allocs/op
BenchmarkCheck/g/ratekit/c1-2 1 1 ns/op 200 checks/s 12 allocs/op
BenchmarkCheck/g/ratekit_conn/c1-2 1 1 ns/op 250 checks/s 5 allocs/op
BenchmarkCheck/g/peer/c1-2 1 1 ns/op 400 checks/s 1 allocs/op
`
	runs, err := parse(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	sum := summarize(runs)
	if len(sum) != 3 {
		t.Fatalf("%d benchmarks, want 3", len(sum))
	}
	r := sum[0]
	if r.metrics["checks/s"] != 200 || r.metrics["allocs/op"] != 12 || r.rounds != 3 || r.metrics["ratio"] != 0.5 {
		t.Fatalf("ratekit %+v, want the 200 checks/s round (12 allocs) of 3, ratio 0.5", r)
	}
	if _, ok := r.metrics["path"]; ok {
		t.Fatalf("ratekit %+v has a go-redis path ratio, want none: it is the go-redis row", r)
	}
	if p := sum[1].metrics["path"]; p != 2 {
		t.Fatalf("ratekit_conn %+v, want go-redis path ratio 2", sum[1])
	}
	if sum[2].metrics["ratio"] != 1 {
		t.Fatalf("peer %+v, want ratio 1", sum[2])
	}
}

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct{ name, in, want string }{
		{"empty", "PASS\n", "no BenchmarkCheck results"},
		{"flat name", "BenchmarkCheck/ratekit/c1-2 1 1 ns/op\n", "want BenchmarkCheck/<group>/<contender>/<callers>"},
		{"bad value", "BenchmarkCheck/g/ratekit/c1-2 1 x ns/op\n", "ns/op"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parse(strings.NewReader(tc.in))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("parse error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// The command parses its flags with cliflags.Parse, under its own name.
func TestParseArgs(t *testing.T) {
	cliflagstest.CheckCommand(t, "benchtable", func(args []string, stdout, stderr io.Writer) (int, bool) {
		_, code, ok := parseArgs(args, stdout, stderr)
		return code, ok
	})
}
