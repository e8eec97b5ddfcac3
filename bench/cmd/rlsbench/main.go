// Command rlsbench compares ratekit-envoy with envoyproxy/ratelimit, Envoy's
// reference RateLimitService, side by side on one fresh redis-server with
// equivalent limits. It builds envoyproxy/ratelimit from the Go module proxy
// (src/service_cmd, CGO_ENABLED=0, in a temporary directory: the peer never
// enters a go.mod of this repository) and ratekit-envoy from this checkout,
// drives each with the same go-control-plane RLS client over 4 gRPC
// connections at each number of callers, with 1 and with 5 descriptors per
// request, checks that every answer is OK with a current_limit for every
// descriptor, and prints a Markdown table: requests/s of both, their ratio,
// each server's CPU µs per request (its process's user and system time over
// the run, from /proc, divided by the requests) and Redis µs per request
// (the usec of INFO commandstats over the run, divided by the requests).
//
//	make bench-rls                                 # writes bench/rls.md and its section of bench/README.md
//	cd bench && go run ./cmd/rlsbench -duration 5s -callers 1,64,256
//
// Each server runs alone during its rows: it is started before them and
// stopped after, so the other's background work never counts.
package main

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	rlcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/ratekit/ratekit/bench/internal/numfmt"
	"github.com/ratekit/ratekit/bench/internal/redisinfo"
)

// PeerModule is the envoyproxy/ratelimit version compared against.
const PeerModule = "github.com/envoyproxy/ratelimit@v1.4.1-0.20260122083618-3fb702589d36"

// limitPerMinute is high enough that no run reaches it: every answer must
// be OK, so both servers do the same work on every request.
const limitPerMinute = 1_000_000_000

// The Redis client settings of envoyproxy/ratelimit: its defaults, set
// explicitly so that the section says what was measured. ratekit-envoy
// writes the commands of concurrent requests together (redisstore.Dial's
// rueidis client); this peer flushes each write at once unless
// REDIS_PIPELINE_WINDOW is set (-peer-pipeline-window), which its README
// suggests for throughput.
const peerPoolSize = 10

func main() {
	err := run(context.Background(), os.Args[1:], os.Stdout, os.Stderr)
	if err != nil && !errors.Is(err, flag.ErrHelp) { // -h: the flags are printed
		fmt.Fprintln(os.Stderr, "rlsbench:", err)
	}
	os.Exit(exitCode(err))
}

// errUsage marks a mistake on the command line.
var errUsage = errors.New("usage")

// exitCode is 0 for success and -h, 2 for a usage error, 1 for a failure.
func exitCode(err error) int {
	switch {
	case err == nil || errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errUsage):
		return 2
	}
	return 1
}

type options struct {
	duration, warmup time.Duration
	callers, descs   []int
	conns, rounds    int
	root, redisBin   string
	out, readme      string
	note             string
	// Prebuilt servers (a machine without a Go toolchain), or where -build
	// puts them; CPU lists that pin Redis and the server under test.
	peerBin, ratekitBin   string
	build                 string
	redisCPUs, serverCPUs string
	// The peer's REDIS_PIPELINE_WINDOW, as its environment takes it.
	peerWindow string
}

