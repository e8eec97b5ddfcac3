package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/ratekit/ratekit/controlplane/config"
	"github.com/ratekit/ratekit/controlplane/rulestore"
	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/tiers"
	"github.com/ratekit/ratekit/internal/rulecheck"
	"github.com/ratekit/ratekit/internal/suggest"
	configv1 "github.com/ratekit/ratekit/proto/ratelimit/config/v1"
)

const rulesUsage = `usage: ratekit rules COMMAND [--redis URL] [flags] [ARGS]

Reads and writes the Redis rule store: one document per limiter with its
file_rules (rate_limits.yaml), published_rules (the publish API) and
default_rules (the application's) tiers. Flags may come before or after
the arguments.

commands:
  list                  every limiter of the index: rules per tier, orphan marks
                        (one whose document is gone is noted, not invalid);
                        it reads at most 16 MiB of documents (rulestore.MaxReadBytes):
                        the limiters past that are listed NOT READ (show reads
                        each) and the command exits 1, as it does beside a
                        revision counter it cannot read (written by hand)
                        and beside a prefix that holds no document (a
                        mistyped --service)
  show LIMITER          each tier and the effective, merged list (--json: the
                        stored document, byte for byte); a document no
                        service would load is shown too, and exits 1
  publish --file FILE --available-limiters FILE
                        upsert the rules of FILE (the rate_limits.yaml shape:
                        rate_limits: {limiter: [rules]}) into the published
                        tiers, all limiters in one atomic write; the file is
                        validated first, with its limiters and properties
                        checked against available_limiters.yaml; a mode or
                        rule that the document's file_rules (rate_limits.yaml)
                        outrank is written but named in a warning: the
                        file's stays in force
  delete LIMITER RULE...
                        remove published rules (all or nothing); also shrinks
                        a document over its bounds (docs/limits.md); with
                        --mode (RULE then optional) the published mode too, in
                        the same write: a published mode outlives the
                        published rules and applies whenever rate_limits.yaml
                        sets none; the limiter then runs in the file's mode,
                        else its services' own
  remove LIMITER        delete a document that no service would load (invalid
                        JSON, over its bounds, a key of another Redis type,
                        with --available-limiters a property or skip rule it
                        no longer allows): publishing to it is refused until
                        then; a valid document is refused (delete its rules
                        instead), and so is one changed since it was read
  gc --available-limiters FILE
                        mark documents of limiters FILE no longer declares and
                        delete those marked longer than --grace ago

Each write (publish, delete, remove, gc; not a dry run) logs one audit record
on stderr, failed writes too (slog JSON, "rate_limit_cli_write": who, what,
outcome, and the revision a publish, delete or remove wrote; a publish names
each limiter's rules and mode, a delete --mode the mode it removed); who is
$RATEKIT_WRITER, else the OS user at the host.

flags:
` + connUsage + `
  --available-limiters FILE   the application's available_limiters.yaml (publish,
                              gc; list, show and remove judge stored documents by it)
  --skip-available-check      publish without --available-limiters: the file is
                              checked against the schema only, so a limiter or
                              property the services do not declare is accepted
  --file FILE                 rules to publish (publish)
  --dry-run                   publish, delete, remove, gc: read the store and print what
                              would change, rule by rule (+ added, ~ changed,
                              - removed, = unchanged), writing nothing; a publish
                              is judged by the store as the publish is (exit 1
                              where the publish would be refused), and a gc is
                              run by the store as gc runs, writing nothing
  --grace D                   orphans older than this are deleted (gc; default 7d,
                              at most 106751d)
  --scan-keys N               keys of the Redis server one gc examines for documents
                              the index does not name (default 65536, at most 2^40, 2^30 − 1 on 32-bit);
                              the next gc goes on from where it stopped
  --json                      machine-readable output (list, show)
  --mode                      delete: the published mode (see delete)
  --timeout D                 bound on the whole command (default 10s, at most 10m)

--prefix is the former name of --rules-prefix and is still accepted.

A command whose target state already holds says so and succeeds: a publish
of rules the store holds ("nothing changed"), a gc that finds no orphans (a
deploy pipeline runs both every time). One that finds nothing to act on
fails: a delete of a rule not published (or --mode of a limiter with no
published mode), a remove of a valid document, a list of a prefix that
holds no document.
A publish to a limiter no service seeded under the prefix (no document,
or published rules alone) succeeds with a note naming it: the services
read it only if their rule store uses that prefix (--service); a warning
names the seeded limiter of that prefix whose name it is a typo of.

exit codes: 0 success; 1 invalid input, rule not found or Redis failure;
2 usage error or unreadable file`

// rulesCommands are the rules subcommands, as runRules dispatches them.
var rulesCommands = []string{"list", "show", "publish", "delete", "remove", "gc"}

func init() {
	commands["rules"] = command{
		summary: "list, show, publish, delete, remove and garbage-collect rules in the Redis rule store",
		usage:   rulesUsage,
		run:     runRules,
	}
}

type rulesFlags struct {
	connFlags
	available, file               string
	asJSON, dryRun, skipAvailable bool
	deleteMode                    bool // delete --mode: the published mode
	grace                         string
	scanKeys                      int
	timeout                       time.Duration
}

// rulesEnv is what a rules subcommand works with.
type rulesEnv struct {
	out   output
	f     rulesFlags
	avail *config.AvailableLimiters // nil without --available-limiters
	grace time.Duration
	store *rulestore.Store
	usage string // the help text, naming the subcommand
}

