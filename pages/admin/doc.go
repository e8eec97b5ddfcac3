// Package admin is the admin page of the Redis rule store: an http.Handler
// that lists the limiters and their rule tiers and edits the published tier
// in a browser, through the publish API, never by writing Redis keys itself.
//
//	page, err := admin.New(admin.Options{
//		Store:     store,     // the *rulestore.Store the services read
//		Available: available, // available_limiters.yaml
//		Counters:  redisstore.New(client),
//		Authorize: func(r *http.Request) (string, bool) { u := currentUser(r); return u.Name, u.IsAdmin },
//	})
//	if err != nil {
//		return err
//	}
//	internalMux.Handle("/admin/ratelimit/", page)
//
// What it shows, per limiter: its mode (enforce or shadow) and the tier that
// sets it, the file, published and default tiers (and the
// remote tier a process holds, when Options.Tiers gives one), the effective
// list in evaluation order, which rule replaces which ("published x replaces
// default x"), and every skip rule, marked as the bypass it is.
//
// What it changes: rules of the published tier only (add, edit, delete), and
// its mode, which it deletes (a published mode outlives the published rules;
// rulestore.Store.DeleteModeIf), with a form whose fields follow the schema. The one_of box takes one value
// per line; a value a plain line cannot hold (a line break, blanks at either
// end, the empty string, a leading double quote, another unprintable
// character) is written as a Go string literal ("a\nb"). A rule whose
// description, equality or regex holds a carriage return or a NUL, which no
// text box carries, or whose form would pass MaxBodyBytes, is not offered
// for editing: the page says why, and it can be deleted or changed through
// the publish API. A limiter the store holds
// but available_limiters.yaml no longer declares (an orphan) gets no form:
// its published rules can be deleted and an invalid document removed, as a
// writer always can, but nothing is published to it. A save runs the checks a
// rate_limits.yaml gets (protovalidate, the limiter's available properties,
// the skip-rule guardrail, the merged list) and shows each violation next to
// its field; nothing is written when one fails. A save of an edited rule
// that holds what is stored (opened and saved untouched) writes nothing, so
// the stored bytes keep their spelling, and the page says so. Every form carries the
// version of the limiter's document it was read at, and the write is a
// compare-and-set on it (rulestore.Store.PublishIf): a concurrent change
// fails the save with a plain message and the current rules. A save that
// would take the published tier past its bound (docs/limits.md) is refused
// with 422. A document no service would load is shown with its error and a
// confirmed "remove" (rulestore.Store.RemoveIf), the one way besides deleting
// rules to write to it: a compare-and-set on the version shown, so a
// document another writer put there meanwhile is not removed; a document over the byte bound is never sent to
// the page, only its size. The explain box peeks at the counters for one
// identifier (nothing is counted) and says why each rule that does not
// apply fails to match, in at most 512 characters a rule; "lift
// ban / clear" deletes that identifier's counters and bans after a
// confirmation step. Given a value over 1024 bytes, both reach the
// counters ratekit-envoy keeps for it (its first 991 bytes and a digest
// stand for it there), and the box says which it shows; the counters of a
// descriptor's limit override, which need a SCAN the counters' Store has
// not, are not seen here: ratekit explain and clear find them.
//
// Security: the page is read-only unless the host supplies
// Options.Authorize, which also names who writes for the audit log (one slog
// record "rate_limit_admin_write" per write, with the store revision, where
// it wrote (the document's key; a clear's counter key_prefix) and its
// outcome: "ok", or at WARN the error of a write that failed, prefixed
// "unknown: " when the store did not confirm it: after a timeout or a lost
// connection it may have been applied, and the page says so rather than that
// nothing changed; and a WARN record "rate_limit_admin_refused" per POST
// turned away before it wrote, forged, unauthorized or invalid alike, with
// who, op, limiter, key, the answer's status and its reason). GET
// never changes state; every POST must come from the page's own origin and
// carry the per-browser CSRF token of a SameSite=Strict cookie. The page has
// no script at all, and its Content-Security-Policy allows none; every value
// is HTML-escaped by html/template. Mount it on an internal listener, behind
// the host's authentication. The origin check compares the browser's Origin
// header with the request's Host: a reverse proxy in front must pass the
// Host through unchanged. Against DNS rebinding (a hostile name resolved to
// 127.0.0.1 makes the attacker's page same-origin with the loopback page),
// a page served on a loopback listener answers only to localhost, 127.0.0.1
// and [::1] unless Options.AllowedHosts names others; any other Host gets
// 403 before anything is written (a POST's form is read, within
// MaxBodyBytes, only for its refusal's record).
//
// The audit record of "lift ban / clear" names the identifier (its property
// values), since that is what the action changed.
package admin
