package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/ratekit/ratekit/controlplane/config"
	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/remoteid"
	"github.com/ratekit/ratekit/internal/rulecheck"
	configv1 "github.com/ratekit/ratekit/proto/ratelimit/config/v1"
)

// maxRemoteAnswer bounds the rules service's answer that explain reads.
const maxRemoteAnswer = 1 << 20

// remoteState is what the rules service answered explain.
type remoteState struct {
	URL     string `json:"url"`
	Service string `json:"service"`
	Error   string `json:"error,omitempty"` // the services would run on their local tiers
}

// fetchRemoteRules asks the reference rules service's HTTP endpoint
// (POST /v1/rules, the JSON form of RulesService/GetRules: this module never
// speaks gRPC) which rules a request of service with identifier id gets, and
// checks them as the services' client does: against available when given.
// It sends the identifier as that client does (sendable), so the server
// answers what it answers the services. An error means the services would
// run on their local tiers alone.
func fetchRemoteRules(ctx context.Context, base, service, limiter string, id ratelimit.Identifier, available *config.AvailableLimiters, timeout time.Duration) ([]ratelimit.Rule, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	ident := remoteid.Sendable(id, nil)
	answer, err := askRemote(ctx, base, service, limiter, ident)
	if err == nil && remoteid.Unsent(answer.Vary, id, ident) {
		// As the services' client does: an answer computed without a
		// property it varies by, which a large identifier left out, is
		// asked for again with those properties first.
		answer, err = askRemote(ctx, base, service, limiter, remoteid.Sendable(id, answer.Vary))
	}
	if err != nil {
		return nil, err
	}
	list := &configv1.RuleList{}
	if len(answer.Rules) > 0 {
		if err := protojson.Unmarshal(answer.Rules, list); err != nil {
			return nil, fmt.Errorf("rules service: decode answer's rules: %w", err)
		}
	}
	if err := config.ValidateRuleList(limiter, list, available); err != nil {
		return nil, fmt.Errorf("rules service: invalid answer, rejected whole: %w", err)
	}
	rules, err := config.RulesFromProto(list)
	if err == nil {
		_, err = ratelimit.CompileRules("", rules)
	}
	if err != nil {
		return nil, fmt.Errorf("rules service: invalid answer, rejected whole: %w", err)
	}
	return rules, nil
}

// askRemote makes one POST /v1/rules and returns its checked answer.
func askRemote(ctx context.Context, base, service, limiter string, ident map[string]string) (*remoteAnswer, error) {
	body, err := json.Marshal(map[string]any{"service": service, "limiter": limiter, "identifier": ident})
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(base, "/")+"/v1/rules", bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("rules service %s: not a valid URL", shownURL(base)) // err quotes it
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("rules service: %w", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxRemoteAnswer+1))
	switch {
	case err != nil:
		return nil, fmt.Errorf("rules service: read answer: %w", err)
	case len(b) > maxRemoteAnswer:
		return nil, fmt.Errorf("rules service: answer over %d bytes", maxRemoteAnswer)
	case resp.StatusCode != http.StatusOK:
		return nil, fmt.Errorf("rules service: %s: %s", resp.Status, errorBody(b))
	}
	var answer remoteAnswer
	if err := json.Unmarshal(b, &answer); err != nil {
		return nil, fmt.Errorf("rules service: decode answer: %w", err)
	}
	if err := answer.check(); err != nil {
		return nil, fmt.Errorf("rules service: invalid answer, rejected whole: %w", err)
	}
	return &answer, nil
}

// maxErrorBody bounds what an error answer's body adds to the error, which
// explain prints (in --json too) and clear reports: the body may be as
// long as maxRemoteAnswer.
const maxErrorBody = 512

// errorBody is an error answer's body as its error quotes it: trimmed, at
// most maxErrorBody bytes cut on a character's boundary, the length of a
// longer one said.
func errorBody(b []byte) string {
	b = bytes.TrimSpace(b)
	if len(b) <= maxErrorBody {
		return string(b)
	}
	return fmt.Sprintf("%s... (%d bytes)", strings.ToValidUTF8(string(b[:maxErrorBody]), ""), len(b))
}

// remoteAnswer is the JSON form of GetRulesResponse (proto field names, as
// ratekit-rules serves it).
type remoteAnswer struct {
	Rules       json.RawMessage `json:"rules"`
	CacheForS   uint64          `json:"cache_for_s"`
	StaleForS   uint64          `json:"stale_for_s"`
	Revision    string          `json:"revision"`
	Vary        []string        `json:"vary"`
	NotModified bool            `json:"not_modified"`
}

// Bounds of GetRulesResponse (proto/ratekit/rules/v1/rules.proto), which the
// services' client checks before it uses an answer's rules.
const (
	maxAnswerCacheFor = 86400
	maxAnswerStaleFor = 604800
	maxAnswerRevision = 128
	maxAnswerVary     = 16
)

// check runs on an answer the checks of GetRulesResponse that the services'
// client applies besides its rules': an answer that breaks one is rejected
// whole, and the services run on their local tiers.
func (a *remoteAnswer) check() error {
	switch {
	case a.CacheForS > maxAnswerCacheFor:
		return fmt.Errorf("cache_for_s %d is over %d", a.CacheForS, maxAnswerCacheFor)
	case a.StaleForS > maxAnswerStaleFor:
		return fmt.Errorf("stale_for_s %d is over %d", a.StaleForS, maxAnswerStaleFor)
	case len(a.Revision) > maxAnswerRevision:
		return fmt.Errorf("revision of %d bytes, at most %d", len(a.Revision), maxAnswerRevision)
	case len(a.Vary) > maxAnswerVary:
		return fmt.Errorf("vary lists %d properties, at most %d", len(a.Vary), maxAnswerVary)
	case a.NotModified: // explain holds no answer the service could mean
		return errors.New("not_modified, but no answer is held")
	}
	seen := make(map[string]bool, len(a.Vary))
	for _, v := range a.Vary {
		if !rulecheck.ValidName(v) || seen[v] {
			return fmt.Errorf("vary %q is not a property name (^[a-z0-9_]{1,64}$) listed once", v)
		}
		seen[v] = true
	}
	return nil
}
