package main

import (
	"context"
	"log/slog"
	"os"
	"os/user"
	"strings"

	"github.com/ratekit/ratekit/controlplane/rulestore"
)

// auditRecord is the message of the audit record every write of the CLI
// logs, as the admin page ("rate_limit_admin_write") and the rules service
// ("rate_limit_rules_write") log theirs: rules publish, delete, remove and gc,
// and clear, each once per write it made or tried (a dry run writes nothing
// and logs nothing).
const auditRecord = "rate_limit_cli_write"

// maxWriterBytes bounds the writer's name taken from RATEKIT_WRITER, and
// ratekit admin's --writer.
const maxWriterBytes = 256

// writer names who writes, for the audit record: $RATEKIT_WRITER (a deploy
// job's name, say), else the OS user at the host.
func writer() string {
	if w := os.Getenv("RATEKIT_WRITER"); w != "" {
		if len(w) > maxWriterBytes {
			// Cut on a character's boundary: half a character would be
			// logged as U+FFFD.
			w = strings.ToValidUTF8(w[:maxWriterBytes], "")
		}
		return w
	}
	name := "unknown"
	if u, err := user.Current(); err == nil {
		name = u.Username
	}
	if h, err := os.Hostname(); err == nil {
		name += "@" + h
	}
	return name
}

// audit logs one write on stderr, as a slog JSON line: who, op, attrs, and
// its outcome (rulestore.Outcome: "ok", or at WARN the error, prefixed
// "unknown: " when the write may have been applied), as the admin page does.
func (o output) audit(ctx context.Context, op string, err error, attrs ...slog.Attr) {
	level, outcome := slog.LevelInfo, rulestore.Outcome(err)
	if err != nil {
		level = slog.LevelWarn
		if op == "clear" { // the counters' store: any error may come after its delete ran
			outcome = "unknown: " + err.Error()
		}
	}
	all := make([]slog.Attr, 0, len(attrs)+3)
	all = append(all, slog.String("who", writer()), slog.String("op", op))
	all = append(all, attrs...)
	all = append(all, slog.String("outcome", outcome))
	slog.New(slog.NewJSONHandler(o.stderr, nil)).LogAttrs(ctx, level, auditRecord, all...)
}

// audit logs a rules subcommand's write, naming the rule store's prefix.
func (e *rulesEnv) audit(ctx context.Context, op string, err error, attrs ...slog.Attr) {
	e.out.audit(ctx, op, err, append([]slog.Attr{slog.String("rules_prefix", e.store.Key(""))}, attrs...)...)
}
