// Command ratekit-envoy serves Envoy's global rate-limit service
// (envoy.service.ratelimit.v3.RateLimitService) from the limiters of an
// available_limiters.yaml, their counters in Redis and their rules from the
// rule store, so a gateway and the services behind it enforce one rule set on
// one set of counters.
//
//	ratekit-envoy -available available_limiters.yaml [-rate-limits rate_limits.yaml] \
//	    -redis-url redis://redis:6379 [-listen 127.0.0.1:8081] [-http 127.0.0.1:9090] [-domain envoy_domain=limiter]
//
// -redis-url (or $RATEKIT_REDIS_URL) takes the URLs of redisstore.Dial: one
// server (redis://host:6379/0), a Redis Cluster
// (redis://node1:6379?addr=node2:6379&addr=node3:6379) or a master that
// Sentinel monitors (redis-sentinel://s1:26379,s2:26379/mymaster). The
// counters go through redisstore.Dial's store, which checks all the
// descriptors of a request in one round trip (one per stage on a Cluster);
// the rule store reads through a go-redis client on the same URL. It starts
// while Redis is down or hung (each start-up wait for it is bounded by 2s),
// on the local tiers with its checks failing open, and reaches Redis in the
// background; -seed, when Redis does not take it at start, is written by
// the rule store at its first refresh that reaches Redis (see
// rulestore.Store.SeedBound).
//
// It serves on -listen the RateLimitService, gRPC health
// (grpc.health.v1.Health, overall and per service) and reflection, and on
// -http /metrics (Prometheus), /debug/ratelimit (the limiters' rules by tier
// and recent blocks; keep that port internal) and /healthz. SIGINT or
// SIGTERM drains it: health turns NOT_SERVING, calls in flight finish (up to
// -drain), then it exits 0. See the package documentation of ratekitenvoy for the mapping.
//
// Both listeners are on loopback by default: give -listen an address the
// gateway reaches (for example :8081 in a container) and keep -http internal.
// The HTTP server cuts off clients slower than its read and write timeouts.
// On a loopback -http, /metrics and /debug/ratelimit answer only to loopback
// Host names (DNS rebinding; Prometheus scrapes by localhost, 127.0.0.1 or
// [::1]) unless -allowed-hosts names others, and then only to those on any
// -http. /healthz answers any name: a probe by IP must pass.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/reflection"

	"github.com/ratekit/ratekit/controlplane/config"
	"github.com/ratekit/ratekit/controlplane/rulestore"
	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/redisstore"
	ratekitenvoy "github.com/ratekit/ratekit/envoy"
	"github.com/ratekit/ratekit/internal/buildinfo"
	"github.com/ratekit/ratekit/internal/goredis"
	"github.com/ratekit/ratekit/internal/httpguard"
	"github.com/ratekit/ratekit/internal/servers"
	"github.com/ratekit/ratekit/internal/suggest"
	ratelimitheaders "github.com/ratekit/ratekit/middleware/headers"
	"github.com/ratekit/ratekit/observability/observe"
	"github.com/ratekit/ratekit/pages/debug"
)

// maxConnectionIdle is servers.MaxConnectionIdle; tests shorten it.
var maxConnectionIdle = servers.MaxConnectionIdle

func main() {
	if len(os.Args) == 2 && (os.Args[1] == "-version" || os.Args[1] == "--version") {
		fmt.Println(buildinfo.Line("ratekit-envoy"))
		return
	}
	// go-redis's own lines (a failed dial, about four a second while Redis
	// is down) came as plain text among the log's records: the service logs
	// the store's failures itself (rate_limit_error, the breaker).
	goredis.Silence()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stderr, nil)
	stop()
	if help := (*helpError)(nil); errors.As(err, &help) {
		fmt.Print(help.text) // -h: the help is the result, on stdout
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "ratekit-envoy:", err)
		if errors.Is(err, errUsage) {
			fmt.Fprintln(os.Stderr, "run 'ratekit-envoy -h' for the flags")
			os.Exit(2)
		}
		os.Exit(1)
	}
}

var errUsage = errors.New("usage")

// helpError answers -h (or help): main prints its text on stdout and exits 0. It is
// flag.ErrHelp.
type helpError struct{ text string }

func (e *helpError) Error() string        { return flag.ErrHelp.Error() }
func (e *helpError) Is(target error) bool { return target == flag.ErrHelp }

