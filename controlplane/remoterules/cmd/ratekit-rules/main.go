// Command ratekit-rules is the reference rules service of ratekit (it returns
// rules per request, above every other tier; docs/design.md#phases) and its
// apply tool.
//
//	ratekit-rules serve -redis redis://127.0.0.1:6379 [-grpc 127.0.0.1:8091] [-http 127.0.0.1:8092] [-write-token-file FILE] [-available web=available_limiters.yaml]
//	ratekit-rules apply -server http://127.0.0.1:8092 [-token-file FILE] overrides.yaml
//	ratekit-rules apply -check overrides.yaml
//	ratekit-rules get -server http://127.0.0.1:8092 -service web -limiter rack_request root_namespace=345 plan=premium
//
// serve answers ratekit.rules.v1.RulesService/GetRules on -grpc (with gRPC
// health and reflection) from override documents in Redis, and serves the
// management API (/v1/overrides/{service}/{limiter}), /metrics and /healthz
// on -http. It stops gracefully on SIGINT or SIGTERM. apply checks a file of
// override documents whole and PUTs each one (a file without documents is
// an error: nothing applied); -check only checks it, and refuses a file
// without documents too. get prints the answer a request with that
// identifier would get (POST /v1/rules).
//
// serve listens on loopback by default. Management writes (PUT, DELETE) need
// the bearer token of -write-token-file (Authorization: Bearer TOKEN); without
// one, only clients connecting from loopback to loopback may write (a mesh
// sidecar forwarding from 127.0.0.6 to the pod's IP is not one). Every write is logged (slog record
// "rate_limit_rules_write": who, what, outcome) and every refusal too. The
// management API and /metrics answer only to loopback Host names when on
// loopback (DNS rebinding; Prometheus scrapes by localhost, 127.0.0.1 or
// [::1]) unless -allowed-hosts names others, and then only to those;
// /healthz answers any name, so a probe by IP passes. The HTTP listener cuts
// off clients slower than -read-timeout and -write-timeout. A request body (HTTP) or message
// (gRPC) over 1 MiB (rulesserver.MaxDocumentBytes) is refused.
//
// help (or -h) prints the usage on stdout, COMMAND -h that command's flags.
// Exit codes: 0 success (serve: stopped by SIGINT or SIGTERM), 1 failure,
// 2 usage error or unreadable input.
package main

import (
	"bytes"
	"context"
	"crypto/subtle"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"buf.build/go/protovalidate"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/reflection"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/ratekit/ratekit/controlplane/config"
	"github.com/ratekit/ratekit/controlplane/remoterules/rulesserver"
	"github.com/ratekit/ratekit/controlplane/remoterules/rulesv1"
	"github.com/ratekit/ratekit/core/redisstore"
	"github.com/ratekit/ratekit/internal/buildinfo"
	"github.com/ratekit/ratekit/internal/httpguard"
	"github.com/ratekit/ratekit/internal/servers"
	"github.com/ratekit/ratekit/internal/suggest"
)

