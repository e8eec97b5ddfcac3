package rulecheck

import "testing"

func TestNameError(t *testing.T) {
	for _, tt := range []struct{ name, want string }{
		{"HTTP_request", `limiter name "HTTP_request" must match ^[a-z0-9_]{1,64}$; did you mean http_request?`},
		{"api-request", `limiter name "api-request" must match ^[a-z0-9_]{1,64}$; did you mean api_request?`},
		{"http request", `limiter name "http request" must match ^[a-z0-9_]{1,64}$`},
		{"", `limiter name "" must match ^[a-z0-9_]{1,64}$`},
		{"Ω", `limiter name "Ω" must match ^[a-z0-9_]{1,64}$`},
	} {
		if got := NameError("limiter", tt.name).Error(); got != tt.want {
			t.Errorf("NameError(%q) = %s, want %s", tt.name, got, tt.want)
		}
	}
}
