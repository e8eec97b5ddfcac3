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
	if err != nil {
		return nil, hideURL(err)
	}
	return o, nil
}

// ParseClusterURL is redis.ParseClusterURL
// (redis://[user:password@]host:port?addr=host2:port2&...) with errors that
// never contain the URL, as ParseURL.
func ParseClusterURL(raw string) (*redis.ClusterOptions, error) {
	o, err := redis.ParseClusterURL(raw)
	if err != nil {
		return nil, hideURL(err)
	}
	return o, nil
}

// hideURL rewrites a parse error of net/url, which quotes the whole URL, to
// its cause alone.
func hideURL(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		var esc url.EscapeError
		if errors.As(ue.Err, &esc) {
			// The escape is a piece of the URL, possibly of the password.
			return errors.New("redis URL: invalid %-escape (the URL is not shown: it may hold a password)")
		}
		return fmt.Errorf("redis URL: %w (the URL is not shown: it may hold a password)", ue.Err)
	}
	return fmt.Errorf("redis URL: %w", err)
}
