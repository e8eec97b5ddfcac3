package main

import (
	"flag"
	"testing"
)

// The prefixes come from the command line, then the environment, each level
// with its service's prefixes under its explicit ones, then the defaults.
func TestConnFlagsResolve(t *testing.T) {
	for _, tt := range []struct {
		name            string
		args            []string
		env             map[string]string
		url, key, rules string
	}{
		{"defaults", nil, nil, "", "ratekit:rl:", "ratekit:rules:{rules}:"},
		{"service flag", []string{"--service", "shop"}, nil, "", "ratekit:shop:rl:", "ratekit:rules:{shop}:"},
		{"service env", nil, map[string]string{envService: "shop", envRedisURL: "redis://e:1"}, "redis://e:1", "ratekit:shop:rl:", "ratekit:rules:{shop}:"},
		{"explicit prefix over the service", []string{"--service", "shop", "--rules-prefix", "x:{y}:"}, nil, "", "ratekit:shop:rl:", "x:{y}:"},
		{"env prefix over the env service", nil, map[string]string{envService: "shop", envKeyPrefix: "k:"}, "", "k:", "ratekit:rules:{shop}:"},
		{"command-line service over env prefixes", []string{"--service", "cli"}, map[string]string{envService: "env", envKeyPrefix: "k:", envRulesPrefix: "r:{r}:"}, "", "ratekit:cli:rl:", "ratekit:rules:{cli}:"},
		{"command-line URL over env", []string{"--redis", "redis://c:1"}, map[string]string{envRedisURL: "redis://e:1"}, "redis://c:1", "ratekit:rl:", "ratekit:rules:{rules}:"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			for _, k := range []string{envRedisURL, envService, envKeyPrefix, envRulesPrefix} {
				t.Setenv(k, tt.env[k])
			}
			fs := flag.NewFlagSet("t", flag.ContinueOnError)
			var c connFlags
			c.register(fs)
			if err := fs.Parse(tt.args); err != nil {
				t.Fatal(err)
			}
			c.resolve()
			if c.redisURL != tt.url || c.keyPrefix != tt.key || c.rulesPrefix != tt.rules {
				t.Fatalf("got url %q key %q rules %q\nwant url %q key %q rules %q", c.redisURL, c.keyPrefix, c.rulesPrefix, tt.url, tt.key, tt.rules)
			}
		})
	}
}
