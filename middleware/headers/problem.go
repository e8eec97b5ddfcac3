package ratelimitheaders

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	ratelimit "github.com/ratekit/ratekit/core"
)

// ProblemTypeQuotaExceeded is the problem type of a 429 (draft-ietf-httpapi-ratelimit-headers §5).
const ProblemTypeQuotaExceeded = "https://iana.org/assignments/http-problem-types#quota-exceeded"

// ContentTypeProblem is the media type of RFC 9457 problem details.
const ContentTypeProblem = "application/problem+json"

// Problem is the RFC 9457 body of a blocked request.
type Problem struct {
	Type             string   `json:"type"`
	Title            string   `json:"title"`
	Status           int      `json:"status"`
	Detail           string   `json:"detail,omitempty"`
	ViolatedPolicies []string `json:"violated-policies"`
}

// NewProblem returns the problem details of a blocked decision. Its detail
// says when to retry, or that the request can never pass (Decision.Never).
func NewProblem(d *Decision, now time.Time) Problem {
	// It walks the blocking evaluations as Blocking does, without building
	// its slice: a 429 costs the names and the detail, nothing more.
	n := 0
	d.eachBlocking(func(*ratelimit.Evaluation) { n++ })
	p := Problem{
		Type:             ProblemTypeQuotaExceeded,
		Title:            "Request cannot be satisfied as assigned quota has been exceeded",
		Status:           http.StatusTooManyRequests,
		ViolatedPolicies: make([]string, 0, n),
	}
	d.eachBlocking(func(e *ratelimit.Evaluation) { p.ViolatedPolicies = append(p.ViolatedPolicies, e.Rule.Name) })
	if d.Never() {
		p.Detail = "Rate limit exceeded by the request's cost alone: it can never pass; do not retry it."
		return p
	}
	var buf [64]byte
	b := append(buf[:0], "Rate limit exceeded; retry after "...)
	b = strconv.AppendInt(b, seconds(d.RetryAfter(now)), 10)
	p.Detail = string(append(b, " seconds."...))
	return p
}

// WriteProblem writes a 429 with p as its problem+json body. Call
// Profile.SetHeaders first.
func WriteProblem(w http.ResponseWriter, p *Problem) {
	body, _ := json.Marshal(p) // cannot fail: strings and ints only
	w.Header().Set("Content-Type", ContentTypeProblem)
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusTooManyRequests)
	_, _ = w.Write(body)
}
