package qstore

import (
	"context"
	_ "embed"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

//go:embed prune.lua
var pruneSrc string

// pruneScript needs fair.lua's helpers.
var pruneScript = redis.NewScript(fairSrc + pruneSrc)

// Prune sweeps pool's queue indexes at now: a queue (of the pool, or of one
// tenant in it) with neither ready nor delayed jobs is marked idle, and one
// still empty idle or more after it was marked leaves the index until its
// next job (see prune.lua). It returns how many pool and tenant queue
// entries left.
func (s *Store) Prune(ctx context.Context, pool string, now time.Time, idle time.Duration) (poolQueues, tenantQueues int, err error) {
	v, err := pruneScript.Run(ctx, s.rdb, nil, s.opts.Prefix, pool, now.UnixMilli(), idle.Milliseconds()).Int64Slice()
	if err != nil {
		return 0, 0, wrapErr("prune "+pool, err)
	}
	if len(v) != 2 {
		return 0, 0, fmt.Errorf("qstore: prune %s: reply %v", pool, v)
	}
	return int(v[0]), int(v[1]), nil
}
