// Package redisx opens go-redis clients.
package redisx

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// Open parses url (redis://host:port/db), connects and pings.
func Open(ctx context.Context, url string) (*redis.Client, error) {
	opt, err := redis.ParseURL(url)
	if err != nil {
		return nil, fmt.Errorf("redisx: parse url: %w", err)
	}
	if opt.PoolSize < 64 {
		// Pipelined hot paths and blocking waits share the pool; leave room.
		opt.PoolSize = 64
	}
	cl := redis.NewClient(opt)
	if err := cl.Ping(ctx).Err(); err != nil {
		cl.Close()
		return nil, fmt.Errorf("redisx: ping %s: %w", opt.Addr, err)
	}
	return cl, nil
}
