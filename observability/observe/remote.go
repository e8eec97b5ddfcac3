package observe

// RemoteStatus is the state of a per-request rules source: the client of the
// rules service (the remote tier), whose counters cover every limiter it
// serves.
type RemoteStatus struct {
	Service     string `json:"service"`      // the calling service the rules are scoped to
	Entries     int    `json:"entries"`      // answers cached now
	Hits        int64  `json:"hits"`         // checks answered from a fresh cached answer
	Stale       int64  `json:"stale"`        // checks answered from a stale answer while revalidating
	Misses      int64  `json:"misses"`       // checks that made or joined a call
	Calls       int64  `json:"calls"`        // calls to the service
	Failures    int64  `json:"failures"`     // failed calls (errors, timeouts, invalid answers)
	Invalid     int64  `json:"invalid"`      // answers rejected whole by validation
	Skipped     int64  `json:"skipped"`      // checks that made no call, the breaker being open
	BreakerOpen bool   `json:"breaker_open"` // no call is made until the cooldown ends
}

// RemoteSource reports a rules service client's state, for the debug page.
// remoterules.Client implements it.
type RemoteSource interface {
	RemoteStatus() RemoteStatus
}
