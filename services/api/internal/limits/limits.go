// Package limits enforces a tenant's submission limits: the token bucket in
// Redis (one atomic Lua script, shared by every api replica) and the bound
// on a tenant's live queues (Queues).
//
// Redis keys:
//
//	ferry:ratelimit:<tenant>   hash {tokens, ts}: the tenant's bucket; expires
//	                           once it would be full again.
package limits

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// BucketKey is the Redis key of tenant's token bucket.
func BucketKey(tenant string) string { return "ferry:ratelimit:" + tenant }

// takeScript takes ARGV[3] tokens from the bucket KEYS[1] (refilling
// ARGV[1] per second up to ARGV[2]) all or nothing, with Redis's own clock
// so replicas agree. It returns {1, remaining} or {0, wait in ms}.
var takeScript = redis.NewScript(`
local rate = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local n = tonumber(ARGV[3])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local b = redis.call('HMGET', KEYS[1], 'tokens', 'ts')
local tokens = tonumber(b[1])
local ts = tonumber(b[2])
if tokens == nil or ts == nil then
  tokens = burst
  ts = now
end
if now > ts then
  tokens = math.min(burst, tokens + (now - ts) * rate / 1000)
  ts = now
end
if tokens >= n then
  tokens = tokens - n
  redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'ts', ts)
  redis.call('PEXPIRE', KEYS[1], math.ceil((burst - tokens) * 1000 / rate) + 1000)
  return {1, math.floor(tokens)}
end
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'ts', ts)
redis.call('PEXPIRE', KEYS[1], math.ceil((burst - tokens) * 1000 / rate) + 1000)
return {0, math.ceil((n - tokens) * 1000 / rate)}
`)

// Decision is the answer of Take.
type Decision struct {
	Allowed bool
	// Remaining whole tokens after an allowed take.
	Remaining int
	// RetryAfter is how long until the request's tokens are there, when not
	// allowed.
	RetryAfter time.Duration
}

// Take takes n tokens from tenant's bucket of perSecond refill and burst
// capacity, all or nothing. n must not exceed burst.
func Take(ctx context.Context, rdb *redis.Client, tenant string, perSecond float64, burst, n int) (Decision, error) {
	if perSecond <= 0 || burst < 1 {
		return Decision{Allowed: true}, nil
	}
	res, err := takeScript.Run(ctx, rdb, []string{BucketKey(tenant)}, perSecond, burst, n).Int64Slice()
	if err != nil {
		return Decision{}, fmt.Errorf("limits: rate limit: %w", err)
	}
	if len(res) != 2 {
		return Decision{}, fmt.Errorf("limits: rate limit: unexpected reply %v", res)
	}
	if res[0] == 1 {
		return Decision{Allowed: true, Remaining: int(res[1])}, nil
	}
	wait := time.Duration(max(res[1], 1)) * time.Millisecond
	return Decision{RetryAfter: wait}, nil
}
