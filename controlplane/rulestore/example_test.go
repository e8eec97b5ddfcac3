package rulestore_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekit/ratekit/controlplane/config"
	"github.com/ratekit/ratekit/controlplane/rulestore"
	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/redisstore"
	configv1 "github.com/ratekit/ratekit/proto/ratelimit/config/v1"
)

// A service's start-up: its limiters follow the rule store, it seeds its own
// tiers, collects removed limiters' documents and keeps refreshing. (It needs
// a Redis on localhost:6379, so it is not run as a test.)
func Example() {
	ctx := context.Background()
	client := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	defer client.Close()

	available, err := config.LoadAvailableLimiters("config/available_limiters.yaml")
	if err != nil {
		log.Fatal(err) // the application cannot start without its contract
	}
	rateLimits, err := config.LoadRateLimits("config/rate_limits.yaml", available)
	if err != nil {
		log.Printf("rate_limits.yaml rejected, running without it: %v", err)
		rateLimits = nil
	}
	sets, err := rulestore.ConfigTiers(available, rateLimits)
	if err != nil {
		log.Fatal(err)
	}
	store, err := rulestore.New(client, rulestore.Options{Available: available})
	if err != nil {
		log.Fatal(err)
	}
	limiter, err := ratelimit.New(ratelimit.Config{Name: "autocomplete_users", Store: redisstore.New(client)})
	if err != nil {
		log.Fatal(err)
	}
	if err := store.Bind(limiter, sets["autocomplete_users"]); err != nil {
		log.Fatal(err)
	}
	if _, err := store.SeedBound(ctx); err != nil {
		log.Printf("seed: %v", err) // Redis down: the limiters run on their own tiers
	}
	if _, err := store.GC(ctx, available); err != nil {
		log.Printf("gc: %v", err)
	}
	store.Start(ctx) // refreshes every 5s until ctx is done

	limiter.Check(ctx, ratelimit.Identifier{"user": "user:123"})
}

// An admin form saves a limit: publish it. Other rules of the limiter, and
// other limiters, are left as they are.
func ExampleStore_Publish() {
	ctx := context.Background()
	client := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	defer client.Close()
	store, err := rulestore.New(client, rulestore.Options{})
	if err != nil {
		log.Fatal(err)
	}
	rule, err := config.RuleToProto(ratelimit.Rule{
		Name:            "limit_user_autocompletes_by_user", // the default's name: replaces it
		Characteristics: []string{"user"},
		Limit:           25,
		Period:          time.Minute,
		Action:          ratelimit.ActionLimit,
	})
	if err != nil {
		log.Fatal(err)
	}
	res, err := store.Publish(ctx, &configv1.PublishRulesRequest{RateLimits: map[string]*configv1.RuleList{
		"autocomplete_users": {Rules: []*configv1.Rule{rule}},
	}})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("changed:", res.Changed)
}

// The publisher registry: declare once which setting is which rule's limit, then
// publish everything on a schedule (and from the settings' save hook).
func ExamplePublisher() {
	ctx := context.Background()
	client := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	defer client.Close()
	store, err := rulestore.New(client, rulestore.Options{})
	if err != nil {
		log.Fatal(err)
	}
	settings := struct {
		AutocompleteUsersLimit func(context.Context) (int64, error)
	}{
		AutocompleteUsersLimit: func(context.Context) (int64, error) { return 300, nil }, // a database read
	}
	publisher := rulestore.NewPublisher(store, rulestore.PublisherOptions{Interval: time.Minute})
	err = publisher.Register("autocomplete_users", ratelimit.Rule{
		Name:            "limit_user_autocompletes_by_user",
		Characteristics: []string{"user"},
		Period:          time.Minute,
		Action:          ratelimit.ActionLimit,
	}, settings.AutocompleteUsersLimit)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := publisher.PublishAll(ctx); err != nil { // e.g. after the settings were saved
		log.Print(err)
	}
	go publisher.Run(ctx) // the reconciler
}

// The design's layout, labkit:ratelimit:rules:<limiter>, on a standalone Redis.
func ExampleNew_labkitLayout() {
	client := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	defer client.Close()
	store, err := rulestore.New(client, rulestore.Options{Prefix: "labkit:ratelimit:rules:"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(store.Key("autocomplete_users"))
	// Output: labkit:ratelimit:rules:autocomplete_users
}

// What a limiter evaluates from a stored document: the published rule of the
// same name replaces the application default.
func ExampleDocumentTiers() {
	doc, err := config.UnmarshalLimiterRules([]byte(`{"default_rules":{"rules":[{"name":"limit_user_autocompletes_by_user","limit":300,"period_s":60,"action":"limit","characteristics":["user"],"match":{}}]},"published_rules":{"rules":[{"name":"limit_user_autocompletes_by_user","limit":25,"period_s":60,"action":"limit","characteristics":["user"],"match":{}}]}}`))
	if err != nil {
		log.Fatal(err)
	}
	t, err := rulestore.DocumentTiers(doc)
	if err != nil {
		log.Fatal(err)
	}
	for _, r := range t.Merged() {
		n, _ := r.Limit, r.LimitFunc == nil
		d, _ := r.Period, r.PeriodFunc == nil
		fmt.Printf("%s: %s %d per %v by %v\n", r.Name, r.Action, n, d, r.Characteristics)
	}
	// Output:
	// limit_user_autocompletes_by_user: limit 25 per 1m0s by [user]
}

// The tiers a service owns, from its two config files.
func ExampleConfigTiers() {
	available, err := config.ParseAvailableLimiters("available_limiters.yaml", []byte(`available_limiters:
  user_sign_in:
    description: "sign-in"
    available_properties: [ip, username]
    default_rules:
      - {name: by_username, action: limit, characteristics: [username], limit: 5, period_s: 600}
`))
	if err != nil {
		log.Fatal(err)
	}
	rateLimits, err := config.ParseRateLimits("rate_limits.yaml", []byte(`rate_limits:
  user_sign_in:
    - {name: by_ip, action: limit, characteristics: [ip], limit: 50, period_s: 600}
`), available)
	if err != nil {
		log.Fatal(err)
	}
	sets, err := rulestore.ConfigTiers(available, rateLimits)
	if err != nil {
		log.Fatal(err)
	}
	t := sets["user_sign_in"]
	fmt.Println("file:", t.File[0].Name, "defaults:", t.Defaults[0].Name)
	// Output: file: by_ip defaults: by_username
}