// maxConnectionIdle is servers.MaxConnectionIdle; tests shorten it.
var maxConnectionIdle = servers.MaxConnectionIdle

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, nil); err != nil {
		fmt.Fprintln(os.Stderr, "ratekit-rules:", err)
		if errors.As(err, new(usageError)) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

const usage = `usage:
  ratekit-rules -version
  ratekit-rules serve [-redis URL | -redis-cluster host:port,...] [-grpc ADDR] [-http ADDR] [-write-token-file FILE]
                      [-allowed-hosts NAME,...] [-read-timeout D] [-write-timeout D] [-key-prefix PREFIX]
                      [-available SERVICE=FILE]...
  ratekit-rules apply (-server URL [-token-file FILE] | -check) [-available SERVICE=FILE]... FILE
  ratekit-rules get -server URL -service NAME -limiter NAME [PROPERTY=VALUE]...
  ratekit-rules help [COMMAND]       (or COMMAND -h: its flags)

exit codes: 0 success (serve: stopped by SIGINT or SIGTERM); 1 failure;
2 usage error or unreadable input`

// commandNames are the commands run dispatches.
var commandNames = []string{"serve", "apply", "get", "version", "help"}

// usageError is a mistake on the command line: main exits 2.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

// errHelpShown: a command printed its help for -h; run returns nil.
var errHelpShown = errors.New("help shown")

// parse parses a command's flags. -h prints the usage and the command's
// flags on out (errHelpShown); a bad flag is a usageError naming the flag
// meant for a typo.
func parse(fs *flag.FlagSet, args []string, out io.Writer) error {
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		fmt.Fprintf(out, "%s\n\nflags of %s:\n", usage, fs.Name())
		fs.SetOutput(out)
		fs.PrintDefaults()
		return errHelpShown
	case err != nil:
		hint := ""
		if m := suggest.Flag(fs, err); m != "" {
			hint = fmt.Sprintf("; did you mean -%s?", m)
		}
		return usageError{fmt.Sprintf("%s: %v%s\nrun 'ratekit-rules %s -h' for its flags", fs.Name(), err, hint, fs.Name())}
	}
	return nil
}

// run is main without the process: ready, when set, receives the listeners'
// addresses once serve listens (tests use it).
func run(ctx context.Context, args []string, out io.Writer, ready func(grpcAddr, httpAddr string)) error {
	if err := dispatch(ctx, args, out, ready); !errors.Is(err, errHelpShown) {
		return err
	}
	return nil
}

func dispatch(ctx context.Context, args []string, out io.Writer, ready func(grpcAddr, httpAddr string)) error {
	if len(args) == 0 {
		return usageError{usage}
	}
	switch args[0] {
	case "serve":
		return serve(ctx, args[1:], out, ready)
	case "apply":
		return apply(ctx, args[1:], out)
	case "get":
		return get(ctx, args[1:], out)
	case "-version", "--version", "version":
		_, err := fmt.Fprintln(out, buildinfo.Line("ratekit-rules"))
		return err
	case "help", "-h", "-help", "--help":
		if len(args) > 1 && args[1] != "help" && args[1] != "version" {
			return dispatch(ctx, []string{args[1], "-h"}, out, ready)
		}
		_, err := fmt.Fprintln(out, usage)
		return err
	}
	return usageError{fmt.Sprintf("unknown command %q%s\n%s", args[0], suggest.Hint(args[0], commandNames), usage)}
}

// availableFlag collects -available SERVICE=FILE.
type availableFlag map[string]*config.AvailableLimiters

func (a availableFlag) String() string { return "" }

func (a availableFlag) Set(v string) error {
	service, file, ok := strings.Cut(v, "=")
	if !ok {
		return fmt.Errorf("want SERVICE=FILE, got %q", v)
	}
	// A name no document can have, or a service given twice, would leave
	// its documents unchecked, or checked against one of two files.
	if err := protovalidate.Validate(&rulesv1.GetRulesRequest{Service: service, Limiter: "l"}); err != nil {
		return fmt.Errorf("service name %.80q must match ^[a-z0-9][a-z0-9_.-]{0,63}$", service)
	}
	if a[service] != nil {
		return fmt.Errorf("-available %s is given twice", service)
	}
	av, err := config.LoadAvailableLimiters(file)
	if err != nil {
		return fmt.Errorf("load available limiters of %s: %w", service, err)
	}
	a[service] = av
	return nil
}

// The listen addresses of serve: loopback, so that nothing is reachable from
// another host unless an operator says so.
const (
	defaultGRPCAddr = "127.0.0.1:8091"
	defaultHTTPAddr = "127.0.0.1:8092"
)

