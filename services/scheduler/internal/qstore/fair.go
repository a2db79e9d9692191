package qstore

// Fair share across tenants (docs/design.md §4, docs/tenancy.md "Fair share").
//
// Within a pool, tenants are ordered by virtual time: the slot-time
// (worker-milliseconds) they were charged, divided by their weight.
// Each dispatch pick takes the tenant with the least virtual time that has a
// ready job in a queue it has not paused and is under its max_running, pops
// that tenant's best job (priority, then FIFO, across its queues of the
// pool), and charges it estimate/weight, where the estimate is an EWMA of
// the measured run times of the tenant's jobs of that type (until one is
// measured, the EWMA of that type's jobs across tenants). When the job's
// worker reports (completed or failed, with started_at and finished_at), the
// charge is reconciled by (actual - estimate)/weight. A tenant that becomes
// active again starts at no less than the pool's virtual now (the virtual
// time of the latest pick) nor the least virtual time of the tenants
// already active (reconciled since their last pick), so idle time is not
// banked as credit. All of
// it happens inside the apply and dispatch scripts (fair.lua), so any number
// of scheduler replicas agree.
//
// Keys, under the prefix P, in addition to those of qstore.go:
//
//	P pool:<pool>:q:<queue>:t:<tenant>          ZSET ready jobs of a tenant (same scores as q:<queue>:ready)
//	P pool:<pool>:q:<queue>:t:<tenant>:delayed  ZSET delayed jobs of a tenant by due time
//	P pool:<pool>:tq:<tenant>     SET    the tenant's queues with ready or delayed jobs in the pool,
//	                                     and those empty for less than the idle time (prune.lua)
//	P pool:<pool>:tqidle          HASH   "<tenant>\n<queue>" → ms first seen empty by a sweep
//	P pool:<pool>:active          ZSET   tenants with ready work, by virtual time (ms / weight)
//	P pool:<pool>:vt              HASH   tenant → virtual time (kept while inactive)
//	P pool:<pool>:vnow            STRING the pool's virtual now (virtual time of the latest pick)
//	P tenant:<tenant>:running     SET    the tenant's jobs in flight (every pool), for max_running
//	P tenant:<tenant>:cfg         HASH   w (weight), max (max_running; 0 = none), pushed by the scheduler
//	P tenant:<tenant>:paused      SET    the tenant's paused queues
//	P pauses:gen                  STRING bumped by every pause and resume (SetPaused)
//	P est                         HASH   "<tenant>|<type>" → EWMA of measured run time (ms), and
//	                                     "*|<type>" → the same across tenants, charged for a (tenant, type)
//	                                     not measured yet
//
// Job hashes gain: type (job type), est and cw (the estimate charged at
// dispatch and the weight it was divided by, until reconciled).

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed fair.lua
	fairSrc string
	//go:embed queues.lua
	queuesSrc string

	queuesScript = redis.NewScript(queuesSrc)
	resumeScript = redis.NewScript(fairSrc + `
-- resume: ARGV[1] prefix, ARGV[2] tenant, ARGV[3] queue, ARGV[4..] pools.
fair_begin(ARGV[1])
local t, q = ARGV[2], ARGV[3]
redis.call('SREM', FP .. 'tenant:' .. t .. ':paused', q)
redis.call('INCR', FP .. 'pauses:gen')
for a = 4, #ARGV do
  if redis.call('ZCARD', fair_tq(ARGV[a], q, t)) > 0 then fair_activate(ARGV[a], t) end
end
return 1`)
	// setPausedScript: ARGV[1] prefix, ARGV[2] the pause generation the
	// caller read before its snapshot, then tenant, queue pairs.
	setPausedScript = redis.NewScript(`
local P = ARGV[1]
if (redis.call('GET', P .. 'pauses:gen') or '0') ~= ARGV[2] then return 0 end
for i = 3, #ARGV, 2 do redis.call('SADD', P .. 'tenant:' .. ARGV[i] .. ':paused', ARGV[i+1]) end
return 1`)
)

// TenantSettings are what the fair share needs of a tenant.
type TenantSettings struct {
	// Weight is the tenant's share relative to others; < 1 counts as 1.
	Weight int
	// MaxRunning bounds the tenant's jobs in flight at once; 0 is no bound.
	MaxRunning int
}

// SetTenants writes the tenants' settings where the dispatch script reads
// them, in one pipelined round trip.
func (s *Store) SetTenants(ctx context.Context, ts map[string]TenantSettings) error {
	if len(ts) == 0 {
		return nil
	}
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for id, t := range ts {
			p.HSet(ctx, s.opts.Prefix+"tenant:"+id+":cfg", "w", max(t.Weight, 1), "max", max(t.MaxRunning, 0))
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("qstore: set tenants: %w", err)
	}
	return nil
}

