package rulesserver_test

import (
	"fmt"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/ratekit/ratekit/controlplane/remoterules/rulesserver"
	"github.com/ratekit/ratekit/controlplane/remoterules/rulesv1"
)

// The most specific matching selector answers; vary lists every selector
// property, so a client caches one answer per plan and namespace.
func ExampleAnswer() {
	doc := &rulesv1.OverrideDocument{}
	_ = protojson.Unmarshal([]byte(`{
	  "service": "web", "limiter": "rack_request",
	  "default_rules": {"rules": [{"name": "per_ns", "action": "ACTION_LIMIT", "characteristics": ["root_namespace"], "limit": 100, "period_s": 60}]},
	  "overrides": [
	    {"selector": {"plan": "premium"}, "rules": {"rules": [{"name": "per_ns", "action": "ACTION_LIMIT", "characteristics": ["root_namespace"], "limit": 1000, "period_s": 60}]}},
	    {"selector": {"plan": "premium", "root_namespace": "345"}, "rules": {"rules": [{"name": "per_ns", "action": "ACTION_LIMIT", "characteristics": ["root_namespace"], "limit": 5000, "period_s": 60}]}}
	  ]}`), doc)
	for _, id := range []map[string]string{
		{"plan": "premium", "root_namespace": "345"},
		{"plan": "premium", "root_namespace": "7"},
		{"plan": "free", "root_namespace": "345"},
	} {
		resp, matched := rulesserver.Answer(doc, id)
		fmt.Println(id["plan"], id["root_namespace"], resp.GetRules().GetRules()[0].GetLimit(), matched, resp.GetVary())
	}
	// Output:
	// premium 345 5000 true [plan root_namespace]
	// premium 7 1000 true [plan root_namespace]
	// free 345 100 false [plan root_namespace]
}