func serve(ctx context.Context, args []string, out io.Writer, ready func(string, string)) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	redisURL := fs.String("redis", "redis://127.0.0.1:6379", "Redis URL of the override documents: redis://host:port/db, a Cluster redis://node1:port?addr=node2:port..., or redis-sentinel://host:port,.../master")
	cluster := fs.String("redis-cluster", "", "Redis Cluster node addresses (comma-separated), instead of -redis")
	grpcAddr := fs.String("grpc", defaultGRPCAddr, "gRPC listen address (RulesService, health, reflection)")
	httpAddr := fs.String("http", defaultHTTPAddr, "HTTP listen address (management API, /metrics, /healthz)")
	prefix := fs.String("key-prefix", rulesserver.DefaultKeyPrefix, "Redis key prefix")
	tokenFile := fs.String("write-token-file", "", "file holding the bearer token PUT and DELETE must carry (default: only clients connecting from loopback to loopback may write)")
	hosts := fs.String("allowed-hosts", "", "comma-separated Host names the management API and /metrics answer to (default on loopback: localhost, 127.0.0.1, [::1]; elsewhere, any)")
	readTimeout := fs.Duration("read-timeout", httpguard.ReadTimeout, "bound on reading one HTTP request, body included")
	writeTimeout := fs.Duration("write-timeout", httpguard.WriteTimeout, "bound on answering one HTTP request")
	available := availableFlag{}
	fs.Var(available, "available", "SERVICE=available_limiters.yaml: cross-check that service's documents (repeatable)")
	if err := parse(fs, args, out); err != nil {
		return err
	}
	if *readTimeout <= 0 || *writeTimeout <= 0 {
		return usageError{"-read-timeout and -write-timeout must be positive"}
	}
	// net.Listen would bind every interface, on a random port: an empty
	// variable in a unit file served the management API publicly.
	if *grpcAddr == "" || *httpAddr == "" {
		return usageError{fmt.Sprintf("-grpc and -http need a host:port (default %s and %s): an empty one would listen on every interface", defaultGRPCAddr, defaultHTTPAddr)}
	}
	redisSet := false
	fs.Visit(func(f *flag.Flag) { redisSet = redisSet || f.Name == "redis" })
	if redisSet && *cluster != "" { // the cluster was used, the -redis given ignored
		return usageError{"-redis and -redis-cluster name two stores: give one"}
	}
	cfg := rulesserver.Config{KeyPrefix: *prefix, Available: available}
	if *hosts != "" {
		cfg.AllowedHosts = strings.Split(*hosts, ",")
	}
	if *tokenFile != "" {
		token, err := readToken(*tokenFile)
		if err != nil {
			return err
		}
		cfg.Authorize = bearer(token)
	}
	var rdb redis.UniversalClient
	if *cluster != "" {
		rdb = redis.NewClusterClient(&redis.ClusterOptions{Addrs: strings.Split(*cluster, ",")})
	} else {
		opt, err := redisstore.ParseURL(*redisURL) // its errors never quote the URL (a password)
		if err != nil {
			return usageError{"-redis: " + err.Error()}
		}
		rdb = redis.NewUniversalClient(redisstore.GoRedisOptions(opt))
	}
	defer rdb.Close()
	cfg.Redis = rdb
	srv, err := rulesserver.New(cfg)
	if err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(srv)

	gl, err := net.Listen("tcp", *grpcAddr)
	if err != nil {
		return fmt.Errorf("listen gRPC: %w", err)
	}
	hl, err := net.Listen("tcp", *httpAddr)
	if err != nil {
		_ = gl.Close()
		return fmt.Errorf("listen HTTP: %w", err)
	}
	// A request is bounded as its HTTP form is (the largest valid one is a
	// few hundred KiB); gRPC's own default is 4 MiB.
	gs := grpc.NewServer(grpc.MaxRecvMsgSize(rulesserver.MaxDocumentBytes), grpc.MaxConcurrentStreams(servers.MaxConcurrentStreams),
		grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionIdle: maxConnectionIdle}))
	rulesv1.RegisterRulesServiceServer(gs, srv)
	hs := health.NewServer()
	healthpb.RegisterHealthServer(gs, hs)
	hs.SetServingStatus(rulesv1.RulesService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	reflection.Register(gs)

	mux := http.NewServeMux()
	mux.Handle("/v1/", srv.Handler())
	// The metrics are checked as the API is; /healthz must answer a probe
	// by IP (kubelet's Host is the pod's IP) whatever -allowed-hosts says.
	mux.Handle("GET /metrics", httpguard.CheckHost(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), cfg.AllowedHosts, "-allowed-hosts"))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		if err := rdb.Ping(r.Context()).Err(); err != nil {
			// Any Host may ask: the cause (Redis's address among it) goes
			// to the log, not to the answer.
			slog.Warn("ratekit-rules: healthz: redis unavailable", slog.Any("error", err))
			http.Error(w, "redis unavailable", http.StatusServiceUnavailable)
			return
		}
		_, _ = io.WriteString(w, "ok\n")
	})
	httpSrv := httpguard.Server(mux)
	httpSrv.ReadTimeout, httpSrv.WriteTimeout = *readTimeout, *writeTimeout
	httpSrv.ReadHeaderTimeout = min(httpSrv.ReadHeaderTimeout, *readTimeout)

	slog.Info("ratekit-rules: serving", slog.String("grpc", gl.Addr().String()), slog.String("http", hl.Addr().String()),
		slog.Bool("write_token", cfg.Authorize != nil))
	// Graceful: report NOT_SERVING, finish in-flight calls, then stop.
	return servers.Run(ctx, servers.Config{GRPC: gs, GRPCListener: gl, HTTP: httpSrv, HTTPListener: hl,
		Drain: 10 * time.Second, Draining: hs.Shutdown, Ready: ready})
}