func parseFlags(args []string, stderr io.Writer) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("rlsbench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.DurationVar(&o.duration, "duration", 5*time.Second, "measured time of each row and server")
	fs.DurationVar(&o.warmup, "warmup", time.Second, "unmeasured load before each measurement")
	callers := fs.String("callers", "1,64,256", "concurrent callers, comma-separated")
	descs := fs.String("descriptors", "1,5", "descriptors per request, comma-separated")
	fs.IntVar(&o.conns, "conns", 4, "gRPC connections the callers share")
	fs.IntVar(&o.rounds, "rounds", 2, "rounds of every row and server, alternating the servers; the table has each row's median")
	fs.StringVar(&o.root, "root", "", "the ratekit checkout (default: the directory above the working one that holds go.work)")
	fs.StringVar(&o.redisBin, "redis-server", "redis-server", "the redis-server binary")
	fs.StringVar(&o.out, "out", "", "also write the results as a Markdown section to this file")
	fs.StringVar(&o.readme, "readme", "", "replace the section of this README (from its heading on) with the results")
	fs.StringVar(&o.note, "note", "", "a line about the machine, printed above the table")
	fs.StringVar(&o.peerBin, "peer-bin", "", "a prebuilt envoyproxy/ratelimit server (default: build it)")
	fs.StringVar(&o.ratekitBin, "ratekit-bin", "", "a prebuilt ratekit-envoy (default: build it from the checkout)")
	fs.StringVar(&o.build, "build", "", "only build both servers into this directory (as envoy-ratelimit and ratekit-envoy) and exit")
	fs.StringVar(&o.redisCPUs, "redis-cpus", "", "pin redis-server to these CPUs (a taskset list such as 0)")
	fs.StringVar(&o.serverCPUs, "server-cpus", "", "pin each server under test to these CPUs (a taskset list such as 1-6)")
	fs.StringVar(&o.peerWindow, "peer-pipeline-window", "0", "envoyproxy/ratelimit's REDIS_PIPELINE_WINDOW (a Go duration such as 150us; 0: each write flushed at once, its default)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, err
		}
		return nil, fmt.Errorf("%w: %w", errUsage, err)
	}
	var err error
	if o.callers, err = ints(*callers); err != nil {
		return nil, fmt.Errorf("%w: -callers: %w", errUsage, err)
	}
	if o.descs, err = ints(*descs); err != nil {
		return nil, fmt.Errorf("%w: -descriptors: %w", errUsage, err)
	}
	if w, err := time.ParseDuration(o.peerWindow); err != nil || w < 0 {
		return nil, fmt.Errorf("%w: -peer-pipeline-window %q is not a duration of 0 or more", errUsage, o.peerWindow)
	}
	if o.conns < 1 || o.rounds < 1 || o.duration <= 0 || o.warmup < 0 {
		return nil, fmt.Errorf("%w: -conns, -rounds and -duration must be positive, -warmup 0 or more", errUsage)
	}
	if o.root == "" && (o.build != "" || o.ratekitBin == "") {
		if o.root, err = findRoot(); err != nil {
			return nil, err
		}
	}
	return o, nil
}

func ints(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || n > 4096 {
			return nil, fmt.Errorf("%q is not a count between 1 and 4096", f)
		}
		out = append(out, n)
	}
	return out, nil
}

func findRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.work")); err == nil {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("no go.work above %s: pass -root", dir)
		}
	}
}

// row is one line of the table: each server's measures, one per round.
type row struct {
	descs, callers int
	peer, ratekit  []measure
}

// measure is one server's run of a row.
type measure struct {
	requests  int64
	elapsed   time.Duration
	redisUS   float64       // Redis CPU µs over the run
	serverCPU time.Duration // the server process's CPU time over the run; -1: unknown
}

func (m measure) perSecond() float64 { return float64(m.requests) / m.elapsed.Seconds() }

func (m measure) redisPerRequest() float64 { return m.redisUS / float64(m.requests) }

