package ratekitenvoy_test

import (
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/ratekit/ratekit/controlplane/config"
	ratelimit "github.com/ratekit/ratekit/core"
)

// The example Envoy bootstrap is valid YAML wired as the docs say: the
// ratelimit HTTP filter asks the ratekit_envoy cluster (HTTP/2) for the
// "edge" domain, a limiter of the example available_limiters.yaml, and every
// descriptor key its route actions produce is one of that limiter's
// available properties. (No Envoy binary runs here.)
func TestExampleEnvoyConfig(t *testing.T) {
	avail, err := config.LoadAvailableLimiters("example/available_limiters.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := config.LoadRateLimits("example/rate_limits.yaml", avail); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile("example/envoy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var boot map[string]any
	if err := yaml.Unmarshal(data, &boot); err != nil {
		t.Fatalf("envoy.yaml: %v", err)
	}

	var filter map[string]any
	var actions []map[string]any
	walk(boot, func(m map[string]any) {
		if m["name"] == "envoy.filters.http.ratelimit" {
			filter = m
		}
		if a, ok := m["actions"].([]any); ok {
			for _, x := range a {
				actions = append(actions, x.(map[string]any))
			}
		}
	})
	if filter == nil {
		t.Fatal("no envoy.filters.http.ratelimit filter")
	}
	tc := filter["typed_config"].(map[string]any)
	domain, _ := tc["domain"].(string)
	if domain != "edge" || avail.Spec(domain) == nil {
		t.Errorf("filter domain %q, want edge, a limiter of available_limiters.yaml", domain)
	}
	// ratekit-envoy fails open by itself (OK, counted) within its -timeout,
	// ratelimit.DefaultTimeout by default: a shorter filter timeout would
	// end the call first, and a slow Redis would reach failure_mode_deny.
	timeout, _ := tc["timeout"].(string)
	if d, err := time.ParseDuration(timeout); err != nil || d <= ratelimit.DefaultTimeout {
		t.Errorf("filter timeout %q, want more than ratekit-envoy's -timeout (%v)", timeout, ratelimit.DefaultTimeout)
	}
	svc := tc["rate_limit_service"].(map[string]any)
	cluster := dig(svc, "grpc_service", "envoy_grpc", "cluster_name")
	if cluster != "ratekit_envoy" || svc["transport_api_version"] != "V3" {
		t.Errorf("rate_limit_service %v, want V3 on cluster ratekit_envoy", svc)
	}
	var http2 bool
	walk(boot["static_resources"], func(m map[string]any) {
		if m["name"] == cluster && m["typed_extension_protocol_options"] != nil {
			walk(m["typed_extension_protocol_options"], func(o map[string]any) {
				if _, ok := o["http2_protocol_options"]; ok {
					http2 = true
				}
			})
		}
	})
	if !http2 {
		t.Errorf("cluster %s is not defined with HTTP/2 (gRPC needs it)", cluster)
	}

	props := avail.Spec(domain).GetAvailableProperties()
	builtin := map[string]string{"remote_address": "remote_address", "generic_key": "generic_key", "destination_cluster": "destination_cluster", "source_cluster": "source_cluster"}
	if len(actions) == 0 {
		t.Fatal("no rate_limits actions")
	}
	for _, a := range actions {
		for kind, v := range a {
			key := builtin[kind]
			if m, ok := v.(map[string]any); ok {
				if k, ok := m["descriptor_key"].(string); ok {
					key = k
				}
			}
			if key == "" {
				t.Errorf("action %s: the test does not know its descriptor key", kind)
			} else if !slices.Contains(props, key) {
				t.Errorf("action %s sends key %q, not an available property of %s (%v)", kind, key, domain, props)
			}
		}
	}
	// The names the docs promise are the names the example uses.
	doc, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"envoy.filters.http.ratelimit", "ratekit_envoy", "example/envoy.yaml"} {
		if !strings.Contains(string(doc), name) {
			t.Errorf("doc.go does not mention %s", name)
		}
	}
}

func walk(v any, f func(map[string]any)) {
	switch x := v.(type) {
	case map[string]any:
		f(x)
		for _, c := range x {
			walk(c, f)
		}
	case []any:
		for _, c := range x {
			walk(c, f)
		}
	}
}

func dig(m map[string]any, keys ...string) any {
	var v any = m
	for _, k := range keys {
		mm, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = mm[k]
	}
	return v
}