func runRules(ctx context.Context, out output, args []string) int {
	if len(args) == 0 {
		return usageError(out, rulesUsage, "rules needs a command: list, show, publish, delete, remove or gc")
	}
	sub, args := args[0], args[1:]
	if sub == "-h" || sub == "-help" || sub == "--help" || sub == "help" {
		fmt.Fprintln(out.stdout, rulesUsage)
		return exitOK
	}
	run, nargs := map[string]func(context.Context, *rulesEnv, []string) int{
		"list": rulesList, "show": rulesShow, "publish": rulesPublish, "delete": rulesDelete, "remove": rulesRemove, "gc": rulesGC,
	}[sub], map[string][2]int{ // min, max positional arguments (-1: any)
		"list": {0, 0}, "show": {1, 1}, "publish": {0, 0}, "delete": {2, -1}, "remove": {1, 1}, "gc": {0, 0},
	}[sub]
	if run == nil {
		return usageError(out, rulesUsage, "unknown rules command %q%s", sub, suggest.Hint(sub, rulesCommands))
	}
	usage := strings.Replace(rulesUsage, "rules COMMAND", "rules "+sub, 1) // names the subcommand in hints
	fs := flag.NewFlagSet("rules "+sub, flag.ContinueOnError)
	var f rulesFlags
	f.connFlags.register(fs)
	fs.Func("prefix", "", func(v string) error { // the former name of --rules-prefix
		if fs.Lookup("rules-prefix").Value.String() == "" {
			f.rulesPrefix = v
		}
		return nil
	})
	fs.StringVar(&f.available, "available-limiters", "", "")
	fs.BoolVar(&f.skipAvailable, "skip-available-check", false, "")
	fs.BoolVar(&f.dryRun, "dry-run", false, "")
	fs.StringVar(&f.file, "file", "", "")
	fs.StringVar(&f.grace, "grace", "7d", "")
	fs.IntVar(&f.scanKeys, "scan-keys", rulestore.DefaultGCScanKeys, "")
	fs.BoolVar(&f.asJSON, "json", false, "")
	fs.BoolVar(&f.deleteMode, "mode", false, "")
	fs.DurationVar(&f.timeout, "timeout", 10*time.Second, "")
	pos, ok, code := parseArgs(fs, usage, args, out)
	if !ok {
		return code
	}
	f.resolve()
	if f.deleteMode && sub == "delete" {
		nargs[0] = 1 // the mode alone, or with rules
	}
	if err := f.check(); err != nil {
		return usageError(out, usage, "rules %s: %v", sub, err)
	}
	switch {
	case f.dryRun && (sub == "list" || sub == "show"):
		return usageError(out, usage, "rules %s only reads: --dry-run is for publish, delete, remove and gc", sub)
	case f.asJSON && sub != "list" && sub != "show": // a script would get text where it asked for JSON
		return usageError(out, usage, "rules %s prints text: --json is for list and show", sub)
	case f.deleteMode && sub != "delete":
		return usageError(out, usage, "rules %s: --mode is for delete (the published mode; publish sets one from --file)", sub)
	case len(pos) < nargs[0] || (nargs[1] >= 0 && len(pos) > nargs[1]):
		return usageError(out, usage, "rules %s: wrong arguments %q", sub, pos)
	case nargs[0] > 0 && !rulecheck.ValidName(pos[0]): // show, delete, remove: no such limiter can have a document
		return usageError(out, usage, "rules %s: %v", sub, rulecheck.NameError("limiter", pos[0]))
	case sub == "delete" && invalidName(pos[1:]) >= 0: // no such rule can be published
		return usageError(out, usage, "rules %s: %v", sub, rulecheck.NameError("rule", pos[1+invalidName(pos[1:])]))
	case f.scanKeys < 1 || f.scanKeys > rulestore.MaxGCScanKeys:
		return usageError(out, usage, "--scan-keys %d: want 1 to %d", f.scanKeys, rulestore.MaxGCScanKeys)
	case checkTimeout(f.timeout) != nil:
		return usageError(out, usage, "%v", checkTimeout(f.timeout))
	}
	env := &rulesEnv{out: out, f: f, usage: usage}
	var err error
	if env.grace, err = parseDays(f.grace); err != nil {
		return usageError(out, usage, "--grace: %v", err)
	}
	if f.available != "" {
		if env.avail, err = loadAvailable(f.available); err != nil {
			return report(out.stderr, "rules", err)
		}
	}
	client, err := redisClient(f.redisURL, f.cluster, f.timeout)
	if err != nil {
		return usageError(out, usage, "--redis: %v", err)
	}
	defer client.Close()
	env.store, err = rulestore.New(client, rulestore.Options{Prefix: f.rulesPrefix, Available: env.avail, GCGrace: env.grace, GCScanKeys: f.scanKeys})
	if err != nil {
		return usageError(out, usage, "%v", err)
	}
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	return run(ctx, env, pos)
}

// maxDays is the most days parseDays takes: the longest time.Duration.
const maxDays = math.MaxInt64 / int64(24*time.Hour)

// parseDays reads a Go duration, or a whole number of days such as "7d". The
// days are bounded: past maxDays they would wrap around to a short or
// negative grace (213504d was 25 minutes), deleting orphans at once.
func parseDays(s string) (time.Duration, error) {
	if n, ok := strings.CutSuffix(s, "d"); ok {
		d, err := strconv.ParseInt(n, 10, 64)
		switch {
		case d > maxDays: // ParseInt saturates a number out of its range
			return 0, fmt.Errorf("%q is more than %dd, the longest duration", s, maxDays)
		case err != nil || d <= 0:
			return 0, fmt.Errorf("%q is not a positive number of days", s)
		}
		return time.Duration(d) * 24 * time.Hour, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("%q is not a positive duration (e.g. 7d, 36h)", s)
	}
	return d, nil
}

