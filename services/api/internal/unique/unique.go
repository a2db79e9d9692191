// Package unique is the Redis side of unique jobs: one claim per tenant and
// unique key, taken with a compare-and-set so that any number of api
// replicas agree on which job holds a key.
//
// Keys:
//
//	ferry:unique:<tenant>:<key>   "p:<job id>" while the request that claimed
//	                              the key is in flight, for the short claim
//	                              TTL (a lease: a request that dies holding
//	                              it blocks the key for seconds, not for the
//	                              key's whole TTL);
//	                              "j:<job id>" once the job is produced,
//	                              until the key's end (Unique.Until).
//
// A claim names a job, not a state: whether the job still holds the key
// (is still queued, active or not done) is read from the status projection
// when another submission finds the claim, so no service has to clear
// claims as jobs move. Redis is the fast path only: when it has no claim,
// the api asks the projection for a job holding the key.
package unique

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Key is the Redis key of tenant's unique key.
func Key(tenant, key string) string { return "ferry:unique:" + tenant + ":" + key }

// Pending and Produced are the values of a claim of job id.
func Pending(jobID string) string  { return "p:" + jobID }
func Produced(jobID string) string { return "j:" + jobID }

// Claim asks for Key for JobID. Replace is the value of a claim found
// stale (its job no longer holds the key): the claim is taken over only if
// it still holds exactly that value; "" takes only a free key.
type Claim struct {
	Key     string
	JobID   string
	Replace string
}

// Result of a claim.
type Result struct {
	// Claimed: the key is this request's ("p:<JobID>" for the claim TTL).
	Claimed bool
	// Otherwise JobID is the job holding the claim, and InFlight says its
	// request has not produced it yet.
	JobID    string
	InFlight bool
	// Value is the claim's raw value (to Replace it when stale).
	Value string
}

// Store is the Redis side of unique keys.
type Store struct {
	rdb      *redis.Client
	claimTTL time.Duration
}

// New returns a store whose in-flight claims last claimTTL.
func New(rdb *redis.Client, claimTTL time.Duration) *Store {
	return &Store{rdb: rdb, claimTTL: claimTTL}
}

// claimScript sets KEYS[1] to "p:"..ARGV[1] for ARGV[3] ms when it is free
// or holds exactly ARGV[2] (a stale claim; "" never matches a value). It
// answers {1, ""} when claimed, {0, current value} otherwise.
var claimScript = redis.NewScript(`
local cur = redis.call("GET", KEYS[1])
if cur and cur ~= ARGV[2] then return {0, cur} end
redis.call("SET", KEYS[1], "p:" .. ARGV[1], "PX", ARGV[3])
return {1, ""}`)

// Claim tries every claim in one round trip.
func (s *Store) Claim(ctx context.Context, tenant string, claims []Claim) ([]Result, error) {
	if len(claims) == 0 {
		return nil, nil
	}
	cmds := make([]*redis.Cmd, len(claims))
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, c := range claims {
			cmds[i] = claimScript.Eval(ctx, p, []string{Key(tenant, c.Key)}, c.JobID, c.Replace, s.claimTTL.Milliseconds())
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("unique: claim: %w", err)
	}
	out := make([]Result, len(claims))
	for i := range claims {
		v, err := cmds[i].Slice()
		if err != nil || len(v) != 2 {
			return nil, fmt.Errorf("unique: claim: unexpected answer %v: %w", v, err)
		}
		if n, _ := v[0].(int64); n == 1 {
			out[i] = Result{Claimed: true}
			continue
		}
		val, _ := v[1].(string)
		out[i] = Result{Value: val}
		if id, ok := strings.CutPrefix(val, "p:"); ok {
			out[i].JobID, out[i].InFlight = id, true
		} else {
			out[i].JobID = strings.TrimPrefix(val, "j:")
		}
	}
	return out, nil
}

// Swap changes a claim from one value to another (or deletes it, To ""),
// only while it still holds From.
type Swap struct {
	Key, From, To string
	// Until is when the new value expires.
	Until time.Time
}

// swapScript sets KEYS[1] to ARGV[2] for ARGV[3] ms (deletes it when
// ARGV[2] is "") if it holds ARGV[1].
var swapScript = redis.NewScript(`
if redis.call("GET", KEYS[1]) ~= ARGV[1] then return 0 end
if ARGV[2] == "" then return redis.call("DEL", KEYS[1]) end
redis.call("SET", KEYS[1], ARGV[2], "PX", ARGV[3])
return 1`)

// Settle applies swaps in one round trip: a produced job's claim becomes
// "j:<id>" until the key's end, a request that failed before its produce
// frees its key, a claim found to belong to a job the projection knows
// names that job. Swaps whose end has passed delete the claim.
func (s *Store) Settle(ctx context.Context, tenant string, swaps []Swap, now time.Time) error {
	if len(swaps) == 0 {
		return nil
	}
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, sw := range swaps {
			to, ms := sw.To, sw.Until.Sub(now).Milliseconds()
			if ms <= 0 {
				to, ms = "", 0
			}
			swapScript.Eval(ctx, p, []string{Key(tenant, sw.Key)}, sw.From, to, ms)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("unique: settle: %w", err)
	}
	return nil
}