// helpText is the synopsis and every flag of fs.
func helpText(fs *flag.FlagSet) string {
	var b strings.Builder
	b.WriteString("usage: ratekit-envoy -available FILE -redis-url URL [flags]\n" +
		"       ratekit-envoy -version\n\n" +
		"Serves Envoy's RateLimitService from the limiters of FILE, their counters in\n" +
		"Redis and their rules from the rule store. Exit codes: 0 stopped by SIGINT or\n" +
		"SIGTERM; 1 the config or a server failed; 2 usage error.\n\nflags:\n")
	fs.SetOutput(&b)
	fs.PrintDefaults()
	return b.String()
}

// flagHint suggests the flag of fs closest to the one err says is not
// defined, for a typo such as -redis-ulr.
func flagHint(fs *flag.FlagSet, err error) string {
	if m := suggest.Flag(fs, err); m != "" {
		return fmt.Sprintf("; did you mean -%s?", m)
	}
	return ""
}

// envRedisURL is the environment variable that -redis-url defaults to, as
// for the ratekit command.
const envRedisURL = "RATEKIT_REDIS_URL"

// domains is the repeatable -domain flag: envoy_domain=limiter.
type domains map[string]string

func (d domains) String() string { return fmt.Sprint(map[string]string(d)) }

func (d domains) Set(v string) error {
	dom, lim, ok := strings.Cut(v, "=")
	if !ok || dom == "" || lim == "" {
		return fmt.Errorf("want envoy_domain=limiter, got %q", v)
	}
	if _, dup := d[dom]; dup {
		return fmt.Errorf("domain %q mapped twice", dom)
	}
	d[dom] = lim
	return nil
}

// The listen addresses by default: loopback, so that nothing is reachable
// from another host unless an operator says so.
const (
	defaultListen = "127.0.0.1:8081"
	defaultHTTP   = "127.0.0.1:9090"
)

type flags struct {
	available, rateLimits   string
	redisURL                string
	cluster                 bool
	listen, httpAddr        string
	allowedHosts            []string
	domains                 domains
	unknownDomain, headers  string
	keyPrefix, rulesPrefix  string
	timeout, refresh, drain time.Duration
	seed                    bool
}

func parseFlags(args []string) (*flags, error) {
	f := &flags{domains: domains{}}
	fs := flag.NewFlagSet("ratekit-envoy", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // main prints the help on stdout, an error on stderr
	fs.StringVar(&f.available, "available", "", "available_limiters.yaml (required): the limiters served, one per Envoy domain")
	fs.StringVar(&f.rateLimits, "rate-limits", "", "rate_limits.yaml (optional): the operators' file tier")
	fs.StringVar(&f.redisURL, "redis-url", "", "Redis for counters and rules (required; default $"+envRedisURL+"): redis://host:port/db, a Cluster redis://node1:port?addr=node2:port..., or redis-sentinel://host:port,.../master")
	fs.BoolVar(&f.cluster, "redis-cluster", false, "-redis-url names one node of a Redis Cluster (a URL with several addr is one already)")
	fs.StringVar(&f.listen, "listen", defaultListen, "gRPC address: RateLimitService, health, reflection (:8081 for every interface)")
	fs.StringVar(&f.httpAddr, "http", defaultHTTP, "HTTP address: /metrics, /debug/ratelimit and /healthz (empty: none; keep it internal)")
	fs.Func("allowed-hosts", "comma-separated Host names /metrics and /debug/ratelimit answer to (default on a loopback -http: localhost, 127.0.0.1, [::1]; on another, any)", func(v string) error {
		f.allowedHosts = nil // empty: the default
		if v != "" {
			f.allowedHosts = strings.Split(v, ",")
		}
		return nil
	})
	fs.Var(f.domains, "domain", "envoy_domain=limiter, repeatable (a domain not mapped selects the limiter of its name)")
	fs.StringVar(&f.unknownDomain, "unknown-domain", "error", "answer to a domain that selects no limiter: error (NOT_FOUND) or ok")
	fs.StringVar(&f.headers, "headers", "ietf", "rate-limit headers added to responses: ietf, legacy, gitlab or none")
	fs.StringVar(&f.keyPrefix, "key-prefix", ratelimit.DefaultKeyPrefix, "counter key prefix (the services sharing the counters must use the same)")
	fs.StringVar(&f.rulesPrefix, "rules-prefix", rulestore.DefaultPrefix, "rule store key prefix")
	fs.DurationVar(&f.timeout, "timeout", ratelimit.DefaultTimeout, "bound of each Redis call of a check; past it the check fails open")
	fs.DurationVar(&f.refresh, "refresh", rulestore.DefaultInterval, "rule store refresh interval")
	fs.DurationVar(&f.drain, "drain", 10*time.Second, "on shutdown, how long calls in flight may finish (0: stop them at once)")
	fs.BoolVar(&f.seed, "seed", false, "write the file and default tiers into the rule store at start (as a service owning the limiters does), or at the first -refresh that reaches Redis")
	if len(args) == 1 && args[0] == "help" { // as the ratekit and ratekit-rules commands take it
		return nil, &helpError{helpText(fs)}
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, &helpError{helpText(fs)}
		}
		return nil, fmt.Errorf("%w: %w%s", errUsage, err, flagHint(fs, err))
	}
	if f.redisURL == "" {
		f.redisURL = os.Getenv(envRedisURL)
	}
	switch {
	case fs.NArg() > 0:
		return nil, fmt.Errorf("%w: unexpected arguments %q", errUsage, fs.Args())
	case f.available == "":
		return nil, fmt.Errorf("%w: -available is required", errUsage)
	case f.redisURL == "":
		return nil, fmt.Errorf("%w: -redis-url (or $%s) is required", errUsage, envRedisURL)
	case f.listen == "": // net.Listen would bind every interface, on a random port
		return nil, fmt.Errorf("%w: -listen is empty: want host:port (default %s)", errUsage, defaultListen)
	case f.unknownDomain != "error" && f.unknownDomain != "ok":
		return nil, fmt.Errorf("%w: -unknown-domain %q: want error or ok", errUsage, f.unknownDomain)
	// The limiter would take a timeout of 0 for its default (and refuse a
	// negative one), the rule store a refresh of 0 or less: a flag says what
	// it means. A negative drain would stop at once.
	case f.timeout <= 0:
		return nil, fmt.Errorf("%w: -timeout %v: want a positive duration", errUsage, f.timeout)
	case f.refresh <= 0:
		return nil, fmt.Errorf("%w: -refresh %v: want a positive duration", errUsage, f.refresh)
	case f.drain < 0:
		return nil, fmt.Errorf("%w: -drain %v: want 0 or more", errUsage, f.drain)
	}
	return f, nil
}

