package admin_test

import (
	"log"
	"net/http"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekit/ratekit/controlplane/config"
	"github.com/ratekit/ratekit/controlplane/rulestore"
	"github.com/ratekit/ratekit/core/redisstore"
	"github.com/ratekit/ratekit/pages/admin"
)

// Mount the admin page on the service's internal listener, behind its own
// authentication; the hook says who may write and names them in the audit
// log.
func Example() {
	available, err := config.LoadAvailableLimiters("config/available_limiters.yaml")
	if err != nil {
		log.Fatal(err)
	}
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer client.Close()
	store, err := rulestore.New(client, rulestore.Options{Available: available})
	if err != nil {
		log.Fatal(err)
	}
	page, err := admin.New(admin.Options{
		Store:     store,
		Available: available,
		Counters:  redisstore.New(client), // enables explain and "lift ban / clear"
		Authorize: func(r *http.Request) (string, bool) {
			user, _, ok := r.BasicAuth() // stands in for the host's own session check
			return user, ok && user == "alice"
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	internal := http.NewServeMux()
	internal.Handle("/admin/ratelimit/", http.StripPrefix("/admin/ratelimit", page))
	// Loopback, with timeouts: a slow client holds no connection for ever.
	srv := &http.Server{Addr: "127.0.0.1:9090", Handler: internal,
		ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 30 * time.Second,
		WriteTimeout: 30 * time.Second, IdleTimeout: 2 * time.Minute}
	log.Fatal(srv.ListenAndServe())
}