// serverPerRequest is the server's CPU µs per request, or -1 when unknown.
func (m measure) serverPerRequest() float64 {
	if m.serverCPU < 0 {
		return -1
	}
	return float64(m.serverCPU.Microseconds()) / float64(m.requests)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "rlsbench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	logf := func(format string, a ...any) { fmt.Fprintf(stderr, "rlsbench: "+format+"\n", a...) }

	if o.build != "" {
		logf("building envoyproxy/ratelimit (%s) and ratekit-envoy into %s", PeerModule, o.build)
		_, _, err := buildServers(ctx, o, o.build)
		return err
	}
	peerBin, ratekitBin, err := buildServers(ctx, o, dir)
	if err != nil {
		return err
	}
	configs, err := writeConfigs(dir)
	if err != nil {
		return err
	}

	redisAddr, stopRedis, err := startRedis(ctx, pinned(o.redisCPUs, o.redisBin), dir)
	if err != nil {
		return err
	}
	defer stopRedis()
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer rdb.Close()
	version, _ := redisVersion(ctx, rdb)

	servers := []struct {
		name  string
		start func(ctx context.Context, logs io.Writer) (server, error)
		into  func(*row) *[]measure
	}{
		{"envoyproxy/ratelimit", func(ctx context.Context, logs io.Writer) (server, error) {
			return startPeer(ctx, pinned(o.serverCPUs, peerBin), configs, redisAddr, o.peerWindow, logs)
		}, func(r *row) *[]measure { return &r.peer }},
		{"ratekit-envoy", func(ctx context.Context, logs io.Writer) (server, error) {
			return startRatekit(ctx, pinned(o.serverCPUs, ratekitBin), configs, redisAddr, logs)
		}, func(r *row) *[]measure { return &r.ratekit }},
	}
	var rows []row
	for _, d := range o.descs {
		for _, c := range o.callers {
			rows = append(rows, row{descs: d, callers: c})
		}
	}
	for round := 1; round <= o.rounds; round++ {
		for _, srv := range servers {
			var logs bytes.Buffer
			sv, err := srv.start(ctx, &logs)
			if err != nil {
				return fmt.Errorf("%s: %w\n%s", srv.name, err, logs.String())
			}
			for i := range rows {
				r := &rows[i]
				logf("round %d of %d, %s: %d descriptor(s), %d caller(s)", round, o.rounds, srv.name, r.descs, r.callers)
				m, err := drive(ctx, sv, rdb, o, r.descs, r.callers)
				if err != nil {
					sv.stop()
					return fmt.Errorf("%s, %d descriptors, %d callers: %w\n%s", srv.name, r.descs, r.callers, err, logs.String())
				}
				ms := srv.into(r)
				*ms = append(*ms, m)
			}
			sv.stop()
		}
	}

	var b strings.Builder
	section(&b, o, rows, version)
	fmt.Fprint(stdout, b.String())
	if o.out != "" {
		if err := os.WriteFile(o.out, []byte(b.String()), 0o644); err != nil {
			return err
		}
	}
	if o.readme != "" {
		return spliceReadme(o.readme, b.String())
	}
	return nil
}

// sectionHeading starts the section rlsbench owns in the README.
const sectionHeading = "## Envoy RateLimitService: ratekit-envoy vs envoyproxy/ratelimit"

