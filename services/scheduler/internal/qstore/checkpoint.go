package qstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// Checkpoint returns the checkpoint stamped in Redis (P checkpoint), 0
// when there is none.
func (s *Store) Checkpoint(ctx context.Context) (int64, error) {
	n, err := s.rdb.Get(ctx, s.opts.Prefix+"checkpoint").Int64()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("qstore: checkpoint: %w", err)
	}
	return n, nil
}

// casCheckpoint sets KEYS[1] to ARGV[2] if it holds ARGV[1] (or nothing
// when ARGV[1] is 0), so two replicas stamping at once do not interleave.
var casCheckpoint = redis.NewScript(`
local v = tonumber(redis.call('GET', KEYS[1])) or 0
if v ~= tonumber(ARGV[1]) then return 0 end
redis.call('SET', KEYS[1], ARGV[2])
return 1`)

// AdvanceCheckpoint moves the Redis checkpoint from old to next; false
// when another replica moved it first.
func (s *Store) AdvanceCheckpoint(ctx context.Context, old, next int64) (bool, error) {
	ok, err := casCheckpoint.Run(ctx, s.rdb, []string{s.opts.Prefix + "checkpoint"}, old, next).Int()
	if err != nil {
		return false, fmt.Errorf("qstore: advance checkpoint: %w", err)
	}
	return ok == 1, nil
}

// SetCheckpoint writes the Redis checkpoint (after a rebuild).
func (s *Store) SetCheckpoint(ctx context.Context, n int64) error {
	if err := s.rdb.Set(ctx, s.opts.Prefix+"checkpoint", n, 0).Err(); err != nil {
		return fmt.Errorf("qstore: set checkpoint: %w", err)
	}
	return nil
}

// Reset deletes the whole scheduler state except the rebuild lock, epoch
// first, so every script refuses to run (NOEPOCH) until a rebuild wrote it
// again: a Redis that went back in time is treated as an empty one. Keys
// are found with SCAN, so Redis is never blocked for long.
func (s *Store) Reset(ctx context.Context) error {
	if err := s.rdb.Del(ctx, s.opts.Prefix+"epoch").Err(); err != nil {
		return fmt.Errorf("qstore: reset: %w", err)
	}
	lock := s.opts.Prefix + "rebuild:lock"
	var cursor uint64
	for {
		keys, next, err := s.rdb.Scan(ctx, cursor, s.opts.Prefix+"*", 1000).Result()
		if err != nil {
			return fmt.Errorf("qstore: reset: scan: %w", err)
		}
		del := keys[:0]
		for _, k := range keys {
			if k != lock {
				del = append(del, k)
			}
		}
		if len(del) > 0 {
			if err := s.rdb.Unlink(ctx, del...).Err(); err != nil {
				return fmt.Errorf("qstore: reset: %w", err)
			}
		}
		if cursor = next; cursor == 0 {
			return nil
		}
	}
}
