package config_test

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/ratekit/ratekit/controlplane/config"
	configv1 "github.com/ratekit/ratekit/proto/ratelimit/config/v1"
)

const exampleAvailable = `available_limiters:
  user_sign_in:
    description: "Enforced before a session is created for a specific user"
    available_properties: [ip, username]
    default_rules:
      - name: limit_user_sign_ins_by_username
        characteristics: [username]
        limit: 5
        period_s: 600
        action: limit
        ban_for_s: 900
`

func Example() {
	available, err := config.ParseAvailableLimiters("available_limiters.yaml", []byte(exampleAvailable))
	if err != nil {
		fmt.Println(err)
		return
	}
	rateLimits, err := config.ParseRateLimits("rate_limits.yaml", []byte(`rate_limits:
  user_sign_in:
    - name: limit_user_sign_ins_by_username   # replaces the default of the same name
      characteristics: [username]
      limit: 10
      period_s: 600
      action: limit
    - name: skip_internal
      action: skip
      match:
        ip: {one_of: [10.0.0.1, 10.0.0.2]}
`), available)
	if err != nil {
		fmt.Println(err)
		return
	}
	rules, err := config.Rules(available, rateLimits, "user_sign_in")
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, r := range rules {
		limit, _ := r.Limit, r.LimitFunc == nil
		period, _ := r.Period, r.PeriodFunc == nil
		fmt.Println(r.Name, r.Action, limit, period, r.Match)
	}
	for _, s := range rateLimits.SkipRules() {
		fmt.Printf("skip rule at %s:%d: %s/%s\n", s.File, s.Line, s.Limiter, s.Rule.GetName())
	}
	// Output:
	// limit_user_sign_ins_by_username limit 10 10m0s map[]
	// skip_internal skip 0 0s map[ip:{one_of: ["10.0.0.1" "10.0.0.2"]}]
	// skip rule at rate_limits.yaml:8: user_sign_in/skip_internal
}

func ExampleParseRateLimits_errors() {
	available, err := config.ParseAvailableLimiters("available_limiters.yaml", []byte(exampleAvailable))
	if err != nil {
		panic(err)
	}
	_, err = config.ParseRateLimits("rate_limits.yaml", []byte(`rate_limits:
  user_sign_in:
    - name: per_ip
      limit: ten
      period_s: 60
      characteristics: [ip, user]
  sign_up:
    - name: per_ip
      action: skip
`), available)
	fmt.Println(err)
	// Output:
	// rate_limits.yaml:3:7: user_sign_in/per_ip: action is missing: it must be limit, log or skip
	// rate_limits.yaml:4:14: user_sign_in/per_ip: limit must be a whole number, got the value "ten"
	// rate_limits.yaml:6:29: user_sign_in/per_ip: characteristic "user" is not one of the limiter's available_properties (ip, username)
	// rate_limits.yaml:7:3: sign_up: no limiter "sign_up" in available_limiters.yaml (it declares user_sign_in)
}

func ExampleMarshalLimiterRules() {
	rule := &configv1.Rule{
		Name:            "limit_user_autocompletes_by_user",
		Characteristics: []string{"user"},
		Limit:           proto.Uint32(300),
		PeriodS:         proto.Uint32(60),
		Action:          configv1.Action_ACTION_LIMIT,
	}
	b, err := config.MarshalLimiterRules(&configv1.LimiterRules{DefaultRules: &configv1.RuleList{Rules: []*configv1.Rule{rule}}})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(string(b))
	// Output:
	// {"default_rules":{"rules":[{"name":"limit_user_autocompletes_by_user","limit":300,"period_s":60,"action":"limit","characteristics":["user"],"match":{}}]}}
}

// TestDocExamples checks that the worked example in doc.go is valid.
func TestDocExamples(t *testing.T) {
	src, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	blocks := map[string]string{}
	var cur string
	for _, line := range strings.Split(string(src), "\n") {
		text, ok := strings.CutPrefix(line, "//\t")
		if !ok {
			cur = ""
			continue
		}
		if cur == "" && strings.HasSuffix(text, ":") && !strings.HasPrefix(text, " ") {
			cur = strings.TrimSuffix(text, ":")
		}
		if cur != "" {
			blocks[cur] += text + "\n"
		}
	}
	if blocks["available_limiters"] == "" || blocks["rate_limits"] == "" {
		t.Fatalf("doc.go examples not found: %v", blocks)
	}
	available, err := config.ParseAvailableLimiters("doc.go available_limiters", []byte(blocks["available_limiters"]))
	if err != nil {
		t.Fatal(err)
	}
	rl, err := config.ParseRateLimits("doc.go rate_limits", []byte(blocks["rate_limits"]), available)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(rl.SkipRules()); n != 1 {
		t.Fatalf("doc.go example has %d skip rules, want 1", n)
	}
}
