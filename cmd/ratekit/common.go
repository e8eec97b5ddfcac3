package main

import (
	"cmp"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/ratekit/ratekit/controlplane/config"
	"github.com/ratekit/ratekit/controlplane/rulestore"
	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/rulecheck"
)

// Environment variables read by the commands that reach Redis. A flag on the
// command line beats its variable.
const (
	envRedisURL    = "RATEKIT_REDIS_URL"
	envService     = "RATEKIT_SERVICE"
	envKeyPrefix   = "RATEKIT_KEY_PREFIX"
	envRulesPrefix = "RATEKIT_RULES_PREFIX"
)

// maxTimeout bounds every command's --timeout: a typo such as 1000h would
// hold a command on a hung Redis (or rules service, or Prometheus) for weeks.
// Ten minutes is ample for the slowest of them (a publish of many limiters,
// a gate's Prometheus query).
const maxTimeout = 10 * time.Minute

// checkTimeout is the one check of a --timeout: positive and at most
// maxTimeout. Its error is a usage error.
func checkTimeout(d time.Duration) error {
	switch {
	case d <= 0:
		return fmt.Errorf("--timeout must be positive, got %v", d)
	case d > maxTimeout:
		return fmt.Errorf("--timeout %v is over the bound of %v", d, maxTimeout)
	}
	return nil
}

// connUsage documents the connection flags, the same in every command that
// reaches Redis.
const connUsage = `  --redis URL                 redis://[user:pass@]host:port[/db]
                              (default $` + envRedisURL + `)
  --cluster                   URL is a Redis Cluster URL (redis://host:port?addr=host2:port2...)
  --service NAME              a service made from the copier template: its
                              prefixes, --key-prefix "ratekit:NAME:rl:" and
                              --rules-prefix "ratekit:rules:{NAME}:"
                              (default $` + envService + `)
  --key-prefix PREFIX         the counters' key prefix, as in the service's
                              ratelimit.Config.KeyPrefix (default $` + envKeyPrefix + `,
                              else from --service, else "` + ratelimit.DefaultKeyPrefix + `")
  --rules-prefix PREFIX       the rule store's key prefix, as in the service's
                              rulestore.Options.Prefix (default $` + envRulesPrefix + `,
                              else from --service, else "` + rulestore.DefaultPrefix + `")`

// connFlags are the flags naming a Redis deployment and the service's key
// prefixes.
type connFlags struct {
	redisURL, service, keyPrefix, rulesPrefix string
	cluster                                   bool
}

func (c *connFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&c.redisURL, "redis", "", "")
	fs.BoolVar(&c.cluster, "cluster", false, "")
	fs.StringVar(&c.service, "service", "", "")
	fs.StringVar(&c.keyPrefix, "key-prefix", "", "")
	fs.StringVar(&c.rulesPrefix, "rules-prefix", "", "")
}

// resolve fills what the command line left out: from the environment, then
// from the service name (the copier template's prefixes), then the library's
// defaults. A value given on the command line always wins over the
// environment, and an explicit prefix over one derived from a service name.
func (c *connFlags) resolve() {
	derive := func(service, key, rules string) (string, string) {
		if service == "" {
			return key, rules
		}
		return cmp.Or(key, "ratekit:"+service+":rl:"), cmp.Or(rules, "ratekit:rules:{"+service+"}:")
	}
	// The command line, with its service's prefixes, beats the environment.
	c.keyPrefix, c.rulesPrefix = derive(c.service, c.keyPrefix, c.rulesPrefix)
	c.service = cmp.Or(c.service, os.Getenv(envService))
	c.keyPrefix = cmp.Or(c.keyPrefix, os.Getenv(envKeyPrefix))
	c.rulesPrefix = cmp.Or(c.rulesPrefix, os.Getenv(envRulesPrefix))
	c.keyPrefix, c.rulesPrefix = derive(c.service, c.keyPrefix, c.rulesPrefix)
	c.keyPrefix = cmp.Or(c.keyPrefix, ratelimit.DefaultKeyPrefix)
	c.rulesPrefix = cmp.Or(c.rulesPrefix, rulestore.DefaultPrefix)
	c.redisURL = cmp.Or(c.redisURL, os.Getenv(envRedisURL))
}

// check reports what is wrong with the connection flags after resolve.
func (c *connFlags) check() error {
	switch {
	case c.redisURL == "":
		return fmt.Errorf("no Redis: give --redis URL or set %s", envRedisURL)
	case c.service != "" && !rulecheck.ValidName(c.service):
		return fmt.Errorf("--service %.80q must match ^[a-z0-9_]{1,64}$ (the copier template's service_name)", c.service)
	}
	return nil
}

// parseArgs parses flags wherever they are among the positional arguments
// (Go's flag package stops at the first argument); after "--" every argument
// is positional. It returns false with the exit code when the command should
// stop: 0 after -h, 2 after a usage error.
func parseArgs(fs *flag.FlagSet, usage string, args []string, out output) ([]string, bool, int) {
	var pos []string
	for {
		if ok, code := parseFlags(fs, usage, args, out); !ok {
			return nil, false, code
		}
		if fs.NArg() == 0 {
			return pos, true, exitOK
		}
		rest := fs.Args()
		if i := len(args) - len(rest); i > 0 && args[i-1] == "--" {
			return append(pos, rest...), true, exitOK
		}
		pos, args = append(pos, rest[0]), rest[1:]
	}
}

// readConfig reads a configuration file, bounded like config.Load*; the
// config package's parsers refuse one with merge conflict markers.
func readConfig(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return config.ReadBounded(path, f)
}

// loadAvailable reads available_limiters.yaml as config.LoadAvailableLimiters
// does.
func loadAvailable(path string) (*config.AvailableLimiters, error) {
	data, err := readConfig(path)
	if err != nil {
		return nil, err
	}
	return config.ParseAvailableLimiters(path, data)
}

// loadRateLimits reads rate_limits.yaml as config.LoadRateLimits does.
func loadRateLimits(path string, available *config.AvailableLimiters) (*config.RateLimits, error) {
	data, err := readConfig(path)
	if err != nil {
		return nil, err
	}
	return config.ParseRateLimits(path, data, available)
}
