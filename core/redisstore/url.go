package redisstore

import (
	"errors"
	"fmt"
	"net/url"

	"github.com/redis/go-redis/v9"
)

// ParseURL is redis.ParseURL (redis://[user:password@]host:port/db?options)
// with errors that never contain the URL: it may hold a password, and start-up
// errors end in logs. Log o.Addr to say which Redis a process uses.
func ParseURL(raw string) (*redis.Options, error) {
	o, err := redis.ParseURL(raw)
	if err == nil {
		return o, nil
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		var esc url.EscapeError
		if errors.As(ue.Err, &esc) {
			// The escape is a piece of the URL, possibly of the password.
			return nil, errors.New("redis URL: invalid %-escape (the URL is not shown: it may hold a password)")
		}
		return nil, fmt.Errorf("redis URL: %w (the URL is not shown: it may hold a password)", ue.Err)
	}
	return nil, fmt.Errorf("redis URL: %w", err)
}