func section(b *strings.Builder, o *options, rows []row, redisVersion string) {
	fmt.Fprintf(b, "%s\n\n", sectionHeading)
	fmt.Fprintf(b, `<!-- Generated by bench/cmd/rlsbench (make bench-rls): do not edit by hand. -->

`+"`make bench-rls`"+` (`+"`cd bench && go run ./cmd/rlsbench -out rls.md -readme README.md`"+`; RLS_FLAGS
passes flags such as `+"`-duration 5s`"+`) builds envoyproxy/ratelimit
(`+"`%s`"+`, `+"`src/service_cmd`"+`,
`+"`CGO_ENABLED=0`"+`, in a temporary directory: it never enters a go.mod of this repository) and
`+"`envoy/cmd/ratekit-envoy`"+` from this checkout, and runs each alone on one fresh redis-server with the
same limit (descriptor key `+"`remote_address`"+`, %d per minute, so that every answer is OK)
and the same Redis timeout (10 s, envoyproxy/ratelimit's default). Otherwise each runs on its own
Redis defaults: envoyproxy/ratelimit on a pool of %d connections (`+"`REDIS_POOL_SIZE`"+`) that flushes
each write at once (`+"`REDIS_PIPELINE_WINDOW`"+` %s; its README suggests 150 to 500 µs for throughput),
ratekit-envoy on `+"`redisstore.Dial`"+`'s rueidis client, which writes the commands of concurrent
requests together. The load generator is
go-control-plane's RLS client over %d gRPC connections; each caller sends its own descriptors on
every request. Every answer is checked (OK, with a `+"`current_limit`"+` for every descriptor); one
that is not fails the run. Server CPU µs per request is the server process's user and system
time over the measured time (`+"`/proc/PID/stat`"+`) divided by the requests: what a server costs
where it has cores of its own, which this table's shared machine hides (the load generator's
gRPC client, on the same cores, costs about as much per request as either server). Redis µs
per request is the `+"`usec`"+` of `+"`INFO commandstats`"+` over the measured time divided by the
requests.

`, PeerModule, limitPerMinute, peerPoolSize, o.peerWindow, o.conns)
	note := o.note
	if note == "" {
		note = fmt.Sprintf("%d CPUs (%s/%s)", runtime.NumCPU(), runtime.GOOS, runtime.GOARCH)
	}
	fmt.Fprintf(b, "ratekit-envoy counts on `redisstore.Dial`'s store and checks a request's descriptors with\n")
	fmt.Fprintf(b, "`ratelimit.CheckBatch`: one round trip per request, here INCRBY per descriptor once the store\n")
	fmt.Fprintf(b, "remembers when the counter's window ends, INCRBY, PEXPIRE NX and PTTL until then (the plain form;\n")
	fmt.Fprintf(b, "a request whose rules need the script sends one script call per descriptor instead).\n\n")
	fmt.Fprintf(b, "Run on %s: %s; %s; each row %v after a %v warm-up, %d round(s) alternating the\n", time.Now().UTC().Format("2006-01-02"), note, redisVersion, o.duration, o.warmup, o.rounds)
	fmt.Fprintf(b, "servers (each figure is from the server's median round); servers, Redis and load generator on one machine.\n\n")
	fmt.Fprintf(b, "| descriptors per request | callers | envoyproxy/ratelimit | ratekit-envoy | ratio | server CPU µs per request (envoy / ratekit) | envoy's CPU ÷ ratekit's | Redis µs per request (envoy / ratekit) |\n")
	fmt.Fprintf(b, "|---|--:|--:|--:|--:|---|--:|---|\n")
	for _, r := range rows {
		peer, ratekit := median(r.peer), median(r.ratekit)
		cpu, cpuRatio := "— / —", "—"
		if p, k := peer.serverPerRequest(), ratekit.serverPerRequest(); p > 0 && k > 0 {
			cpu, cpuRatio = fmt.Sprintf("%.1f / %.1f", p, k), fmt.Sprintf("%.2f×", p/k)
		}
		fmt.Fprintf(b, "| %d | %d | %s/s | %s/s | %.2f× | %s | %s | %.1f / %.1f |\n", r.descs, r.callers,
			numfmt.Thousands(peer.perSecond()), numfmt.Thousands(ratekit.perSecond()), ratekit.perSecond()/peer.perSecond(),
			cpu, cpuRatio, peer.redisPerRequest(), ratekit.redisPerRequest())
	}
	if lines := descriptorCosts(rows); len(lines) > 0 {
		fmt.Fprintf(b, "\nWhat a request of several descriptors costs against one descriptor's, same callers: time per\n")
		fmt.Fprintf(b, "request (the inverse of requests/s) and server CPU per request.\n\n")
		fmt.Fprintf(b, "| descriptors | callers | envoyproxy/ratelimit: time / CPU | ratekit-envoy: time / CPU |\n")
		fmt.Fprintf(b, "|---|--:|--:|--:|\n")
		for _, l := range lines {
			fmt.Fprintln(b, l)
		}
	}
	fmt.Fprintf(b, "\nCompare the ratios of one run. Absolute figures mean something only from a quiet many-core machine\n")
	fmt.Fprintf(b, "with Redis, each server and the load generator on cores of their own.\n")
}

// descriptorCosts returns a table line for each row of more than one
// descriptor whose callers also have a row of one: each server's time and
// server CPU per request over the one-descriptor row's ("—" for CPU where
// unknown).
func descriptorCosts(rows []row) []string {
	var lines []string
	for _, r := range rows {
		if r.descs == 1 {
			continue
		}
		i := slices.IndexFunc(rows, func(o row) bool { return o.descs == 1 && o.callers == r.callers })
		if i < 0 {
			continue
		}
		one := rows[i]
		cost := func(many, one []measure) string {
			m, o := median(many), median(one)
			c := "—"
			if mc, oc := m.serverPerRequest(), o.serverPerRequest(); mc > 0 && oc > 0 {
				c = fmt.Sprintf("%.2f×", mc/oc)
			}
			return fmt.Sprintf("%.2f× / %s", o.perSecond()/m.perSecond(), c)
		}
		lines = append(lines, fmt.Sprintf("| %d ÷ 1 | %d | %s | %s |", r.descs, r.callers, cost(r.peer, one.peer), cost(r.ratekit, one.ratekit)))
	}
	return lines
}

// median returns the measure of median requests/s (the lower middle one of
// an even count).
func median(ms []measure) measure {
	sorted := slices.SortedFunc(slices.Values(ms), func(a, b measure) int { return cmp.Compare(a.perSecond(), b.perSecond()) })
	return sorted[(len(sorted)-1)/2]
}