func apply(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("apply", flag.ContinueOnError)
	server := fs.String("server", "", "management API base URL, e.g. http://127.0.0.1:8092")
	check := fs.Bool("check", false, "only check the file")
	tokenFile := fs.String("token-file", "", "file holding the bearer token of the server's -write-token-file")
	available := availableFlag{}
	fs.Var(available, "available", "SERVICE=available_limiters.yaml: cross-check that service's documents (repeatable)")
	if err := parse(fs, args, out); err != nil {
		return err
	}
	if fs.NArg() != 1 || (*server == "") == !*check {
		return usageError{usage}
	}
	if err := checkServer(*server); err != nil {
		return err
	}
	file := fs.Arg(0)
	data, err := readBounded(file)
	if err != nil {
		return err
	}
	f, err := rulesserver.ParseOverrideFile(file, data, available)
	if err != nil {
		return err
	}
	if len(f.GetDocuments()) == 0 { // applying nothing is not a success, nor is checking it
		return fmt.Errorf("%s holds no override documents: nothing applied", file)
	}
	if *check {
		noun := "documents"
		if len(f.GetDocuments()) == 1 {
			noun = "document"
		}
		fmt.Fprintf(out, "%s: %d %s OK\n", file, len(f.GetDocuments()), noun)
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	client := &http.Client{Timeout: 10 * time.Second}
	if *tokenFile != "" {
		token, err := readToken(*tokenFile)
		if err != nil {
			return err
		}
		client.Transport = withToken{token: token}
		// Apply follows no redirect, so the token goes to -server only; in
		// clear text unless that is https or this machine.
		if u, _ := url.Parse(*server); u.Scheme == "http" && !httpguard.LoopbackName(u.Hostname()) {
			fmt.Fprintf(out, "warning: -token-file over plain http to %s: the token crosses the network in clear text (use https, or a mesh that encrypts)\n", u.Hostname())
		}
	}
	stored, err := rulesserver.Apply(ctx, client, *server, f)
	for _, d := range stored {
		fmt.Fprintf(out, "%s/%s: revision %s\n", d.GetService(), d.GetLimiter(), d.GetRevision())
	}
	return err
}

func get(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("get", flag.ContinueOnError)
	server := fs.String("server", "", "management API base URL, e.g. http://127.0.0.1:8092")
	service := fs.String("service", "", "the calling service")
	limiter := fs.String("limiter", "", "the limiter")
	if err := parse(fs, args, out); err != nil {
		return err
	}
	if *server == "" || *service == "" || *limiter == "" {
		return usageError{usage}
	}
	if err := checkServer(*server); err != nil {
		return err
	}
	req := &rulesv1.GetRulesRequest{Service: *service, Limiter: *limiter, Identifier: map[string]string{}}
	for _, kv := range fs.Args() {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return usageError{fmt.Sprintf("identifier: want PROPERTY=VALUE, got %q", kv)}
		}
		req.Identifier[k] = v
	}
	body, err := protojson.Marshal(req)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(*server, "/")+"/v1/rules", bytes.NewReader(body))
	if err != nil {
		return err
	}
	hr.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(hr)
	if err != nil {
		return fmt.Errorf("get rules: %w", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, rulesserver.MaxDocumentBytes+1))
	if err != nil {
		return fmt.Errorf("get rules: %w", err)
	}
	if len(b) > rulesserver.MaxDocumentBytes {
		return fmt.Errorf("get rules: the answer is larger than %d bytes (rulesserver.MaxDocumentBytes), the bound of an answer", rulesserver.MaxDocumentBytes)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("get rules: %s: %s", resp.Status, bytes.TrimSpace(b))
	}
	answer := &rulesv1.GetRulesResponse{}
	if err := protojson.Unmarshal(b, answer); err != nil {
		return fmt.Errorf("get rules: decode answer: %w", err)
	}
	pretty, err := protojson.MarshalOptions{Multiline: true, UseProtoNames: true}.Marshal(answer)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(out, "%s\n", pretty)
	return err
}

