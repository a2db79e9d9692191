// Package idem is the Redis fast path of Idempotency-Key handling.
//
// Keys:
//
//	ferry:idem:<tenant>:<key>   "p:<hash>:<job id>" while the request is in
//	                            flight, for the short claim TTL (a lease: a
//	                            request that died holding it blocks retries
//	                            for seconds, not a day);
//	                            "j:<hash>:<job id>" once its job is produced,
//	                            for the idempotency TTL.
//	ferry:idem-intent:<tenant>:<key>
//	                            "<hash>:<job id>": the job id a claim chose,
//	                            kept for the idempotency TTL until the key
//	                            completes. A retry that claims the key after
//	                            the lease ran out reuses that id, so if the
//	                            dead request's produce did reach Kafka the
//	                            second enqueued event is the same job, which
//	                            the scheduler and projections apply once.
//
// Redis is the fast path only: the status projection keeps the key and the
// request hash for the job's lifetime and is consulted when Redis has no
// entry (after a restart or a flush).
package idem

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Outcome of claiming a key.
type Outcome int

const (
	// Claimed: the key was free and now marks this request as in flight.
	Claimed Outcome = iota
	// InFlight: a request with the same body holds the key and has not finished.
	InFlight
	// Reused: the key belongs to a request with another body.
	Reused
	// Done: a request with the same body finished; JobID is its job.
	Done
)

// Claim is one key to claim for a request hash.
type Claim struct {
	Key  string
	Hash string
	// JobID is the id the job gets when this claim is the first; a claim
	// that takes over an expired one gets the earlier claim's id instead
	// (Result.JobID).
	JobID string
}

// Result of one claim.
type Result struct {
	Outcome Outcome
	// JobID is the id to produce the job with (Claimed) or the finished
	// request's job (Done).
	JobID string
}

// Store is the Redis side of idempotency.
type Store struct {
	rdb      *redis.Client
	ttl      time.Duration
	claimTTL time.Duration
}

// New returns a store keeping finished keys for ttl and in-flight claims
// for claimTTL.
func New(rdb *redis.Client, ttl, claimTTL time.Duration) *Store {
	return &Store{rdb: rdb, ttl: ttl, claimTTL: claimTTL}
}

// Key is the Redis key of an idempotency key of tenant.
func Key(tenant, key string) string { return "ferry:idem:" + tenant + ":" + key }

// IntentKey is the Redis key holding the job id a claim of key chose.
func IntentKey(tenant, key string) string { return "ferry:idem-intent:" + tenant + ":" + key }

// claimScript takes KEYS[1] (the key) when free, for ARGV[3] ms, with the
// job id of an earlier claim's intent (KEYS[2]) for the same hash, or
// ARGV[2]. It answers {1, job id} when claimed, {0, value} otherwise; an
// intent of another body answers as that body's claim: its job may exist.
var claimScript = redis.NewScript(`
local prev = redis.call("GET", KEYS[1])
if prev then return {0, prev} end
local id = ARGV[2]
local intent = redis.call("GET", KEYS[2])
if intent then
  local h, i = string.match(intent, "^([^:]*):(.*)$")
  if h ~= ARGV[1] then return {0, "p:" .. (h or "")} end
  id = i
end
redis.call("SET", KEYS[1], "p:" .. ARGV[1] .. ":" .. id, "PX", ARGV[3])
redis.call("SET", KEYS[2], ARGV[1] .. ":" .. id, "PX", ARGV[4])
return {1, id}`)

// Claim tries to take every key in one round trip. A claim is a lease of
// the claim TTL: should the request die before it finishes, a retry takes
// the key over once the lease runs out, with the same job id.
func (s *Store) Claim(ctx context.Context, tenant string, claims []Claim) ([]Result, error) {
	if len(claims) == 0 {
		return nil, nil
	}
	cmds := make([]*redis.Cmd, len(claims))
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, c := range claims {
			cmds[i] = claimScript.Eval(ctx, p, []string{Key(tenant, c.Key), IntentKey(tenant, c.Key)},
				c.Hash, c.JobID, s.claimTTL.Milliseconds(), s.ttl.Milliseconds())
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("idem: claim: %w", err)
	}
	out := make([]Result, len(claims))
	for i, c := range claims {
		v, err := cmds[i].Slice()
		if err != nil || len(v) != 2 {
			return nil, fmt.Errorf("idem: claim: unexpected answer %v: %w", v, err)
		}
		val, _ := v[1].(string)
		if n, _ := v[0].(int64); n == 1 {
			out[i] = Result{Outcome: Claimed, JobID: val}
			continue
		}
		out[i] = parse(val, c.Hash)
	}
	return out, nil
}

func parse(v, hash string) Result {
	if rest, ok := strings.CutPrefix(v, "p:"); ok {
		if h, _, _ := strings.Cut(rest, ":"); h == hash {
			return Result{Outcome: InFlight}
		}
		return Result{Outcome: Reused}
	}
	if rest, ok := strings.CutPrefix(v, "j:"); ok {
		h, id, _ := strings.Cut(rest, ":")
		if h == hash {
			return Result{Outcome: Done, JobID: id}
		}
		return Result{Outcome: Reused, JobID: id}
	}
	return Result{Outcome: Reused}
}

// Finished records a key's job.
type Finished struct {
	Key   string
	Hash  string
	JobID string
}

// Complete records, in one round trip, the job of each finished key (for
// the idempotency TTL, replacing the claim and its intent).
func (s *Store) Complete(ctx context.Context, tenant string, done []Finished) error {
	if len(done) == 0 {
		return nil
	}
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, d := range done {
			p.Set(ctx, Key(tenant, d.Key), "j:"+d.Hash+":"+d.JobID, s.ttl)
			p.Del(ctx, IntentKey(tenant, d.Key))
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("idem: complete: %w", err)
	}
	return nil
}

// Release frees keys whose jobs were certainly not produced (refused
// before the produce), so a retry, even with another body, can proceed.
// A key is freed only while it still holds this request's claim.
func (s *Store) Release(ctx context.Context, tenant string, claims []Claim) error {
	return s.free(ctx, tenant, claims, 1)
}

// Abandon ends the claims of keys whose produce failed: it may still have
// reached Kafka, so the intent stays and a retry, which may claim the key at
// once, produces the same job id again.
func (s *Store) Abandon(ctx context.Context, tenant string, claims []Claim) error {
	return s.free(ctx, tenant, claims, 0)
}

func (s *Store) free(ctx context.Context, tenant string, claims []Claim, intentToo int) error {
	if len(claims) == 0 {
		return nil
	}
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, c := range claims {
			releaseScript.Eval(ctx, p, []string{Key(tenant, c.Key), IntentKey(tenant, c.Key)}, "p:"+c.Hash+":"+c.JobID, intentToo)
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("idem: release: %w", err)
	}
	return nil
}

var releaseScript = redis.NewScript(`
if redis.call("GET", KEYS[1]) ~= ARGV[1] then return 0 end
if ARGV[2] == "1" then redis.call("DEL", KEYS[2]) end
return redis.call("DEL", KEYS[1])`)
