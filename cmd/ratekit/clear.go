package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"time"

	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/tiers"
	"github.com/ratekit/ratekit/internal/keys"
)

const clearUsage = `usage: ratekit clear [--redis URL] --limiter NAME [flags] PROPERTY=VALUE...

Lifts a ban and resets the counters of one identifier: removes the counter
and ban keys (shadow bans included) of every counting rule of the limiter
for that identifier, as the service's Limiter.Clear does. The rules are the
ones a service enforces, found as ` + "`ratekit explain`" + ` finds them: the limiter's
document in the rule store and the files given here, and with
--rules-service the rules service's answer for the identifier (the remote
tier: without it, the counters and bans of rules that only the rules
service answers are not cleared).

example:
  ratekit clear --service checkout --limiter user_sign_in \
      --available-limiters config/available_limiters.yaml username=alice

flags:
` + connUsage + `
  --limiter NAME              the limiter (required)
  --available-limiters FILE   the application's available_limiters.yaml (required
                              when the limiter has no document in the rule store,
                              or one without a default_rules tier)
  --rate-limits FILE          an operator's rate_limits.yaml: its rules' counters too
  --rules-service URL         the HTTP address of the per-request rules service
                              (ratekit-rules serve -http): the counters of the
                              rules it answers for this identifier too; it needs
                              the calling service (--service NAME or
                              $` + envService + `). When it cannot answer, nothing is cleared
  --dry-run                   list the keys that would be removed, remove nothing
  --timeout D                 bound on the whole command (default 5s, at most 10m)

PROPERTY=VALUE pairs are the identifier, exactly as the service builds it:
a key the limiter does not know is named in a warning, since a typo clears
nothing. Flags may come before or after the identifier.

A counter the identifier shares with other clients is not its own and is
left, each such rule named in a note on stderr: a rule without
characteristics (one counter for every client), and one whose
characteristic the identifier lacks (the counter of every client without
it). To lift a block such a rule gives, delete or change the rule
(ratekit rules delete / publish); its counter ends with its window.

The counters ratekit-envoy keeps for the identifier are removed too, each
named: those of a value over 1024 bytes, which the gateway counts as its
first 991 bytes, a tilde and a digest of the whole (give the value itself),
and those of a descriptor's limit override (rules envoy_override_<N>s, which
no tier holds), found by a SCAN of the limiter's override keys (at most
100,000 keys per node; when a node holds more, a warning says one may be
left). An override counts by all of the descriptor's keys: give them all.

When no key of the identifier exists under the counters' prefix, nothing
is cleared and the exit code is 1; the keys are searched under every other
prefix (a bounded SCAN: at most 100,000 keys per node, none longer than a
counter's key under a prefix of 256 bytes received) and, when found, the
prefix to use is named. Keys
found that expire (or that another client removes) before the delete are
counted apart: when none was left to delete, the exit code is 1 too.

A clear logs one audit record on stderr (slog JSON, "rate_limit_cli_write":
who, the limiter, the identifier, the keys deleted, the outcome, and with
--rules-service the calling service); who is
$RATEKIT_WRITER, else the OS user at the host. A dry run logs nothing.

exit codes: 0 cleared; 1 nothing to clear (the keys are missing, under
another prefix or gone before the delete), invalid config, unknown limiter
or Redis failure; 2 usage error or unreadable file`

func init() {
	commands["clear"] = command{
		summary: "lift a ban: remove one identifier's counters and bans (Limiter.Clear)",
		usage:   clearUsage,
		run:     runClear,
	}
}