// run serves until ctx ends. ready, when set, is told the bound addresses
// once the servers accept connections (tests listen on port 0).
func run(ctx context.Context, args []string, stderr io.Writer, ready func(grpcAddr, httpAddr string)) error {
	f, err := parseFlags(args)
	if err != nil {
		return err
	}
	logger := slog.New(slog.NewTextHandler(stderr, nil))
	profile, err := ratelimitheaders.ParseProfile(f.headers)
	if err != nil {
		return fmt.Errorf("%w: -headers: %w", errUsage, err)
	}
	avail, err := config.LoadAvailableLimiters(f.available)
	if err != nil {
		return err
	}
	var rateLimits *config.RateLimits
	if f.rateLimits != "" {
		if rateLimits, err = config.LoadRateLimits(f.rateLimits, avail); err != nil {
			return err
		}
	}
	tiers, err := rulestore.ConfigTiers(avail, rateLimits)
	if err != nil {
		return err
	}

	opt, err := redisstore.ParseURL(f.redisURL) // its errors never quote the URL (a password)
	if err != nil {
		return fmt.Errorf("-redis-url: %w", err)
	}
	uo := redisstore.GoRedisOptions(opt)
	uo.IsClusterMode = f.cluster
	client := redis.NewUniversalClient(uo)
	defer client.Close()
	// The counters' store: while Redis is down it keeps connecting in the
	// background and the checks fail open, as the rule replica starts on the
	// local tiers. A hung Redis holds the start-up no longer than redisWait.
	octx, ocancel := context.WithTimeout(ctx, redisWait)
	store, err := redisstore.Open(octx, redisstore.Options{Client: opt})
	ocancel()
	if err != nil {
		return fmt.Errorf("redis: %w", err)
	}
	defer store.Close()

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	metrics := observe.NewMetrics(observe.MetricsOptions{})
	reg.MustRegister(metrics)
	blocks := observe.NewBlockSummary(observe.BlockSummaryOptions{Logger: logger})

	rules, err := rulestore.New(client, rulestore.Options{Prefix: f.rulesPrefix, Available: avail,
		Interval: f.refresh, Logger: logger, Metrics: metrics, ClusterMode: f.cluster})
	if err != nil {
		return err
	}
	var limiters []*ratelimit.Limiter
	for _, name := range avail.Names() {
		l, err := ratelimit.New(ratelimit.Config{Name: name, Store: store, KeyPrefix: f.keyPrefix,
			Timeout: f.timeout, Logger: logger, Observer: observe.Multi(metrics, blocks)})
		if err != nil {
			return err
		}
		if err := rules.Bind(l, tiers[name]); err != nil {
			return err
		}
		metrics.Init(l)
		limiters = append(limiters, l)
	}
	if f.seed {
		// Bounded: a seed Redis does not take now is owed, and the rule
		// store writes it at its first refresh that reaches Redis.
		sctx, scancel := context.WithTimeout(ctx, redisWait)
		_, err := rules.SeedBound(sctx)
		scancel()
		if err != nil {
			// The error says whether the seed is owed (rulestore.ErrSeedOwed) or refused.
			logger.Warn("ratekit_envoy_rules_not_seeded", slog.Any("error", err), slog.String("note", "the limiters run on their local tiers"))
		}
	}
	// A first refresh before serving, so the first answers use the published
	// rules; when Redis is down the limiters start on their local tiers and
	// the replica keeps trying.
	if err := rules.Refresh(ctx); err != nil {
		logger.Warn("ratekit_envoy_rules_not_loaded", slog.Any("error", err), slog.String("note", "serving the local tiers until a refresh succeeds"))
	}

	unknown := ratekitenvoy.UnknownDomainError
	if f.unknownDomain == "ok" {
		unknown = ratekitenvoy.UnknownDomainOK
	}
	svc, err := ratekitenvoy.NewService(limiters, ratekitenvoy.Options{Domains: f.domains, Available: avail,
		UnknownDomain: unknown, Headers: profile, Logger: logger,
		// The limiters' only observers are observe's Metrics and
		// BlockSummary, and they have no RuleSource: nothing keeps an
		// identifier past its check.
		ReuseIdentifiers: true})
	if err != nil {
		return err
	}
	reg.MustRegister(svc.Metrics())

	// A request within the service's bounds (descriptors × entries × value
	// length) is far below 1 MiB; a bigger one is refused before decoding.
	// The codec decodes Envoy's usual request in a few allocations.
	gs := grpc.NewServer(grpc.MaxRecvMsgSize(1<<20), grpc.MaxConcurrentStreams(servers.MaxConcurrentStreams),
		grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionIdle: maxConnectionIdle}), grpc.ForceServerCodecV2(svc.Codec()))
	svc.Register(gs)
	hs := health.NewServer()
	healthpb.RegisterHealthServer(gs, hs)
	reflection.Register(gs)
	hs.SetServingStatus(rlsv3.RateLimitService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)

	lis, err := net.Listen("tcp", f.listen)
	if err != nil {
		return fmt.Errorf("listen %s: %w", f.listen, err)
	}
	var hsrv *http.Server
	var hlis net.Listener
	if f.httpAddr != "" {
		if hlis, err = net.Listen("tcp", f.httpAddr); err != nil {
			_ = lis.Close()
			return fmt.Errorf("listen %s: %w", f.httpAddr, err)
		}
		mux := http.NewServeMux()
		// The metrics name every limiter and rule: the same Host check as
		// the page. /healthz tells nothing and must answer a probe by IP.
		mux.Handle("GET /metrics", httpguard.CheckHost(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), f.allowedHosts, "-allowed-hosts"))
		mux.Handle("GET /debug/ratelimit", debug.New(debug.Options{Tiers: rules, Blocks: blocks, AllowedHosts: f.allowedHosts}, limiters...))
		mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok\n") })
		hsrv = httpguard.Server(mux)
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	replicaDone := rules.Start(ctx)
	blocksDone := make(chan struct{})
	go func() { defer close(blocksDone); blocks.Run(ctx) }()
	httpAddr := ""
	if hlis != nil {
		httpAddr = hlis.Addr().String()
	}
	logger.Info("ratekit_envoy_serving", slog.String("grpc", lis.Addr().String()), slog.String("http", httpAddr),
		slog.Any("domains", domainList(limiters, f.domains)))
	// Drain: tell health checkers first, then let calls in flight finish.
	serveErr := servers.Run(ctx, servers.Config{GRPC: gs, GRPCListener: lis, HTTP: hsrv, HTTPListener: hlis,
		Drain: f.drain, Draining: hs.Shutdown, Ready: ready})
	cancel()
	<-replicaDone
	<-blocksDone
	logger.Info("ratekit_envoy_stopped")
	return serveErr
}

// redisWait bounds each wait for Redis at start-up (the counters' first
// connection, the seed): past it the binary serves on the local tiers, its
// checks failing open, and reaches Redis in the background.
const redisWait = rulestore.DefaultTimeout

func domainList(limiters []*ratelimit.Limiter, mapped map[string]string) []string {
	var out []string
	for _, l := range limiters {
		out = append(out, l.Name())
	}
	for d, l := range mapped {
		out = append(out, d+"="+l)
	}
	return out
}
