package qstore

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// HoldLeases pushes every lease of pools (of attempts on workers and of
// attempts held outside them) that would end before now+lease out to
// now+lease, and returns how many it moved.
//
// A lease is renewed by the started and progress records the scheduler
// consumes, and a job ends with its completed or failed record. While the
// consumer group rebalances, the partitions that move are read by nobody:
// those records wait in Kafka, and a lease that ended meanwhile would be
// taken for a lost worker — the job would run a second time beside the
// copy that is still running, or has already finished. So the scheduler
// holds the leases whenever partitions are revoked or assigned: a
// rebalance shorter than one lease expires nothing. A worker that really
// died is noticed at most one lease later.
func (s *Store) HoldLeases(ctx context.Context, pools []string, now time.Time, lease time.Duration) (int, error) {
	args := []any{s.opts.Prefix, now.Add(lease).UnixMilli()}
	for _, p := range pools {
		args = append(args, p)
	}
	n, err := holdLeasesScript.Run(ctx, s.rdb, nil, args...).Int()
	if err != nil {
		return 0, fmt.Errorf("qstore: hold leases: %w", err)
	}
	return n, nil
}

// holdLeasesScript: ARGV prefix until_ms pool...; moves each lease scored
// below until_ms to until_ms.
var holdLeasesScript = redis.NewScript(`
local P, untilms, n = ARGV[1], ARGV[2], 0
for i = 3, #ARGV do
  for _, set in ipairs({P .. 'pool:' .. ARGV[i] .. ':inflight', P .. 'pool:' .. ARGV[i] .. ':held'}) do
    local ids = redis.call('ZRANGEBYSCORE', set, '-inf', '(' .. untilms)
    for j = 1, #ids, 500 do
      local za = {}
      for k = j, math.min(j + 499, #ids) do
        za[#za + 1] = untilms
        za[#za + 1] = ids[k]
      end
      redis.call('ZADD', set, 'XX', unpack(za))
    end
    n = n + #ids
  end
end
return n`)