func runClear(ctx context.Context, out output, args []string) int {
	fs := flag.NewFlagSet("clear", flag.ContinueOnError)
	f := explainFlags{name: "clear", usage: clearUsage}
	var dryRun bool
	f.connFlags.register(fs)
	fs.StringVar(&f.limiter, "limiter", "", "")
	fs.StringVar(&f.available, "available-limiters", "", "")
	fs.StringVar(&f.rateLimits, "rate-limits", "", "")
	fs.StringVar(&f.rulesService, "rules-service", "", "")
	fs.BoolVar(&dryRun, "dry-run", false, "")
	fs.DurationVar(&f.timeout, "timeout", 5*time.Second, "")
	pos, ok, code := parseArgs(fs, clearUsage, args, out)
	if !ok {
		return code
	}
	f.resolve()
	if err := f.check(); err != nil {
		return usageError(out, clearUsage, "%v", err)
	}
	switch {
	case f.limiter == "":
		return usageError(out, clearUsage, "clear needs --limiter NAME")
	case f.rateLimits != "" && f.available == "":
		return usageError(out, clearUsage, "--rate-limits is checked against --available-limiters FILE: give both")
	case checkTimeout(f.timeout) != nil:
		return usageError(out, clearUsage, "%v", checkTimeout(f.timeout))
	case len(pos) == 0:
		return usageError(out, clearUsage, "clear needs the identifier: PROPERTY=VALUE...")
	case f.rulesService != "" && f.service == "":
		return usageError(out, clearUsage, "--rules-service needs the calling service: --service NAME (or $%s)", envService)
	}
	id, err := parseIdentifier(pos)
	if err != nil {
		return usageError(out, clearUsage, "%v", err)
	}
	// One bound for the whole command: its Redis calls (one per key, a
	// SCAN per 1000 keys of a node) and the rules service each had their
	// own, which a slow Redis could add up to minutes.
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	if f.rulesService != "" {
		f.remote = &remoteTier{}
	}
	b, code := openLimiter(ctx, out, f)
	if code != exitOK {
		return code
	}
	defer b.client.Close()
	limiter, client, local := b.limiter, b.client, b.local
	if f.remote != nil {
		// The remote tier's counters, as the services' Limiter.Clear reaches
		// them through their RuleSource.
		rules, err := fetchRemoteRules(ctx, f.rulesService, f.service, f.limiter, id, local.available, f.timeout)
		if err == nil {
			f.remote.set, err = ratelimit.CompileRules(tiers.Remote, rules)
		}
		if err != nil {
			fmt.Fprintf(out.stderr, "ratekit clear: %v; nothing cleared (without --rules-service, the local tiers' counters only)\n", err)
			return exitInvalid
		}
	}
	// Shared counters are not the identifier's to clear (Limiter.Clear
	// leaves them): an operator lifting a block one of them gives learns why
	// it stays.
	for _, r := range limiter.Rules() {
		if r.Action != ratelimit.ActionLimit && r.Action != ratelimit.ActionLog {
			continue
		}
		if why := keys.Shared(r.Characteristics, id); why != "" {
			fmt.Fprintf(out.stderr, "note: rule %s left: its counter is shared with other clients (%s); to lift its block, delete or change the rule\n", r.Name, why)
		}
	}

	// The identifier as ratekit-envoy hands it to the limiter, when a value
	// is too long for the gateway to keep: its counters are the stand-in's.
	gid, long := keys.GatewayIdentifier(id)
	candidates := limiter.Keys(id)
	if long {
		candidates = append(candidates, limiter.Keys(gid)...)
	}
	// The counters of the gateway's limit overrides: no tier holds their
	// rules, so neither Keys nor Clear reaches them.
	overrides, err := findOverrides(ctx, client, f.keyPrefix, f.limiter, gid, f.timeout)
	if err != nil {
		fmt.Fprintf(out.stderr, "ratekit clear: %v\n", err)
		return exitInvalid
	}
	// A key an override counter counts by is used, if by no rule.
	for _, w := range identifierWarnings(id, local.properties, slices.Concat(limiter.Rules(), overrides.rules())) {
		fmt.Fprintf(out.stderr, "warning: %s\n", w)
	}
	if note := gatewayValueNote(long); note != "" {
		fmt.Fprintf(out.stderr, "note: %s: those are included\n", note)
	}
	if note := overrides.truncatedNote(); note != "" {
		fmt.Fprintf(out.stderr, "warning: %s\n", note)
	}
	overrideKeys := overrideKeysOf(overrides)
	isOverride := map[string]bool{}
	for _, k := range overrideKeys {
		isOverride[k] = true
	}

	// Which keys exist, one call per key: on a Redis Cluster they live in
	// different slots. The override counters were found by the SCAN.
	present := append([]string{}, overrideKeys...)
	for _, k := range candidates {
		rctx, cancel := context.WithTimeout(ctx, f.timeout)
		n, err := client.Exists(rctx, k).Result()
		cancel()
		if err != nil {
			fmt.Fprintf(out.stderr, "ratekit clear: read %s: %v\n", k, err)
			return exitInvalid
		}
		if n > 0 {
			present = append(present, k)
		}
	}
	sort.Strings(present)
	w := out.stdout
	fmt.Fprintf(w, "limiter %s, identifier %s, counters under %q\n", f.limiter, describeIdentifier(id), f.keyPrefix)
	if len(present) == 0 {
		// Clearing nothing is never a success: the operator may have the
		// wrong prefix (another service's, or the library's default).
		other, err := findElsewhere(ctx, client, f.keyPrefix, f.limiter, candidates, f.timeout)
		switch {
		case err != nil:
			fmt.Fprintf(out.stderr, "ratekit clear: nothing to clear under %q, and %v\n", f.keyPrefix, err)
		case len(other.prefixes) > 0:
			fmt.Fprintf(out.stderr, "ratekit clear: nothing cleared: no counter or ban of this identifier under %q, but its keys exist under another prefix: %s\n", f.keyPrefix, other.describe(f.service))
		default:
			note := ""
			if other.truncated {
				note = fmt.Sprintf(" (the search stopped after %d keys per node)", maxScanKeys)
			}
			fmt.Fprintf(out.stderr, "ratekit clear: nothing to clear: no counter or ban of this identifier under %q, nor under another prefix%s; check the identifier (ratekit explain)\n", f.keyPrefix, note)
		}
		return exitInvalid
	}
	list := func(verb string) {
		for _, k := range present {
			kind := "counter"
			switch {
			case isOverride[k]:
				kind = "gateway limit-override counter"
			case strings.HasSuffix(k, ":ban"):
				kind = "ban"
			}
			fmt.Fprintf(w, "  %s %s %s\n", verb, kind, k)
		}
	}
	if dryRun {
		list("would remove")
		fmt.Fprintf(w, "dry run: %s would be removed, nothing written\n", count(len(present), "key"))
		return exitOK
	}
	n, err := limiter.Clear(ctx, id)
	if err == nil && long {
		var m int
		m, err = limiter.Clear(ctx, gid)
		n += m
	}
	if err == nil && len(overrideKeys) > 0 {
		var m int
		m, err = b.store.Delete(ctx, overrideKeys)
		n += m
	}
	attrs := []slog.Attr{slog.String("limiter", f.limiter), slog.String("identifier", describeIdentifier(id)),
		slog.String("key_prefix", f.keyPrefix), slog.Int("keys_deleted", n)}
	if f.rulesService != "" { // the per-request rules' counters were cleared too
		attrs = append(attrs, slog.Bool("remote_rules", true), slog.String("service", f.service))
	}
	out.audit(ctx, "clear", err, attrs...)
	if err != nil {
		fmt.Fprintf(out.stderr, "ratekit clear: %v\n", err)
		return exitInvalid
	}
	// The keys found may expire, or another client remove them, before the
	// delete: DEL counts only what it removed, which says nothing of which.
	const gone = "were gone before the delete (expired, or removed by another client)"
	switch {
	case n == 0:
		fmt.Fprintf(out.stderr, "ratekit clear: nothing cleared: the %s found under %q %s\n", count(len(present), "key"), f.keyPrefix, gone)
		return exitInvalid
	case n < len(present):
		list("found")
		fmt.Fprintf(w, "cleared %d of the %s found: the others %s\n", n, count(len(present), "key"), gone)
	default:
		list("removed")
		fmt.Fprintf(w, "cleared %s\n", count(n, "key"))
	}
	return exitOK
}

func describeIdentifier(id ratelimit.Identifier) string {
	props := make([]string, 0, len(id))
	for k := range id {
		v, _ := id.Get(k)
		props = append(props, k+"="+v)
	}
	sort.Strings(props)
	return strings.Join(props, " ")
}
