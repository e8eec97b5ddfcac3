package rulesserver

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/ratekit/ratekit/controlplane/config"
	"github.com/ratekit/ratekit/controlplane/remoterules/rulesv1"
)

// ParseOverrideFile reads an apply file (YAML or JSON):
//
//	documents:
//	  - service: web
//	    limiter: rack_request
//	    cache_for_s: 30
//	    default_rules: []
//	    overrides:
//	      - selector: {root_namespace: "345"}
//	        rules:
//	          - name: limit_rack_requests_by_ip   # replaces the file's rule, keeps its counter
//	            action: limit
//	            characteristics: [ip]
//	            limit: 5000
//	            period_s: 60
//
// Rules are written as in rate_limits.yaml. The file is checked whole, with
// errors naming file, line and rule; available, keyed by service, adds the
// cross-document checks for the services it knows.
func ParseOverrideFile(file string, data []byte, available map[string]*config.AvailableLimiters) (*rulesv1.OverrideFile, error) {
	f := &rulesv1.OverrideFile{}
	if err := config.ParseMessage(file, data, f, nil); err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	for i, d := range f.GetDocuments() {
		pair := d.GetService() + "/" + d.GetLimiter()
		if seen[pair] {
			return nil, fmt.Errorf("%s: documents[%d]: %s is given twice", file, i, pair)
		}
		seen[pair] = true
		if err := checkSelectors(d); err != nil {
			return nil, fmt.Errorf("%s: documents[%d] (%s): %w", file, i, pair, err)
		}
		if a := available[d.GetService()]; a != nil {
			err := config.ValidateMessage(d, a)
			if err == nil {
				err = checkSelectorProperties(d, a)
			}
			if err != nil {
				return nil, fmt.Errorf("%s: documents[%d] (%s): %w", file, i, pair, err)
			}
		}
	}
	return f, nil
}

// maxApplyAnswer bounds the answer to one PUT that Apply reads: the stored
// document with its revision, in the server's JSON spacing, so a few bytes
// to a few KiB more than a body of up to MaxDocumentBytes.
const maxApplyAnswer = 2 * MaxDocumentBytes

// Apply PUTs every document of f to the management API at base (for example
// http://rules:8092), in order, and returns the stored documents with their
// revisions. It stops at the first failure, naming the document. An answer
// 200 that is not the document stored (its service and limiter, with a
// revision) is a failure. So is a redirect, never followed: a client
// re-sends a PUT answered 301 or 302 as a GET, whose 200 carries the stored
// document (a change reported applied that was not), and one answered 307
// or 308 to wherever the answer points, with the client's credentials.
func Apply(ctx context.Context, client *http.Client, base string, f *rulesv1.OverrideFile) ([]*rulesv1.OverrideDocument, error) {
	if client == nil {
		client = http.DefaultClient
	}
	noRedirect := *client
	noRedirect.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	client = &noRedirect
	var out []*rulesv1.OverrideDocument
	for _, d := range f.GetDocuments() {
		body, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(d)
		if err != nil {
			return out, fmt.Errorf("apply %s/%s: %w", d.GetService(), d.GetLimiter(), err)
		}
		u := strings.TrimRight(base, "/") + "/v1/overrides/" + url.PathEscape(d.GetService()) + "/" + url.PathEscape(d.GetLimiter())
		req, err := http.NewRequestWithContext(ctx, http.MethodPut, u, bytes.NewReader(body))
		if err != nil {
			return out, fmt.Errorf("apply %s/%s: %w", d.GetService(), d.GetLimiter(), err)
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			return out, fmt.Errorf("apply %s/%s: %w", d.GetService(), d.GetLimiter(), err)
		}
		b, err := io.ReadAll(io.LimitReader(resp.Body, maxApplyAnswer+1))
		_ = resp.Body.Close()
		if err != nil {
			return out, fmt.Errorf("apply %s/%s: read answer: %w", d.GetService(), d.GetLimiter(), err)
		}
		if len(b) > maxApplyAnswer {
			return out, fmt.Errorf("apply %s/%s: %s: the answer is over %d bytes", d.GetService(), d.GetLimiter(), resp.Status, maxApplyAnswer)
		}
		if loc := resp.Header.Get("Location"); loc != "" && resp.StatusCode/100 == 3 {
			return out, fmt.Errorf("apply %s/%s: %s to %.200q: not followed (give the base URL of the server it names)", d.GetService(), d.GetLimiter(), resp.Status, loc)
		}
		if resp.StatusCode != http.StatusOK {
			var e struct{ Error string }
			_ = json.Unmarshal(b, &e)
			return out, fmt.Errorf("apply %s/%s: %s: %s", d.GetService(), d.GetLimiter(), resp.Status, e.Error)
		}
		stored := &rulesv1.OverrideDocument{}
		if err := protojson.Unmarshal(b, stored); err != nil {
			return out, fmt.Errorf("apply %s/%s: decode answer: %w", d.GetService(), d.GetLimiter(), err)
		}
		// The management API answers a stored PUT with that document and
		// its revision. A 200 naming another document, or none ({} decodes
		// as an empty one), is no proof that anything was stored: an
		// endpoint of something else, or a proxy rewriting the path.
		if stored.GetService() != d.GetService() || stored.GetLimiter() != d.GetLimiter() || stored.GetRevision() == "" {
			return out, fmt.Errorf("apply %s/%s: %s, but the answer is not the stored document (it names %.80q/%.80q, revision %.80q): is %.200q the rules service's management API?",
				d.GetService(), d.GetLimiter(), resp.Status, stored.GetService(), stored.GetLimiter(), stored.GetRevision(), base)
		}
		out = append(out, stored)
	}
	return out, nil
}