// checkServer refuses a -server that is no http(s) URL, without quoting it:
// it may hold a password, and url.Parse's error, which the requests would
// report, quotes it whole.
func checkServer(server string) error {
	if server == "" {
		return nil // apply -check
	}
	u, err := url.Parse(server)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return usageError{"-server: not an http(s) URL (the URL is not shown: it may hold a password)"}
	}
	return nil
}

// readBounded reads a file of override documents, refusing one over the
// bound of every rules document (config.MaxFileSize) before reading it. A
// file that cannot be opened is a usageError, as in the ratekit command.
func readBounded(file string) ([]byte, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, usageError{err.Error()}
	}
	defer f.Close()
	return config.ReadBounded(file, f)
}

// maxTokenBytes bounds a bearer token file.
const maxTokenBytes = 4096

// readToken reads a bearer token file: its content without surrounding
// space, at least 16 bytes; a file over maxTokenBytes is refused.
func readToken(file string) (string, error) {
	f, err := os.Open(file)
	if err != nil {
		return "", fmt.Errorf("read token: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxTokenBytes+1))
	if err != nil {
		return "", fmt.Errorf("read token: %w", err)
	}
	if len(b) > maxTokenBytes {
		return "", fmt.Errorf("token file %s: larger than %d bytes", file, maxTokenBytes)
	}
	token := strings.TrimSpace(string(b))
	if len(token) < 16 {
		return "", fmt.Errorf("token file %s: the token must be at least 16 bytes", file)
	}
	return token, nil
}

// bearer authorizes the requests carrying Authorization: Bearer token,
// audited as "token".
func bearer(token string) rulesserver.Authorizer {
	want := []byte("Bearer " + token)
	return func(r *http.Request) (string, bool) {
		if subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) != 1 {
			return "", false
		}
		return "token", true
	}
}

// withToken sends the bearer token with every request.
type withToken struct{ token string }

func (t withToken) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+t.token)
	return http.DefaultTransport.RoundTrip(r)
}
