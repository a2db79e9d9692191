// Package idem is the Redis fast path of Idempotency-Key handling and the
// short-lived cache of just-submitted jobs.
//
// Keys:
//
//	ferry:idem:<tenant>:<key>   "p:<hash>" while the request is in flight,
//	                            "j:<hash>:<job id>" once its job is produced;
//	                            expires after the idempotency TTL.
//	ferry:submitted:<job id>    the job resource answered with 202, for ~2m,
//	                            so a GET right after the submission finds the
//	                            job before the status projection has it.
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
}

// Result of one claim.
type Result struct {
	Outcome Outcome
	JobID   string
}

// Store is the Redis side of idempotency.
type Store struct {
	rdb          *redis.Client
	ttl          time.Duration
	submittedTTL time.Duration
}

// New returns a store keeping keys for ttl and submitted jobs for submittedTTL.
func New(rdb *redis.Client, ttl, submittedTTL time.Duration) *Store {
	return &Store{rdb: rdb, ttl: ttl, submittedTTL: submittedTTL}
}

// Key is the Redis key of an idempotency key of tenant.
func Key(tenant, key string) string { return "ferry:idem:" + tenant + ":" + key }

// SubmittedKey is the Redis key of the cached resource of a just-submitted job.
func SubmittedKey(jobID string) string { return "ferry:submitted:" + jobID }

// Claim tries to take every key in one round trip (SET NX GET).
func (s *Store) Claim(ctx context.Context, tenant string, claims []Claim) ([]Result, error) {
	if len(claims) == 0 {
		return nil, nil
	}
	cmds := make([]*redis.StatusCmd, len(claims))
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, c := range claims {
			cmds[i] = p.SetArgs(ctx, Key(tenant, c.Key), "p:"+c.Hash, redis.SetArgs{Mode: "NX", TTL: s.ttl, Get: true})
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("idem: claim: %w", err)
	}
	out := make([]Result, len(claims))
	for i, c := range claims {
		prev, err := cmds[i].Result()
		if errors.Is(err, redis.Nil) {
			out[i] = Result{Outcome: Claimed}
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("idem: claim: %w", err)
		}
		out[i] = parse(prev, c.Hash)
	}
	return out, nil
}

func parse(v, hash string) Result {
	if h, ok := strings.CutPrefix(v, "p:"); ok {
		if h == hash {
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

// Complete records, in one round trip, the job of each finished key and
// caches the resources of just-submitted jobs (by job id, JSON).
func (s *Store) Complete(ctx context.Context, tenant string, done []Finished, submitted map[string][]byte) error {
	if len(done) == 0 && len(submitted) == 0 {
		return nil
	}
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, d := range done {
			p.Set(ctx, Key(tenant, d.Key), "j:"+d.Hash+":"+d.JobID, s.ttl)
		}
		for id, b := range submitted {
			p.Set(ctx, SubmittedKey(id), b, s.submittedTTL)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("idem: complete: %w", err)
	}
	return nil
}

// Release frees keys whose requests failed, so a retry can proceed. A key
// is deleted only while it still holds this request's in-flight marker.
func (s *Store) Release(ctx context.Context, tenant string, claims []Claim) error {
	if len(claims) == 0 {
		return nil
	}
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, c := range claims {
			releaseScript.Eval(ctx, p, []string{Key(tenant, c.Key)}, "p:"+c.Hash)
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("idem: release: %w", err)
	}
	return nil
}

var releaseScript = redis.NewScript(`
if redis.call("GET", KEYS[1]) == ARGV[1] then return redis.call("DEL", KEYS[1]) end
return 0`)

// Submitted returns the cached resources of just-submitted jobs, by id.
func (s *Store) Submitted(ctx context.Context, ids ...string) (map[string][]byte, error) {
	out := map[string][]byte{}
	if len(ids) == 0 {
		return out, nil
	}
	keys := make([]string, len(ids))
	for i, id := range ids {
		keys[i] = SubmittedKey(id)
	}
	vals, err := s.rdb.MGet(ctx, keys...).Result()
	if err != nil {
		return nil, fmt.Errorf("idem: submitted: %w", err)
	}
	for i, v := range vals {
		if str, ok := v.(string); ok {
			out[ids[i]] = []byte(str)
		}
	}
	return out, nil
}
