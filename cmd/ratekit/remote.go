package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/ratekit/ratekit/controlplane/config"
	ratelimit "github.com/ratekit/ratekit/core"
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
// An error means the services would run on their local tiers alone.
func fetchRemoteRules(ctx context.Context, base, service, limiter string, id ratelimit.Identifier, available *config.AvailableLimiters, timeout time.Duration) ([]ratelimit.Rule, error) {
	ident := map[string]string{}
	for k := range id {
		ident[k], _ = id.Get(k)
	}
	body, err := json.Marshal(map[string]any{"service": service, "limiter": limiter, "identifier": ident})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
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
		return nil, fmt.Errorf("rules service: %s: %s", resp.Status, bytes.TrimSpace(b))
	}
	var answer struct {
		Rules json.RawMessage `json:"rules"`
	}
	if err := json.Unmarshal(b, &answer); err != nil {
		return nil, fmt.Errorf("rules service: decode answer: %w", err)
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