// fail reports an operation's error and returns exitInvalid.
func (e *rulesEnv) fail(err error) int {
	var ve *config.ValidationError
	// The problems of a stored document are positions in it, not in a file
	// of the command line: the error names its key first.
	if errors.As(err, &ve) && !errors.Is(err, rulestore.ErrInvalidDocument) {
		return report(e.out.stderr, "rules", err) // one problem per line
	}
	fmt.Fprintf(e.out.stderr, "ratekit rules: %v\n", err)
	return exitInvalid
}

// listEntry is one line of `rules list --json`.
type listEntry struct {
	Limiter     string     `json:"limiter"`
	Key         string     `json:"key"`
	File        *int       `json:"file_rules"` // nil: the tier is absent
	Published   *int       `json:"published_rules"`
	Default     *int       `json:"default_rules"`
	OrphanSince *time.Time `json:"orphan_since,omitempty"`
	Error       string     `json:"error,omitempty"`
	// NotRead is set when the document was left unread: the list had
	// received rulestore.MaxReadBytes of documents before it.
	NotRead bool `json:"not_read,omitempty"`
	// NoDocument is set when the index names the limiter but its document
	// is gone (deleted past the store): nothing invalid, the services run
	// on their own tiers.
	NoDocument bool `json:"no_document,omitempty"`
}