// spliceReadme replaces the README's section (from its heading to the end)
// with sec, or appends sec when the README has none.
func spliceReadme(path, sec string) error {
	old, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	text := string(old)
	if i := strings.Index(text, sectionHeading); i >= 0 {
		text = text[:i]
	} else {
		text = strings.TrimRight(text, "\n") + "\n\n"
	}
	return os.WriteFile(path, []byte(text+sec), 0o644)
}

// buildServers builds into dir the servers that o does not name prebuilt,
// and returns both servers' paths.
func buildServers(ctx context.Context, o *options, dir string) (peer, ratekit string, err error) {
	peer, ratekit = o.peerBin, o.ratekitBin
	if peer == "" {
		if peer, err = buildPeer(ctx, dir); err != nil {
			return "", "", err
		}
	}
	if ratekit == "" {
		ratekit = filepath.Join(dir, "ratekit-envoy")
		if err := goBuild(ctx, filepath.Join(o.root, "envoy"), []string{"CGO_ENABLED=0"}, ratekit, "./cmd/ratekit-envoy"); err != nil {
			return "", "", err
		}
	}
	return peer, ratekit, nil
}

// buildPeer builds envoyproxy/ratelimit's server from the module proxy into
// dir: the module is downloaded into the module cache and built there, in
// its own module, outside every workspace.
func buildPeer(ctx context.Context, dir string) (string, error) {
	cmd := exec.CommandContext(ctx, "go", "mod", "download", "-json", PeerModule)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go mod download %s: %w", PeerModule, err)
	}
	var modDir string
	for _, line := range strings.Split(string(out), "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok && k == `"Dir"` {
			modDir, err = strconv.Unquote(strings.TrimSuffix(strings.TrimSpace(v), ","))
			if err != nil {
				return "", fmt.Errorf("go mod download: Dir %s: %w", v, err)
			}
		}
	}
	if modDir == "" {
		return "", fmt.Errorf("go mod download %s: no Dir in %s", PeerModule, out)
	}
	bin := filepath.Join(dir, "envoy-ratelimit")
	return bin, goBuild(ctx, modDir, []string{"GOWORK=off", "GOFLAGS=-mod=mod", "CGO_ENABLED=0"}, bin, "./src/service_cmd")
}

func goBuild(ctx context.Context, dir string, env []string, out, pkg string) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags=-s -w", "-o", out, pkg)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s in %s: %w\n%s", pkg, dir, err, b)
	}
	return nil
}

// configs are the files of the equivalent limits.
type configs struct {
	runtimeRoot string // envoyproxy/ratelimit: <root>/ratelimit/config/edge.yaml
	available   string // ratekit: available_limiters.yaml
}

func writeConfigs(dir string) (configs, error) {
	c := configs{runtimeRoot: filepath.Join(dir, "runtime"), available: filepath.Join(dir, "available_limiters.yaml")}
	peer := fmt.Sprintf(`domain: edge
descriptors:
  - key: remote_address
    rate_limit:
      unit: minute
      requests_per_unit: %d
`, limitPerMinute)
	ratekit := fmt.Sprintf(`available_limiters:
  edge:
    description: "rlsbench: one limit per remote_address"
    available_properties: [remote_address]
    default_rules:
      - name: per_ip
        characteristics: [remote_address]
        limit: %d
        period_s: 60
        action: limit
`, limitPerMinute)
	cfgDir := filepath.Join(c.runtimeRoot, "ratelimit", "config")
	if err := os.MkdirAll(cfgDir, 0o755); err != nil {
		return c, err
	}
	if err := os.WriteFile(filepath.Join(cfgDir, "edge.yaml"), []byte(peer), 0o644); err != nil {
		return c, err
	}
	return c, os.WriteFile(c.available, []byte(ratekit), 0o644)
}

// freePort returns a loopback port nothing listens on now.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// start runs cmd until stop, which ends it and waits for it.
func start(cmd *exec.Cmd) (func(), error) {
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	return func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	}, nil
}

// pinned is a command line that runs bin on cpus (taskset execs bin, so the
// process ID read for its CPU time stays bin's), or bin alone when cpus is "".
func pinned(cpus, bin string) []string {
	if cpus == "" {
		return []string{bin}
	}
	return []string{"taskset", "-c", cpus, bin}
}

