// Package redisinfo reads what a Redis server says of its own work in INFO:
// the µs its commands took (commandstats) and the CPU time of its main
// thread, which also counts reading, parsing and answering them.
package redisinfo

import (
	"bufio"
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// CommandUsec sums the usec of every command in INFO commandstats.
func CommandUsec(ctx context.Context, rdb *redis.Client) (float64, error) {
	info, err := rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		return 0, err
	}
	return SumUsec(info)
}

// SumUsec sums the usec fields of the cmdstat lines of an INFO reply.
func SumUsec(info string) (float64, error) {
	total := 0.0
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		_, fields, ok := strings.Cut(sc.Text(), ":")
		if !ok || !strings.HasPrefix(sc.Text(), "cmdstat_") {
			continue
		}
		for _, f := range strings.Split(fields, ",") {
			if v, ok := strings.CutPrefix(f, "usec="); ok {
				us, err := strconv.ParseFloat(v, 64)
				if err != nil {
					return 0, fmt.Errorf("commandstats %q: %w", sc.Text(), err)
				}
				total += us
			}
		}
	}
	return total, sc.Err()
}

// MainThreadCPU returns the user and system CPU seconds of the server's main
// thread so far (INFO cpu, Redis 6.2 and later).
func MainThreadCPU(ctx context.Context, rdb *redis.Client) (float64, error) {
	info, err := rdb.Info(ctx, "cpu").Result()
	if err != nil {
		return 0, err
	}
	total, found := 0.0, 0
	for _, line := range strings.Split(info, "\n") {
		k, v, _ := strings.Cut(strings.TrimSpace(line), ":")
		if k == "used_cpu_user_main_thread" || k == "used_cpu_sys_main_thread" {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return 0, fmt.Errorf("INFO cpu %s: %w", k, err)
			}
			total += f
			found++
		}
	}
	if found != 2 {
		return 0, fmt.Errorf("INFO cpu has no main thread figures (Redis 6.2 or later has)")
	}
	return total, nil
}
