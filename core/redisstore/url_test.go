package redisstore_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/ratekit/ratekit/core/redisstore"
)

// No error of ParseURL shows the password of the URL it refuses.
func TestParseURLHidesPassword(t *testing.T) {
	for _, c := range []struct {
		name, url, want string
	}{
		{"bad port", "redis://:s3cr3t-pw@localhost:port/0", "invalid port"},
		{"bad escape in the password", "redis://user:s3cr3t%zz-pw@localhost:6379/0", "invalid %-escape"},
		{"bad scheme", "http://user:s3cr3t-pw@localhost:6379/0", "invalid URL scheme"},
		{"bad database", "redis://user:s3cr3t-pw@localhost:6379/x", "invalid database number"},
		{"control character", "redis://user:s3cr3t-pw@local\x7fhost:6379/0", "redis URL"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := redisstore.ParseURL(c.url)
			if err == nil {
				t.Fatalf("ParseURL(%q) accepted it", c.url)
			}
			// A cluster URL has no database: that case parses there.
			_, clusterErr := redisstore.ParseClusterURL(c.url)
			for _, err := range []error{err, clusterErr} {
				if err != nil && strings.Contains(err.Error(), "s3cr3t") {
					t.Errorf("error shows the password: %v", err)
				}
			}
			if clusterErr == nil && c.name != "bad database" {
				t.Errorf("ParseClusterURL(%q) accepted it", c.url)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %q lacks %q", err, c.want)
			}
		})
	}
	o, err := redisstore.ParseURL("redis://user:s3cr3t-pw@localhost:6379/2")
	if err != nil || o.Addr != "localhost:6379" || o.Password != "s3cr3t-pw" || o.DB != 2 {
		t.Fatalf("ParseURL of a valid URL: %+v, %v", o, err)
	}
}

// A start-up error names the variable, never the URL with its password.
func ExampleParseURL() {
	_, err := redisstore.ParseURL("redis://:hunter2@localhost:port/0")
	fmt.Println("REDIS_URL:", err)
	// Output: REDIS_URL: redis URL: invalid port ":port" after host (the URL is not shown: it may hold a password)
}