func rulesList(ctx context.Context, e *rulesEnv, _ []string) int {
	entries, err := e.store.List(ctx)
	if err != nil {
		return e.fail(err)
	}
	// A revision counter that cannot be read (written by hand: no integer,
	// over its length) is told beside the list, not instead of it: the
	// next write that changes a document starts it again, and until then
	// the documents are what the operator reads the list for.
	var rev *int64
	counter, revErr := e.store.Revision(ctx)
	if revErr == nil {
		rev = &counter
	}
	tierLen := func(l *configv1.RuleList) *int {
		if l == nil {
			return nil
		}
		n := len(l.GetRules())
		return &n
	}
	list := make([]listEntry, len(entries))
	invalid, notRead := 0, 0
	for i, en := range entries {
		le := listEntry{Limiter: en.Limiter, Key: en.Key}
		switch {
		case errors.Is(en.Err, rulestore.ErrNotRead):
			le.Error, le.NotRead = en.Err.Error(), true
			notRead++
		case errors.Is(en.Err, rulestore.ErrNoDocument):
			le.NoDocument = true
		case en.Err != nil:
			le.Error = en.Err.Error()
			invalid++
		default:
			le.File, le.Published, le.Default = tierLen(en.Document.FileRules), tierLen(en.Document.PublishedRules), tierLen(en.Document.DefaultRules)
		}
		if !en.OrphanSince.IsZero() {
			t := en.OrphanSince.UTC()
			le.OrphanSince = &t
		}
		list[i] = le
	}
	if e.f.asJSON {
		writeJSON(e.out.stdout, struct {
			Revision *int64      `json:"revision"` // null: unreadable (stderr says why)
			Limiters []listEntry `json:"limiters"`
		}{rev, list})
	} else {
		tw := tabwriter.NewWriter(e.out.stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "LIMITER\tFILE\tPUBLISHED\tDEFAULT\tNOTE")
		for _, le := range list {
			note := ""
			if le.OrphanSince != nil {
				note = "orphan since " + le.OrphanSince.Format(time.RFC3339) + " (not in available_limiters.yaml)"
			}
			switch {
			case le.NotRead:
				note = fmt.Sprintf("NOT READ: the list reached %d bytes of documents before it (%s reads it)", rulestore.MaxReadBytes, e.command("show", le.Limiter, false))
			case le.NoDocument:
				note = "indexed, document missing: the services run on their own tiers"
			case le.Error != "":
				note = "INVALID: " + strings.ReplaceAll(le.Error, "\n", "; ")
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", le.Limiter, countOrDash(le.File), countOrDash(le.Published), countOrDash(le.Default), note)
		}
		tw.Flush()
		revision := "unreadable"
		if rev != nil {
			revision = strconv.FormatInt(*rev, 10)
		}
		fmt.Fprintf(e.out.stdout, "%s, revision %s\n", count(len(list), "limiter"), revision)
	}
	// A prefix that holds nothing is most often a mistyped --service: the
	// list fails, as a command that finds nothing to act on does, so that
	// a script or a runbook step never reads "0 limiters" as a success.
	if len(list) == 0 {
		fmt.Fprintf(e.out.stderr, "ratekit rules: %s\n", emptyPrefix(e.f.rulesPrefix))
	}
	if invalid > 0 {
		fmt.Fprintf(e.out.stderr, "ratekit rules: %s cannot be read by the services\n", count(invalid, "document"))
	}
	if notRead > 0 {
		fmt.Fprintf(e.out.stderr, "ratekit rules: the list is partial: %s not read, past the %d bytes of documents one list reads (rulestore.MaxReadBytes, docs/limits.md); %s reads one\n",
			count(notRead, "document"), rulestore.MaxReadBytes, e.command("show", "LIMITER", false))
	}
	if revErr != nil {
		fmt.Fprintf(e.out.stderr, "ratekit rules: %v\n", revErr)
	}
	if invalid > 0 || notRead > 0 || revErr != nil || len(list) == 0 {
		return exitInvalid
	}
	return exitOK
}

// storedLimiters follows a "limiter has no document" message: most often the
// name is misspelt (the limiter the typo meant is named) or --service is
// (the prefix holds no document at all). "" when the store cannot be listed:
// the message stands alone.
func storedLimiters(ctx context.Context, store *rulestore.Store, limiter, prefix string) string {
	list, err := store.List(ctx)
	if err != nil {
		return ""
	}
	if len(list) == 0 {
		return "; " + emptyPrefix(prefix)
	}
	names := make([]string, len(list))
	for i, le := range list {
		names[i] = le.Limiter
	}
	return fmt.Sprintf("; the rule store holds %s%s", config.ListNames(names), suggest.Hint(limiter, names))
}

// emptyPrefix says that a rule store prefix holds no documents, and where
// a service's are: a prefix with nothing in it is most often a --service or
// --rules-prefix that names another prefix than the services'.
func emptyPrefix(prefix string) string {
	return fmt.Sprintf("no rule documents under the prefix %q; a service made from the copier template keeps them under \"ratekit:rules:{SERVICE}:\" (--service SERVICE)", prefix)
}

// neverWritten reports whether nothing was ever written under the rule
// store's prefix: it has no revision counter, which every seed, publish,
// delete and remove advances (Redis that lost its data has none either). An
// error reads as written: the note it decides is advice, and the command's
// own call to Redis reports the failure.
func (e *rulesEnv) neverWritten(ctx context.Context) bool {
	rev, err := e.store.Revision(ctx)
	return err == nil && rev == 0
}

// documents reads the documents of names once, for the notes a publish
// gives beside its write: a limiter with no document maps to nil, and one
// whose document cannot be read is left out (the publish reports it).
func (e *rulesEnv) documents(ctx context.Context, names []string) map[string]*configv1.LimiterRules {
	out := make(map[string]*configv1.LimiterRules, len(names))
	for _, name := range names {
		if doc, err := e.document(ctx, name); err == nil {
			out[name] = doc
		}
	}
	return out
}

// storedDefaults returns the default tier of each document in docs (from
// documents) that holds one its services would load.
func storedDefaults(docs map[string]*configv1.LimiterRules) map[string][]ratelimit.Rule {
	out := make(map[string][]ratelimit.Rule, len(docs))
	for name, doc := range docs {
		if doc.GetDefaultRules() == nil {
			continue
		}
		if rules, err := config.RulesFromProto(doc.GetDefaultRules()); err == nil {
			out[name] = rules
		}
	}
	return out
}

// warnSeededLike warns, on stderr, of each limiter of names (none seeded)
// whose name is a typo of a limiter a service seeded under this prefix: a
// publish to http_requst (--skip-available-check lets it through) lands
// where no service reads, while http_request goes on as before. A store
// that cannot be listed leaves the note alone.
func (e *rulesEnv) warnSeededLike(ctx context.Context, names []string) {
	entries, err := e.store.List(ctx)
	if err != nil {
		return
	}
	var seeded []string
	for _, en := range entries {
		if d := en.Document; d != nil && (d.GetFileRules() != nil || d.GetDefaultRules() != nil) {
			seeded = append(seeded, en.Limiter)
		}
	}
	for _, name := range names {
		if best := suggest.Closest(name, seeded); best != "" {
			fmt.Fprintf(e.out.stderr, "warning: %s: did you mean %s? A service seeded %s under this prefix; none reads %s\n", name, best, best, name)
		}
	}
}

// unseeded returns the limiters among names whose document (in docs, from
// documents) no service seeded: none, or one of published rules alone (a
// seed writes the file and default tiers, empty or not).
func unseeded(docs map[string]*configv1.LimiterRules, names []string) []string {
	var out []string
	for _, name := range names {
		if doc, ok := docs[name]; ok && doc.GetFileRules() == nil && doc.GetDefaultRules() == nil {
			out = append(out, name)
		}
	}
	return out
}

// command is a rules subcommand on limiter under this command's prefix
// (with --available-limiters when the file is what a remove needs): a hint
// copied without the prefix flags would read another prefix, find no
// document there and show or remove nothing.
func (e *rulesEnv) command(sub, limiter string, available bool) string {
	cmd := "ratekit rules " + sub
	switch p := e.f.rulesPrefix; {
	case e.f.service != "" && p == "ratekit:rules:{"+e.f.service+"}:":
		cmd += " --service " + e.f.service
	case p != rulestore.DefaultPrefix:
		cmd += " --rules-prefix '" + strings.ReplaceAll(p, "'", `'\''`) + "'"
	}
	if available {
		cmd += " --available-limiters FILE"
	}
	return cmd + " " + limiter
}

func countOrDash(n *int) string {
	if n == nil {
		return "-"
	}
	return strconv.Itoa(*n)
}

func writeJSON(w io.Writer, v any) {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

func rulesShow(ctx context.Context, e *rulesEnv, args []string) int {
	limiter := args[0]
	key := e.store.Key(limiter)
	raw, present, err := e.store.RawDocument(ctx, limiter)
	switch {
	case errors.Is(err, rulestore.ErrInvalidDocument):
		return e.fail(fmt.Errorf("%w; the services keep their last good rules (%s deletes it)", err, e.command("remove", limiter, false)))
	case err != nil:
		return e.fail(err)
	case !present:
		fmt.Fprintf(e.out.stderr, "ratekit rules: limiter %s has no document (key %s): it runs on the rules compiled into its services%s\n", limiter, key, storedLimiters(ctx, e.store, limiter, e.f.rulesPrefix))
		return exitInvalid
	}
	if e.f.asJSON {
		// The bytes as stored, also of a document no service loads (to
		// repair it), judged as the text is: such a one exits 1.
		fmt.Fprintln(e.out.stdout, raw)
	}
	doc, err := config.UnmarshalLimiterRules([]byte(raw))
	if err != nil {
		fmt.Fprintf(e.out.stderr, "ratekit rules: document %s is invalid (the services keep their last good rules):\n", key)
		return report(e.out.stderr, "rules", err)
	}
	t, err := rulestore.DocumentTiers(doc)
	if err != nil {
		return e.fail(fmt.Errorf("document %s: %w", key, err))
	}
	// As the limiter's replicas read it (and list and remove judge it): a
	// rule on a property no longer declared is refused whole.
	if e.avail != nil && e.avail.Spec(limiter) != nil {
		if err := rulestore.CheckDocument(e.avail, limiter, doc); err != nil {
			return e.fail(fmt.Errorf("%w: %s: %w; the services keep their last good rules (%s deletes it)",
				rulestore.ErrInvalidDocument, key, err, e.command("remove", limiter, true)))
		}
	}
	if e.f.asJSON {
		return exitOK
	}
	w := e.out.stdout
	fmt.Fprintf(w, "limiter %s (key %s)\n", limiter, key)
	if mode, from := rulestore.ModeOf(doc, nil); mode != nil {
		fmt.Fprintf(w, "mode: %s, set by %s_rules (the highest tier that sets one wins)", *mode, from)
		if from == tiers.Published { // it outlives the published rules: say how it goes
			fmt.Fprintf(w, "; %s --mode removes it", e.command("delete", limiter, false))
		}
		fmt.Fprintln(w)
	}
	tiered := t.Rules()
	for _, tier := range []struct {
		name, label string
		list        *configv1.RuleList
	}{
		{tiers.File, "file_rules (rate_limits.yaml)", doc.FileRules},
		{tiers.Published, "published_rules (publish API)", doc.PublishedRules},
		{tiers.Default, "default_rules (application)", doc.DefaultRules},
	} {
		fmt.Fprintf(w, "\n%s: ", tier.label)
		if tier.list == nil {
			fmt.Fprintln(w, "absent (services use their own)")
			continue
		}
		fmt.Fprint(w, count(len(tier.list.GetRules()), "rule"))
		if m := config.ModeWord(tier.list.GetMode()); m != "" {
			fmt.Fprintf(w, ", mode %s", m)
		}
		fmt.Fprintln(w)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		for _, tr := range tiered {
			if tr.Tier != tier.name {
				continue
			}
			note := ""
			if tr.OverriddenBy != "" {
				note = "\toverridden by the " + tr.OverriddenBy + " rule of the same name"
			}
			fmt.Fprintf(tw, "  %s\t%s%s\n", tr.Rule.Name, describeRule(tr.Rule), note)
		}
		tw.Flush()
	}
	fmt.Fprintf(w, "\neffective, in evaluation order: %s\n", count(len(t.Merged()), "rule"))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	n := 0
	for _, tr := range tiered {
		if tr.OverriddenBy == "" {
			n++
			fmt.Fprintf(tw, "  %d.\t%s\t%s\t%s\n", n, tr.Rule.Name, tr.Tier, describeRule(tr.Rule))
		}
	}
	tw.Flush()
	return exitOK
}

// describeRule renders a stored (static) rule on one line.
func describeRule(r ratelimit.Rule) string {
	var b strings.Builder
	b.WriteString(string(r.Action))
	if r.LimitFunc == nil && r.Limit != 0 {
		fmt.Fprintf(&b, " %d per %v", r.Limit, r.Period)
	}
	if r.CountDistinct != "" {
		fmt.Fprintf(&b, " distinct %s", r.CountDistinct)
	}
	if len(r.Characteristics) > 0 {
		fmt.Fprintf(&b, " by %s", strings.Join(r.Characteristics, ","))
	}
	if r.BanFor > 0 {
		fmt.Fprintf(&b, ", ban %v", r.BanFor)
	}
	switch {
	case r.Algorithm == ratelimit.TokenBucket && r.Burst > 0:
		fmt.Fprintf(&b, ", token_bucket burst %d", r.Burst)
	case r.Algorithm != "" && r.Algorithm != ratelimit.FixedWindow:
		fmt.Fprintf(&b, ", %s", r.Algorithm)
	}
	if p, err := config.RuleToProto(r); err == nil {
		b.WriteString(", match " + describeMatch(p))
	}
	return b.String()
}

func rulesPublish(ctx context.Context, e *rulesEnv, _ []string) int {
	if e.f.file == "" {
		return usageError(e.out, e.usage, "rules publish needs --file FILE")
	}
	if e.avail == nil && !e.f.skipAvailable {
		return usageError(e.out, e.usage, "rules publish needs --available-limiters FILE to check the file's limiters and properties against what the services declare (--skip-available-check publishes without that check)")
	}
	data, err := readConfig(e.f.file)
	if err != nil {
		// A file over the bound is an invalid document (FILE:1:1, exit 1),
		// as validate and --available-limiters report it; an unreadable
		// one exits 2.
		return report(e.out.stderr, "rules", err)
	}
	pf, err := config.ParsePublishFile(e.f.file, data, e.avail)
	if err != nil {
		return report(e.out.stderr, "rules", err)
	}
	req := pf.Proto
	warnings, omitted := pf.ExemptionWarnings(e.avail)
	printWarnings(e.out.stderr, warnings, omitted)
	if e.avail == nil { // a dry run says so too: it promises what the write does
		fmt.Fprintln(e.out.stderr, "note: --skip-available-check: checked against the schema only, not against available_limiters.yaml")
	}
	// A limiter with no rule and no mode is not written (an upsert of
	// nothing): a file of only those would be reported as published, and
	// one among others is named, not counted as published.
	var empty []string
	for _, name := range sortedNames(req.GetRateLimits()) {
		if l := req.GetRateLimits()[name]; len(l.GetRules()) == 0 && l.GetMode() == configv1.Mode_MODE_UNSPECIFIED {
			empty = append(empty, name)
		}
	}
	if len(empty) == len(req.GetRateLimits()) {
		fmt.Fprintf(e.out.stderr, "ratekit rules: nothing to publish: %s holds no rule and no mode under rate_limits\n", e.f.file)
		return exitInvalid
	}
	if len(empty) > 0 {
		fmt.Fprintf(e.out.stderr, "note: %s: no rule and no mode in %s, nothing is published for them (a publish adds and replaces rules; ratekit rules delete removes them)\n",
			strings.Join(empty, ", "), e.f.file)
	}
	published := slices.DeleteFunc(sortedNames(req.GetRateLimits()), func(n string) bool { return slices.Contains(empty, n) })
	// Read once: a publish writes the published tier alone, so the file and
	// default tiers read here are those after the write too.
	docs := e.documents(ctx, published)
	if e.avail == nil {
		// No available_limiters.yaml: judge the exemptions by the default
		// tiers the services seeded, so that a rule which would rate-limit
		// health probes is named here too.
		warnings, omitted := pf.StoredExemptionWarnings(storedDefaults(docs))
		printWarnings(e.out.stderr, warnings, omitted)
	}
	if names := unseeded(docs, published); len(names) > 0 {
		// A success that no service may read: an incident rule published
		// under a mistyped or forgotten --service is enforced nowhere.
		fmt.Fprintf(e.out.stderr, "note: no service has seeded %s under the prefix %q (a service seeds its file and default tiers there at start; or Redis lost them since): "+
			"the services read this publish only if their rule store uses this prefix; a service made from the copier template keeps its rules under \"ratekit:rules:{SERVICE}:\" (--service SERVICE)\n",
			strings.Join(names, ", "), e.f.rulesPrefix)
		e.warnSeededLike(ctx, names)
	}
	if e.f.dryRun {
		return e.publishDiff(ctx, req)
	}
	res, err := e.store.Publish(ctx, req)
	// What was published, not only where from: the file may change or go
	// after the write, as the admin page's record names its rule.
	rules, modes := map[string][]string{}, map[string]string{}
	for name, l := range req.GetRateLimits() {
		for _, r := range l.GetRules() {
			rules[name] = append(rules[name], r.GetName())
		}
		if m := config.ModeWord(l.GetMode()); m != "" {
			modes[name] = m
		}
	}
	e.audit(ctx, "publish", err, slog.Any("limiters", slices.Sorted(maps.Keys(req.GetRateLimits()))),
		slog.Any("rules", rules), slog.Any("modes", modes),
		slog.String("file", e.f.file), slog.Any("changed", res.Changed), slog.Int64("revision", res.Revision))
	if err != nil {
		return e.fail(err)
	}
	total := 0
	for _, l := range req.GetRateLimits() {
		total += len(l.GetRules())
	}
	fmt.Fprintf(e.out.stdout, "published %s for %s", count(total, "rule"), count(len(req.GetRateLimits())-len(empty), "limiter"))
	if len(res.Changed) == 0 {
		fmt.Fprintf(e.out.stdout, ": nothing changed, the store already held them (revision %d)\n", res.Revision)
	} else {
		fmt.Fprintf(e.out.stdout, "; changed: %s (revision %d)\n", strings.Join(res.Changed, ", "), res.Revision)
	}
	e.warnFileOutranks(req, docs)
	return exitOK
}

// warnFileOutranks warns, on stderr, of each part of a publish that the
// limiter's file_rules outrank (file over published, docs/design.md#tiers):
// a mode while rate_limits.yaml sets another, and a rule whose name
// rate_limits.yaml holds with other settings. The publish wrote them, but
// the services go on enforcing the file's: an operator who publishes mode
// shadow to stop an incident's blocks would otherwise read a success while
// the limiter keeps blocking. The dry run notes the same (modeDiff,
// tierNote). docs are the documents read before the write (documents),
// whose file tier the publish left as it was; one not read is left unsaid:
// the write succeeded.
func (e *rulesEnv) warnFileOutranks(req *configv1.PublishRulesRequest, docs map[string]*configv1.LimiterRules) {
	for _, lim := range sortedNames(req.GetRateLimits()) {
		list := req.GetRateLimits()[lim]
		file := docs[lim].GetFileRules()
		if file == nil {
			continue
		}
		if m, fm := list.GetMode(), file.GetMode(); m != configv1.Mode_MODE_UNSPECIFIED && fm != configv1.Mode_MODE_UNSPECIFIED && fm != m {
			fmt.Fprintf(e.out.stderr, "warning: %s: not in force: file_rules (rate_limits.yaml) sets mode %s, which outranks the published mode %s; the limiter stays in %s mode until rate_limits.yaml drops its mode\n",
				lim, config.ModeWord(fm), config.ModeWord(m), config.ModeWord(fm))
		}
		for _, r := range list.GetRules() {
			if i := ruleIndex(file, r.GetName()); i >= 0 && !sameRule(file.GetRules()[i], r) {
				fmt.Fprintf(e.out.stderr, "warning: %s/%s: not in force: file_rules (rate_limits.yaml) holds a rule of this name, which outranks the published one and stays in force: %s\n",
					lim, r.GetName(), protoLine(file.GetRules()[i]))
			}
		}
	}
}

// invalidName returns the index of the first of names that is not a valid
// rule name, or -1.
func invalidName(names []string) int {
	return slices.IndexFunc(names, func(n string) bool { return !rulecheck.ValidName(n) })
}

func rulesDelete(ctx context.Context, e *rulesEnv, args []string) int {
	if e.f.dryRun {
		return e.deleteDiff(ctx, args[0], args[1:])
	}
	// A rule named twice is deleted once, and told once, as its dry run
	// tells it.
	var names []string
	for _, n := range args[1:] {
		if !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	if e.f.deleteMode {
		return e.deleteMode(ctx, args[0], names)
	}
	res, err := e.store.Delete(ctx, args[0], names...)
	e.audit(ctx, "delete", err, slog.String("limiter", args[0]), slog.Any("rules", names),
		slog.Bool("changed", len(res.Changed) > 0), slog.Int64("revision", res.Revision))
	if err != nil {
		return e.fail(err)
	}
	fmt.Fprintf(e.out.stdout, "deleted from %s: %s (revision %d)\n", args[0], strings.Join(names, ", "), res.Revision)
	return exitOK
}

// deleteMode is `rules delete LIMITER [RULE...] --mode`: it removes the
// published mode (and the rules named) in one write, and says which mode
// the limiter then runs in.
func (e *rulesEnv) deleteMode(ctx context.Context, limiter string, names []string) int {
	if names == nil {
		names = []string{} // the record's rules: none, not null
	}
	// The mode removed, for the record: read before the write, which is
	// made at that version, so the mode told is the one it removed (""
	// when the document cannot be read, which the delete shrinks all the
	// same).
	var mode string
	var res rulestore.WriteResult
	doc, version, err := e.store.VersionedDocument(ctx, limiter)
	switch {
	case err == nil:
		mode = config.ModeWord(doc.GetPublishedRules().GetMode())
		res, err = e.store.DeleteModeIf(ctx, limiter, version, names...)
	case errors.Is(err, rulestore.ErrInvalidDocument):
		res, err = e.store.DeleteMode(ctx, limiter, names...)
	default:
		return e.fail(err) // nothing was sent to write
	}
	e.audit(ctx, "delete", err, slog.String("limiter", limiter), slog.Any("rules", names), slog.String("mode", mode),
		slog.Bool("changed", len(res.Changed) > 0), slog.Int64("revision", res.Revision))
	if err != nil {
		return e.fail(err)
	}
	what := "the published mode"
	if mode != "" {
		what += " " + mode
	}
	fmt.Fprintf(e.out.stdout, "deleted from %s: %s (revision %d)\n", limiter, strings.Join(append([]string{what}, names...), ", "), res.Revision)
	if doc, err := e.document(ctx, limiter); err == nil {
		fmt.Fprintf(e.out.stdout, "%s now runs in %s\n", limiter, modeWithout(doc))
	}
	return exitOK
}

// modeWithout says which mode a limiter runs in with no published mode:
// the file tier's, else the services' own. doc may be nil (no document).
func modeWithout(doc *configv1.LimiterRules) string {
	if m := config.ModeWord(doc.GetFileRules().GetMode()); m != "" {
		return "mode " + m + ", set by file_rules (rate_limits.yaml)"
	}
	return "the mode its services configure (enforce unless they configure shadow)"
}

// rulesRemove deletes a document no service would load: the one way, with
// delete, to write to it. A valid document or none is refused, so the
// command never reports a removal it did not make.
func rulesRemove(ctx context.Context, e *rulesEnv, args []string) int {
	limiter := args[0]
	doc, version, err := e.store.VersionedDocument(ctx, limiter)
	switch {
	case err == nil && doc == nil:
		return e.fail(fmt.Errorf("nothing removed: limiter %s has no document (key %s)", limiter, e.store.Key(limiter)))
	case err == nil:
		return e.fail(fmt.Errorf("nothing removed: the document of %s is valid; remove its published rules with `ratekit rules delete`", limiter))
	case !errors.Is(err, rulestore.ErrInvalidDocument):
		return e.fail(err)
	}
	if e.f.dryRun {
		fmt.Fprintf(e.out.stdout, "would remove %s (%v); nothing written (--dry-run)\n", e.store.Key(limiter), err)
		return exitOK
	}
	// Only the document judged here: one another writer put there since
	// (valid, or invalid for another reason) is not removed unseen.
	res, rerr := e.store.RemoveIf(ctx, limiter, version)
	e.audit(ctx, "remove", rerr, slog.String("limiter", limiter), slog.String("document_error", err.Error()),
		slog.Bool("changed", len(res.Changed) > 0), slog.Int64("revision", res.Revision))
	if rerr != nil {
		return e.fail(rerr)
	}
	if len(res.Changed) == 0 {
		return e.fail(fmt.Errorf("nothing removed: the document of %s was gone already", limiter))
	}
	fmt.Fprintf(e.out.stdout, "removed %s, which no service would load (%v) (revision %d)\n", e.store.Key(limiter), err, res.Revision)
	return exitOK
}

func rulesGC(ctx context.Context, e *rulesEnv, _ []string) int {
	if e.avail == nil {
		return usageError(e.out, e.usage, "rules gc needs --available-limiters FILE: without the list of limiters nothing is collected")
	}
	if e.f.dryRun {
		return e.gcDiff(ctx)
	}
	rep, err := e.store.GC(ctx, e.avail)
	e.audit(ctx, "gc", err, slog.String("available_limiters", e.f.available), slog.Any("marked", rep.Marked),
		slog.Any("deleted", rep.Deleted), slog.Any("cleared", rep.Cleared), slog.Int64("longer_removed", rep.Longer),
		slog.Any("reindexed", rep.Reindexed), slog.Int64("stale_marks_removed", rep.StaleMarks), slog.String("index_replaced", rep.IndexReplaced), slog.String("marks_replaced", rep.MarksReplaced), slog.Int64("marks_over", rep.MarksOver),
		slog.Any("found", rep.Found), slog.Any("left", rep.Left), slog.Uint64("scan_cursor", rep.ScanCursor))
	if err != nil {
		return e.fail(err)
	}
	w := e.out.stdout
	fmt.Fprintf(w, "gc at %s (Redis time), grace %v\n", rep.Now.UTC().Format(time.RFC3339), e.grace)
	if rep.IndexReplaced != "" {
		fmt.Fprintf(w, "  replaced the index %s, a Redis %s, not a set: %s\n", e.store.Key("@index"), rep.IndexReplaced, indexReplacedThen)
	}
	if rep.MarksReplaced != "" {
		fmt.Fprintf(w, "  replaced the orphan marks %s, which %s: %s\n", e.store.Key("@orphans"), marksWhy(rep), marksReplacedThen)
	}
	line := func(what string, names []string) {
		if len(names) > 0 {
			fmt.Fprintf(w, "  %s: %s\n", what, strings.Join(names, ", "))
		}
	}
	line("marked as orphans", rep.Marked)
	for _, name := range slices.Sorted(maps.Keys(rep.Pending)) {
		since := rep.Pending[name]
		fmt.Fprintf(w, "  orphan %s: since %s, deleted from %s\n", name, since.UTC().Format(time.RFC3339), since.Add(e.grace).UTC().Format(time.RFC3339))
	}
	line("deleted", rep.Deleted)
	line("declared again, mark cleared", rep.Cleared)
	line("indexed again (a document and an orphan mark, unindexed)", rep.Reindexed)
	line("found unindexed by the scan, indexed", rep.Found)
	line(leftWhy, rep.Left)
	if rep.Longer > 0 {
		fmt.Fprintf(w, "  removed %d index member(s) longer than any limiter name, with their documents\n", rep.Longer)
	}
	if rep.StaleMarks > 0 {
		fmt.Fprintf(w, "  removed %s of limiters no longer indexed\n", count(int(rep.StaleMarks), "orphan mark"))
	}
	if len(rep.Marked)+len(rep.Pending)+len(rep.Deleted)+len(rep.Cleared)+len(rep.Reindexed)+len(rep.Found)+len(rep.Left) == 0 &&
		rep.Longer+rep.StaleMarks == 0 && rep.IndexReplaced+rep.MarksReplaced == "" {
		fmt.Fprintln(w, "  no orphans")
		if e.neverWritten(ctx) { // nothing to collect is not the services' store being clean
			fmt.Fprintf(e.out.stderr, "note: %s\n", emptyPrefix(e.f.rulesPrefix))
		}
	}
	fmt.Fprintf(w, "  %s\n", scanDone(rep, false))
	return exitOK
}

// leftWhy says why gc's scan leaves documents unindexed.
const leftWhy = "found unindexed by the scan, left (the index is full, or another rule store's prefix starts with this one's or this one's with its: docs/limits.md)"

// scanDone says how far gc's scan for unindexed documents went, or for a
// dry run would go.
func scanDone(rep rulestore.GCReport, dry bool) string {
	switch {
	case rep.ScanCursor == 0 && dry:
		return "scan for unindexed documents: this gc would end a pass over the keyspace"
	case rep.ScanCursor == 0:
		return "scan for unindexed documents: a pass over the keyspace ended"
	case dry:
		return fmt.Sprintf("scan for unindexed documents: this gc would scan part of the keyspace, the next going on from cursor %d (docs/limits.md)", rep.ScanCursor)
	}
	return fmt.Sprintf("scan for unindexed documents: part of the keyspace scanned, the next gc goes on from cursor %d (docs/limits.md)", rep.ScanCursor)
}

// marksWhy says why a gc replaces the orphan marks.
func marksWhy(rep rulestore.GCReport) string {
	if rep.MarksOver > 0 {
		return fmt.Sprintf("hold %d fields, more than gc keeps (docs/limits.md)", rep.MarksOver)
	}
	return fmt.Sprintf("are a Redis %s, not a hash", rep.MarksReplaced)
}

// What follows a gc's replacing the index or the orphan marks, found to be
// of another Redis type (written by hand or by a foreign tool) or over
// their bound.
const (
	indexReplacedThen = "the limiters written from then on are indexed (each service's next seed indexes its own, gc the orphans it had marked and the documents its scan finds)"
	marksReplacedThen = "each orphan is marked again, its grace starting over"
)