// Pause stops dispatching tenant's jobs of queue (they keep being accepted).
func (s *Store) Pause(ctx context.Context, tenant, queue string) error {
	_, err := s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.SAdd(ctx, s.opts.Prefix+"tenant:"+tenant+":paused", queue)
		p.Incr(ctx, s.opts.Prefix+"pauses:gen")
		return nil
	})
	if err != nil {
		return fmt.Errorf("qstore: pause: %w", err)
	}
	return nil
}

// PauseGeneration is a counter every Pause and Resume bumps. A copier of
// pauses from their source of truth reads it before its snapshot and hands
// it to SetPaused.
func (s *Store) PauseGeneration(ctx context.Context) (string, error) {
	return s.getString(ctx, "pauses:gen", "0") // '0': what setPausedScript reads for a missing key
}

// SetPaused makes sure every queue of paused is paused (it resumes none),
// unless a Pause or Resume ran since gen was read: then paused may hold a
// queue resumed after the snapshot was taken, and copying it would pause
// that queue again for good. It reports whether it applied; a skipped copy
// is simply taken again next round.
func (s *Store) SetPaused(ctx context.Context, gen string, paused map[string][]string) (bool, error) {
	if len(paused) == 0 {
		return true, nil
	}
	args := []any{s.opts.Prefix, gen}
	for t, qs := range paused {
		for _, q := range qs {
			args = append(args, t, q)
		}
	}
	n, err := setPausedScript.Run(ctx, s.rdb, nil, args...).Int()
	if err != nil {
		return false, fmt.Errorf("qstore: set paused: %w", err)
	}
	return n == 1, nil
}

// Resume dispatches tenant's jobs of queue again; the tenant's waiting jobs
// compete at no less than the pools' virtual now.
func (s *Store) Resume(ctx context.Context, tenant, queue string, pools []string) error {
	args := []any{s.opts.Prefix, tenant, queue}
	for _, p := range pools {
		args = append(args, p)
	}
	if err := resumeScript.Run(ctx, s.rdb, nil, args...).Err(); err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("qstore: resume: %w", err)
	}
	return nil
}

// QueueState is one queue of one tenant, summed over pools.
type QueueState struct {
	Name string
	// Ready, Delayed and Running count the tenant's jobs of the queue;
	// Running are those dispatched and not yet finished.
	Ready, Delayed, Running int64
	// OldestReady is the ready time of the ready job waiting longest (zero
	// when none is ready).
	OldestReady time.Time
	Paused      bool
	// Unroutable counts the ready jobs parked because no live worker of
	// their pool handles their type (route.go).
	Unroutable int64
}

// Queues returns tenant's queues (those that held jobs, or are paused), by
// name, in one read-only script call.
func (s *Store) Queues(ctx context.Context, tenant string, pools []string) ([]QueueState, error) {
	args := []any{s.opts.Prefix, tenant}
	for _, p := range pools {
		args = append(args, p)
	}
	v, err := queuesScript.Run(ctx, s.rdb, nil, args...).Slice()
	if err != nil {
		return nil, fmt.Errorf("qstore: queues: %w", err)
	}
	var out []QueueState
	for i := 0; i+6 <= len(v); {
		q := QueueState{Name: str(v[i])}
		q.Ready, _ = v[i+1].(int64)
		q.Delayed, _ = v[i+2].(int64)
		q.Running, _ = v[i+3].(int64)
		q.Paused = str(v[i+4]) == "1"
		n, _ := v[i+5].(int64)
		i += 6
		for k := int64(0); k < n && i < len(v); k++ {
			if t, err := time.Parse(time.RFC3339Nano, str(v[i])); err == nil && (q.OldestReady.IsZero() || t.Before(q.OldestReady)) {
				q.OldestReady = t
			}
			i++
		}
		out = append(out, q)
	}
	return out, s.fillUnroutable(ctx, tenant, pools, out)
}

// FairState is a tenant's fair-share state in one pool (for tests and
// diagnostics).
type FairState struct {
	VirtualTime float64 // ms / weight
	Active      bool
	Running     int64
}

// Fair reads tenant's fair-share state in pool.
func (s *Store) Fair(ctx context.Context, pool, tenant string) (FairState, error) {
	var st FairState
	pp := s.opts.Prefix + "pool:" + pool
	vt, err := s.rdb.HGet(ctx, pp+":vt", tenant).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return st, fmt.Errorf("qstore: fair: %w", err)
	}
	st.VirtualTime, _ = strconv.ParseFloat(vt, 64)
	_, err = s.rdb.ZScore(ctx, pp+":active", tenant).Result()
	st.Active = err == nil
	st.Running, _ = s.rdb.SCard(ctx, s.opts.Prefix+"tenant:"+tenant+":running").Result()
	return st, nil
}

// Estimate is the current slot-time estimate of tenant's jobs of type typ
// (zero when none was measured).
func (s *Store) Estimate(ctx context.Context, tenant, typ string) (time.Duration, error) {
	v, err := s.rdb.HGet(ctx, s.opts.Prefix+"est", tenant+"|"+typ).Float64()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("qstore: estimate: %w", err)
	}
	return time.Duration(v * float64(time.Millisecond)), nil
}
