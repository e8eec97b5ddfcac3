package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/ratekit/ratekit/controlplane/config"
	"github.com/ratekit/ratekit/controlplane/rulestore"
	"github.com/ratekit/ratekit/core/redisstore"
	"github.com/ratekit/ratekit/internal/httpguard"
	"github.com/ratekit/ratekit/pages/admin"
)

const adminUsage = `usage: ratekit admin [--redis URL] --available-limiters FILE [flags]

Serves the rule store's admin page: every limiter with its file, published
and default tiers and the effective list; a form that publishes, edits and
deletes rules of the published tier through the publish API (with the
checks of rate_limits.yaml and a compare-and-set on the document); an
explain box for one identifier (nothing is counted) and "lift ban / clear"
with a confirmation.

The page is read-only unless --writer names who writes: every write is
then logged on stderr (slog JSON, "rate_limit_admin_write") under that name.
The command has no login of its own: anyone who reaches --listen can use
the page, so it listens on loopback by default and refuses another address
with --writer unless --allow-remote-writes is given (put it behind your own
authenticating proxy then) with --allowed-hosts: on such an address the page
would otherwise answer any Host, so a web page whose DNS name rebinds to it
could write as NAME from a browser that reaches it.

example:
  ratekit admin --redis redis://10.0.0.5:6379 --service checkout \
      --available-limiters config/available_limiters.yaml \
      --rate-limits config/rate_limits.yaml --writer alice
  # then open http://127.0.0.1:8089/

flags:
` + connUsage + `
  --available-limiters FILE   the application's available_limiters.yaml (required)
  --rate-limits FILE          the operators' rate_limits.yaml: shown as the file
                              tier of a limiter whose document lacks one
  --listen ADDR               address to serve on (default 127.0.0.1:8089; port 0
                              picks a free one)
  --writer NAME               enable writes, audited under NAME (at most 256 bytes;
                              default: read-only)
  --allow-remote-writes       allow --writer on a non-loopback --listen address
                              (with --allowed-hosts)
  --allowed-hosts NAME,...    Host names the page answers to ("name" on any port,
                              "name:port", "*" any); default on a loopback --listen:
                              localhost, 127.0.0.1, [::1] only, so that a rebound
                              DNS name is refused; set it behind a proxy or a name
                              (on another --listen any Host; there --writer needs it)
  --timeout D                 bound on the Redis calls of one page (default 5s, at most 10m)

exit codes: 0 stopped by an interrupt or SIGTERM; 1 invalid config or the server
failed; 2 usage error or unreadable file`

func init() {
	commands["admin"] = command{
		summary: "serve the rule store's admin page (list tiers, publish rules, explain, lift bans)",
		usage:   adminUsage,
		run:     runAdmin,
	}
}

func runAdmin(ctx context.Context, out output, args []string) int {
	fs := flag.NewFlagSet("admin", flag.ContinueOnError)
	var availablePath, rateLimitsPath, listen, writer, hosts string
	var allowRemote bool
	var timeout time.Duration
	var c connFlags
	c.register(fs)
	fs.StringVar(&availablePath, "available-limiters", "", "")
	fs.StringVar(&rateLimitsPath, "rate-limits", "", "")
	fs.StringVar(&listen, "listen", "127.0.0.1:8089", "")
	fs.StringVar(&writer, "writer", "", "")
	fs.BoolVar(&allowRemote, "allow-remote-writes", false, "")
	fs.StringVar(&hosts, "allowed-hosts", "", "")
	fs.DurationVar(&timeout, "timeout", admin.DefaultTimeout, "")
	if ok, code := parseFlags(fs, adminUsage, args, out); !ok {
		return code
	}
	c.resolve()
	if err := c.check(); err != nil {
		return usageError(out, adminUsage, "%v", err)
	}
	switch {
	case availablePath == "":
		return usageError(out, adminUsage, "admin needs --available-limiters FILE")
	case fs.NArg() > 0:
		return usageError(out, adminUsage, "unexpected arguments %q", fs.Args())
	case checkTimeout(timeout) != nil:
		return usageError(out, adminUsage, "%v", checkTimeout(timeout))
	case len(writer) > maxWriterBytes: // on every page and in every audit record
		return usageError(out, adminUsage, "--writer of %d bytes, at most %d", len(writer), maxWriterBytes)
	}
	if _, _, err := net.SplitHostPort(listen); err != nil {
		return usageError(out, adminUsage, "--listen %s: %v", listen, err)
	}
	if writer != "" && !allowRemote && !httpguard.LoopbackAddr(listen) {
		return usageError(out, adminUsage, "--listen %s is not a loopback address: anyone reaching it could write as %s; add --allow-remote-writes if an authenticating proxy guards it", listen, writer)
	}
	if writer != "" && hosts == "" && !httpguard.LoopbackAddr(listen) {
		// The page answers any Host there (admin.Options.AllowedHosts), and
		// its CSRF check compares Origin with that Host: a DNS-rebound page
		// passed both and published as the writer.
		return usageError(out, adminUsage, "--listen %s with --writer needs --allowed-hosts: the names the page is reached by (your proxy's, '*' for any); without it a web page whose DNS name rebinds to this address could write as %s", listen, writer)
	}
	available, err := config.LoadAvailableLimiters(availablePath)
	if err != nil {
		return report(out.stderr, "admin", err)
	}
	var rateLimits *config.RateLimits
	if rateLimitsPath != "" {
		if _, err := os.Stat(rateLimitsPath); err != nil {
			fmt.Fprintf(out.stderr, "ratekit admin: %v\n", err)
			return exitUsage
		}
		if rateLimits, err = config.LoadRateLimits(rateLimitsPath, available); err != nil {
			return report(out.stderr, "admin", err)
		}
	}
	client, err := redisClient(c.redisURL, c.cluster, timeout)
	if err != nil {
		return usageError(out, adminUsage, "--redis: %v", err)
	}
	defer client.Close()
	logger := slog.New(slog.NewJSONHandler(out.stderr, nil))
	store, err := rulestore.New(client, rulestore.Options{Prefix: c.rulesPrefix, Available: available, Timeout: timeout,
		Logger: logger, ClusterMode: c.cluster})
	if err != nil {
		return usageError(out, adminUsage, "--rules-prefix: %v", err)
	}
	opts := admin.Options{Store: store, Available: available, RateLimits: rateLimits,
		Counters: redisstore.New(client), KeyPrefix: c.keyPrefix, Logger: logger, Timeout: timeout}
	if hosts != "" {
		opts.AllowedHosts = strings.Split(hosts, ",")
	}
	if writer != "" {
		opts.Authorize = func(*http.Request) (string, bool) { return writer, true }
	}
	page, err := admin.New(opts)
	if err != nil {
		fmt.Fprintf(out.stderr, "ratekit admin: %v\n", err)
		return exitInvalid
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		fmt.Fprintf(out.stderr, "ratekit admin: %v\n", err)
		return exitInvalid
	}
	srv := httpguard.Server(page)
	mode := "read-only"
	if writer != "" {
		mode = "writes as " + writer
	}
	fmt.Fprintf(out.stdout, "ratekit admin: serving http://%s/ (%s; rules under %q, counters under %q); interrupt to stop\n", ln.Addr(), mode, c.rulesPrefix, c.keyPrefix)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		fmt.Fprintf(out.stderr, "ratekit admin: %v\n", err)
		return exitInvalid
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		fmt.Fprintf(out.stderr, "ratekit admin: shutdown: %v\n", err)
	}
	return exitOK
}