func startRedis(ctx context.Context, bin []string, dir string) (string, func(), error) {
	port, err := freePort()
	if err != nil {
		return "", nil, err
	}
	cmd := exec.CommandContext(ctx, bin[0], append(bin[1:], "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir)...)
	stop, err := start(cmd)
	if err != nil {
		return "", nil, fmt.Errorf("redis-server: %w", err)
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	deadline := time.Now().Add(30 * time.Second)
	for rdb.Ping(ctx).Err() != nil {
		if time.Now().After(deadline) {
			stop()
			return "", nil, errors.New("redis-server did not answer within 30s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	return addr, stop, nil
}

// server is a started RLS server: its gRPC address, how to stop it and its
// process ID.
type server struct {
	addr string
	stop func()
	pid  int
}

func startPeer(ctx context.Context, bin []string, c configs, redisAddr, window string, logs io.Writer) (server, error) {
	var ports [3]int
	for i := range ports {
		p, err := freePort()
		if err != nil {
			return server{}, err
		}
		ports[i] = p
	}
	cmd := exec.CommandContext(ctx, bin[0], bin[1:]...)
	cmd.Env = append(os.Environ(), peerEnv(c, redisAddr, window, ports)...)
	cmd.Stdout, cmd.Stderr = logs, logs
	stop, err := start(cmd)
	if err != nil {
		return server{}, err
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[1]))
	if err := awaitReady(ctx, addr); err != nil {
		stop()
		return server{}, err
	}
	return server{addr, stop, cmd.Process.Pid}, nil
}

// peerEnv is envoyproxy/ratelimit's configuration.
func peerEnv(c configs, redisAddr, window string, ports [3]int) []string {
	return []string{
		"USE_STATSD=false", "LOG_LEVEL=warn",
		"RUNTIME_ROOT=" + c.runtimeRoot, "RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_WATCH_ROOT=false",
		"REDIS_SOCKET_TYPE=tcp", "REDIS_URL=" + redisAddr,
		"REDIS_POOL_SIZE=" + strconv.Itoa(peerPoolSize), "REDIS_PIPELINE_WINDOW=" + window,
		"HOST=127.0.0.1", "GRPC_HOST=127.0.0.1", "DEBUG_HOST=127.0.0.1",
		"PORT=" + strconv.Itoa(ports[0]), "GRPC_PORT=" + strconv.Itoa(ports[1]), "DEBUG_PORT=" + strconv.Itoa(ports[2]),
	}
}

func startRatekit(ctx context.Context, bin []string, c configs, redisAddr string, logs io.Writer) (server, error) {
	port, err := freePort()
	if err != nil {
		return server{}, err
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	// The store timeout of envoyproxy/ratelimit's default (REDIS_TIMEOUT):
	// with ratekit's own 100ms default a loaded machine fails checks open.
	cmd := exec.CommandContext(ctx, bin[0], append(bin[1:], "-available", c.available, "-redis-url", "redis://"+redisAddr, "-listen", addr, "-http", "", "-timeout", "10s")...)
	cmd.Stdout, cmd.Stderr = logs, logs
	stop, err := start(cmd)
	if err != nil {
		return server{}, err
	}
	if err := awaitReady(ctx, addr); err != nil {
		stop()
		return server{}, err
	}
	return server{addr, stop, cmd.Process.Pid}, nil
}

// awaitReady polls addr with a request until it is answered well.
func awaitReady(ctx context.Context, addr string) error {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	client := rlsv3.NewRateLimitServiceClient(conn)
	req := request(0, 1)
	deadline := time.Now().Add(60 * time.Second)
	for {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		resp, err := client.ShouldRateLimit(cctx, req)
		cancel()
		if err == nil {
			return verify(resp, 1)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready within 60s: %w", addr, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// request is caller's request with n descriptors: each caller its own
// remote addresses, the same on every request (one counter per descriptor).
func request(caller, n int) *rlsv3.RateLimitRequest {
	req := &rlsv3.RateLimitRequest{Domain: "edge"}
	for j := range n {
		ip := fmt.Sprintf("10.%d.%d.%d", caller/256, caller%256, j)
		req.Descriptors = append(req.Descriptors, &rlcommonv3.RateLimitDescriptor{
			Entries: []*rlcommonv3.RateLimitDescriptor_Entry{{Key: "remote_address", Value: ip}},
		})
	}
	return req
}

// verify checks that an answer is OK with a current_limit for each of its n
// descriptors.
func verify(resp *rlsv3.RateLimitResponse, n int) error {
	if resp.GetOverallCode() != rlsv3.RateLimitResponse_OK || len(resp.GetStatuses()) != n {
		return fmt.Errorf("answer %v with %d statuses for %d descriptors", resp.GetOverallCode(), len(resp.GetStatuses()), n)
	}
	for i, st := range resp.GetStatuses() {
		if st.GetCode() != rlsv3.RateLimitResponse_OK || st.GetCurrentLimit().GetRequestsPerUnit() != limitPerMinute {
			return fmt.Errorf("descriptor #%d: %v, current_limit %v", i, st.GetCode(), st.GetCurrentLimit())
		}
	}
	return nil
}

// drive runs callers against sv over o.conns connections: a warm-up, then
// o.duration measured, reading Redis' commandstats and the server's CPU
// time before and after.
func drive(ctx context.Context, sv server, rdb *redis.Client, o *options, descs, callers int) (measure, error) {
	conns := make([]rlsv3.RateLimitServiceClient, o.conns)
	for i := range conns {
		conn, err := grpc.NewClient(sv.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return measure{}, err
		}
		defer conn.Close()
		conns[i] = rlsv3.NewRateLimitServiceClient(conn)
	}
	var (
		measuring atomic.Bool
		stop      atomic.Bool
		requests  atomic.Int64
		firstErr  error
		errOnce   sync.Once
		wg        sync.WaitGroup
	)
	fail := func(err error) { errOnce.Do(func() { firstErr = err; stop.Store(true) }) }
	for c := range callers {
		client, req := conns[c%len(conns)], request(c, descs)
		wg.Go(func() {
			for !stop.Load() {
				cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				resp, err := client.ShouldRateLimit(cctx, req)
				cancel()
				if err == nil {
					err = verify(resp, descs)
				}
				if err != nil {
					fail(err)
					return
				}
				if measuring.Load() {
					requests.Add(1)
				}
			}
		})
	}
	time.Sleep(o.warmup)
	before, err := redisinfo.CommandUsec(ctx, rdb)
	if err != nil {
		fail(err)
	}
	cpuBefore, cpuErr := processCPU(sv.pid)
	start := time.Now()
	measuring.Store(true)
	time.Sleep(o.duration)
	measuring.Store(false)
	elapsed := time.Since(start)
	cpuAfter, err := processCPU(sv.pid)
	if cpuErr == nil {
		cpuErr = err
	}
	after, err := redisinfo.CommandUsec(ctx, rdb)
	if err != nil {
		fail(err)
	}
	stop.Store(true)
	wg.Wait()
	if firstErr != nil {
		return measure{}, firstErr
	}
	n := requests.Load()
	if n == 0 {
		return measure{}, errors.New("no request was answered in the measured time")
	}
	cpu := cpuAfter - cpuBefore
	if cpuErr != nil {
		cpu = -1 // not Linux: the column says so
	}
	// The usec of the INFO call itself is in after: negligible against a run.
	return measure{requests: n, elapsed: elapsed, redisUS: after - before, serverCPU: cpu}, nil
}

// processCPU returns the user and system CPU time of process pid so far,
// all its threads, from /proc/PID/stat (Linux).
func processCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	return parseStatCPU(string(b))
}

// clockTicks is the unit of /proc's CPU times: USER_HZ, 100 on Linux.
const clockTicks = 100

// parseStatCPU returns utime + stime of a /proc/PID/stat line. The command
// name, in parentheses, may hold spaces and parentheses itself, so the
// fields are counted from the last ')': state is field 3, utime 14, stime 15.
func parseStatCPU(stat string) (time.Duration, error) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, errors.New("/proc stat: no command name")
	}
	f := strings.Fields(stat[i+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc stat: %d fields after the name", len(f))
	}
	var ticks int64
	for _, s := range f[11:13] {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc stat: %w", err)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / clockTicks, nil
}

func redisVersion(ctx context.Context, rdb *redis.Client) (string, error) {
	info, err := rdb.Info(ctx, "server").Result()
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
			return "Redis " + v, nil
		}
	}
	return "Redis", nil
}
