// Package qstore keeps the scheduler's queue state in Redis. Every mutation
// is one of two Lua scripts, so any number of scheduler replicas may share
// one Redis: apply (lifecycle facts, in batches) and dispatch (one
// scheduling step of a pool). Both are idempotent over at-least-once input,
// and both run as the functions of one Redis functions library (library.go),
// with a third that runs an apply and the steps it wakes in one call
// (ApplyDispatch).
//
// Key layout under the prefix P (default "ferry:sched:"); the scripts build
// key names from the prefix, so the store needs a single (non-cluster) Redis:
//
//	P job:<id>             HASH  state, attempt, tenant, queue, pool, prio, seq, na (not_after ms),
//	                             created, ready (RFC 3339), spec (JobSpec JSON), history (JSON),
//	                             did (current dispatch id), rf (redriven_from), held ("1": the
//	                             attempt may be in its pool's held set); a terminal marker is a
//	                             fresh hash of state and tenant only (a copy of P marker:…)
//	P marker:<state>:<tenant> HASH the terminal marker template (state done, cancelled or dead;
//	                             tenant), refreshed with the terminal TTL by each apply call that
//	                             ends a job: COPY gives a job's key a small listpack hash and the TTL
//	                             in one command
//	P q:<queue>:ready      ZSET  job ids by prio·1e14 + [5e13 +] seq (priority, then FIFO;
//	                             re-queued lost jobs sit in the front band, without the 5e13)
//	P q:<queue>:delayed    ZSET  job ids by due time (ms, rounded up)
//	P pool:<pool>:queues   SET   the queues holding ready or delayed jobs of the pool, and
//	                             those empty for less than the idle time (prune.lua)
//	P pool:<pool>:idle     HASH  queue → ms it was first seen empty by a sweep (prune.lua)
//	P pool:<pool>:inflight ZSET  job ids by lease deadline (ms)
//	P pool:<pool>:held     ZSET  job ids held outside Ferry's workers (async http jobs) by
//	                             lease deadline (ms); they take no worker slot
//	P pool:<pool>:workers  ZSET  worker ids by liveness deadline (ms)
//	P pool:<pool>:slots    HASH  worker id → slots
//	P pool:<pool>:holds    HASH  worker id → dispatches it holds for their not-before (lease-ahead)
//	P pool:<pool>:ahead    ZSET  job ids leased ahead into the holds by not-before (ms), until due
//	P pool:<pool>:outbox   ZSET  expired (not_after) job ids whose dlq record awaits acknowledgement
//	P seq                  STRING FIFO sequence (script calls reserve blocks of it: fair.lua)
//	P epoch                STRING written once the state is complete (at first start or after a
//	                             rebuild); both scripts refuse to run without it (NOEPOCH), so a
//	                             Redis that restarted empty or was flushed is noticed at once
//	P rebuild:lock         STRING held by the one scheduler replica rebuilding the state
//
// The operations of an apply call and the replies of both scripts are
// typed: ops.go (one struct and encoder per op) and reply.go (one decoder
// per reply section). The common transitions of a job without flow-control
// fields take a fast path in the scripts (a few commands per job: the
// budget in docs/performance.md, counted by TestJobLifecycleCost).
//
// Job states: ready, delayed, inflight, failed (awaiting the retry decision;
// replays of the failure re-read it), expiring (dlq pending), and the
// terminal markers done, cancelled and dead, which keep only the state and
// expire after the terminal TTL.
package qstore

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ferryhq/ferry/events/schema"
	"github.com/ferryhq/ferry/platform/config"
)

var (
	//go:embed apply.lua
	applySrc string
	//go:embed dispatch.lua
	dispatchSrc string
	//go:embed applydispatch.lua
	applyDispatchSrc string

	// prelude is what both scripts start with: fair.lua (the fair-share
	// helpers), gates.lua (flow control) and route.lua (type-aware
	// routing, route.go). They run as the functions of one library
	// (library.go).
	prelude = fairSrc + gatesSrc + routeSrc
)

// Options configure a Store.
type Options struct {
	// Prefix of every key. Defaults to "ferry:sched:".
	Prefix string
	// Lease a dispatched job holds, renewed by started and progress. Defaults to 30s.
	Lease time.Duration
	// TerminalTTL is how long done/cancelled/dead markers are kept. Defaults to 7 days.
	TerminalTTL time.Duration
	// OutboxRetry is how long an expired job's dlq record may take before a
	// dispatch step hands it out again. Defaults to 30s.
	OutboxRetry time.Duration
	// MaxOpsPerCall bounds the operations of one script call, so one call
	// never blocks Redis for long; larger batches are pipelined. Defaults to 512.
	MaxOpsPerCall int
	// DefaultEstimate is the slot-time charged at dispatch for a job type
	// whose tenant has no measured run time yet (see fair.go). Defaults to 1s.
	DefaultEstimate time.Duration
}

// Defaults of the options that the scheduler's Config also carries: their
// one home (Lease's is FERRY_SCHEDULER_LEASE in config.Vars).
const (
	DefaultPrefix      = "ferry:sched:"
	DefaultTerminalTTL = 7 * 24 * time.Hour
	DefaultRunEstimate = time.Second
)

// WithDefaults fills unset options.
func (o Options) WithDefaults() Options {
	config.Default(&o.Prefix, DefaultPrefix)
	config.DefaultVar(&o.Lease, "FERRY_SCHEDULER_LEASE")
	config.Default(&o.TerminalTTL, DefaultTerminalTTL)
	config.Default(&o.OutboxRetry, 30*time.Second)
	config.Default(&o.MaxOpsPerCall, 512)
	config.Default(&o.DefaultEstimate, DefaultRunEstimate)
	return o
}

// ErrNoEpoch is returned by Apply and Dispatch when the epoch key is
// missing: Redis lost the queue state (restarted empty or was flushed) and
// it must be rebuilt (see Store.SetEpoch) before anything else is applied.
var ErrNoEpoch = errors.New("qstore: scheduler state lost (no epoch key); rebuild required")

// Store is the Redis queue state. It is safe for concurrent use.
type Store struct {
	rdb  *redis.Client
	opts Options
}

func wrapErr(what string, err error) error {
	if err != nil && strings.HasPrefix(err.Error(), "NOEPOCH") {
		return ErrNoEpoch
	}
	return fmt.Errorf("qstore: %s: %w", what, err)
}

// Epoch returns the epoch key's value, "" when it is missing.
func (s *Store) Epoch(ctx context.Context) (string, error) {
	return s.getString(ctx, "epoch", "")
}

// getString returns the string key name (under the prefix), or missing
// when it does not exist.
func (s *Store) getString(ctx context.Context, name, missing string) (string, error) {
	v, err := s.rdb.Get(ctx, s.opts.Prefix+name).Result()
	if errors.Is(err, redis.Nil) {
		return missing, nil
	}
	if err != nil {
		return "", fmt.Errorf("qstore: read %s: %w", name, err)
	}
	return v, nil
}

// SetEpoch writes the epoch key: the state is complete.
func (s *Store) SetEpoch(ctx context.Context, epoch string) error {
	if err := s.rdb.Set(ctx, s.opts.Prefix+"epoch", epoch, 0).Err(); err != nil {
		return fmt.Errorf("qstore: set epoch: %w", err)
	}
	return nil
}

// ErrLockLost is returned when the rebuild lock is no longer held by its
// owner: it expired, or Redis was flushed (or restarted empty) meanwhile,
// so whatever the rebuild wrote so far may be gone.
var ErrLockLost = errors.New("qstore: rebuild lock lost (expired, or Redis lost its data meanwhile)")

// SetEpochLocked writes the epoch key only while owner still holds the
// rebuild lock, in one script. A flush during a rebuild removes the lock
// with the rest, so a rebuild never marks complete a state that lost part
// of what it wrote (ErrLockLost): it starts again.
func (s *Store) SetEpochLocked(ctx context.Context, owner, epoch string) error {
	ok, err := epochScript.Run(ctx, s.rdb, []string{s.opts.Prefix + "rebuild:lock", s.opts.Prefix + "epoch"}, owner, epoch).Int()
	if err != nil {
		return fmt.Errorf("qstore: set epoch: %w", err)
	}
	if ok != 1 {
		return ErrLockLost
	}
	return nil
}

// RenewLock extends the rebuild lock for ttl only while owner still holds
// it (ErrLockLost otherwise). Unlike TryLock it never takes a lock that is
// gone: a rebuild whose lock vanished with a flush must start again.
func (s *Store) RenewLock(ctx context.Context, owner string, ttl time.Duration) error {
	ok, err := renewScript.Run(ctx, s.rdb, []string{s.opts.Prefix + "rebuild:lock"}, owner, ttl.Milliseconds()).Int()
	if err != nil {
		return fmt.Errorf("qstore: renew rebuild lock: %w", err)
	}
	if ok != 1 {
		return ErrLockLost
	}
	return nil
}

// TryLock takes (or, for its owner, renews) the rebuild lock for ttl.
func (s *Store) TryLock(ctx context.Context, owner string, ttl time.Duration) (bool, error) {
	ok, err := lockScript.Run(ctx, s.rdb, []string{s.opts.Prefix + "rebuild:lock"}, owner, ttl.Milliseconds()).Int()
	if err != nil {
		return false, fmt.Errorf("qstore: rebuild lock: %w", err)
	}
	return ok == 1, nil
}

// Unlock releases the rebuild lock if owner holds it.
func (s *Store) Unlock(ctx context.Context, owner string) error {
	if err := unlockScript.Run(ctx, s.rdb, []string{s.opts.Prefix + "rebuild:lock"}, owner).Err(); err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("qstore: rebuild unlock: %w", err)
	}
	return nil
}

var (
	lockScript = redis.NewScript(`
local v = redis.call('GET', KEYS[1])
if v == false or v == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 1
end
return 0`)
	renewScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0`)
	epochScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('SET', KEYS[2], ARGV[2])
  return 1
end
return 0`)
	unlockScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0`)
)

// New returns a Store over rdb.
func New(rdb *redis.Client, opts Options) *Store {
	return &Store{rdb: rdb, opts: opts.WithDefaults()}
}

// Load loads the functions library of the scripts into Redis, so the
// first calls find it (a call that does not loads it itself), and removes
// the libraries of the scheduler's other versions (library.go).
func (s *Store) Load(ctx context.Context) error {
	if err := loadLibrary(ctx, s.rdb); err != nil {
		return err
	}
	return dropOtherVersions(ctx, s.rdb)
}

// Prefix is the key prefix in use.
func (s *Store) Prefix() string { return s.opts.Prefix }

// msCeil is t in Unix milliseconds, rounded up so a due time is never early.
func msCeil(t time.Time) int64 {
	ns := t.UnixNano()
	ms := ns / 1e6
	if ns%1e6 > 0 {
		ms++
	}
	return ms
}

// Template is what the scheduler knows of one attempt.
type Template struct {
	JobID      string
	DispatchID string
	TenantID   string
	Attempt    int
	Job        schema.JobSpec
	CreatedAt  time.Time
	ReadyAt    time.Time
	LeaseUntil time.Time
	History    []schema.Attempt
	// RedrivenFrom is the dead job the job re-drives, if any.
	RedrivenFrom string
	// TraceParent is the W3C traceparent of the enqueued attempt (dispatched
	// templates only; see Batch.Trace).
	TraceParent string
	// Partition is the dispatch partition a worker handling the job's type
	// owns (dispatched templates only; -1: the job id's hash decides).
	Partition int32
	// NotBefore is the due time of a job leased ahead of it
	// (DispatchParams.Lookahead); zero when it may start at once.
	NotBefore time.Time
}

// ApplyResult is the outcome of Apply.
type ApplyResult struct {
	// Wake names the dispatch loops to run a step: the pools where a job
	// may have become dispatchable or a slot was freed.
	Wake Wake
	// Failed are the failed attempts that need a retry decision.
	Failed []Template
	// Superseded are jobs that completed by another dispatch than the one
	// in flight: that copy (JobID, TenantID, Attempt, DispatchID) should stop.
	Superseded []Template
}

// Apply applies the batch atomically per script call (batches larger than
// MaxOpsPerCall are split, and the calls pipelined in one round trip).
func (s *Store) Apply(ctx context.Context, now time.Time, b *Batch) (ApplyResult, error) {
	return s.apply(ctx, now, b, true)
}

// ApplyRebuild applies b while the epoch key is missing: only the rebuild
// may write into a state that is not complete.
func (s *Store) ApplyRebuild(ctx context.Context, now time.Time, b *Batch) (ApplyResult, error) {
	return s.apply(ctx, now, b, false)
}

func (s *Store) apply(ctx context.Context, now time.Time, b *Batch, check bool) (ApplyResult, error) {
	if b.Len() == 0 {
		return ApplyResult{}, nil
	}
	return s.applyChunks(ctx, b.chunks(s.applyHead(now, check), s.opts.MaxOpsPerCall))
}

// applyChunks runs the apply calls of a batch's chunks (Batch.chunks) and
// merges their replies.
func (s *Store) applyChunks(ctx context.Context, chunks [][]any) (ApplyResult, error) {
	var res ApplyResult
	replies, err := s.runApply(ctx, chunks)
	if err != nil {
		return res, err
	}
	for _, v := range replies {
		if err := decodeApplyReply(v, &res); err != nil {
			return res, err
		}
	}
	return res, nil
}

// applyHead are the arguments every apply call starts with: prefix now_ms
// lease_ms terminal_ttl_s check_epoch.
func (s *Store) applyHead(now time.Time, check bool) []any {
	return []any{s.opts.Prefix, now.UnixMilli(), s.opts.Lease.Milliseconds(), int64(s.opts.TerminalTTL.Seconds()), flag(check)}
}

// runApply runs one apply call per chunk, pipelined in one round trip.
func (s *Store) runApply(ctx context.Context, chunks [][]any) ([][]any, error) {
	var cmds []redis.Cmder
	err := withLibrary(ctx, s.rdb, func() (err error) {
		cmds, err = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, c := range chunks {
				p.FCall(ctx, applyScript.fn, nil, c...)
			}
			return nil
		})
		return err
	})
	if err != nil {
		return nil, wrapErr("apply", err)
	}
	replies := make([][]any, 0, len(cmds))
	for _, c := range cmds {
		v, err := c.(*redis.Cmd).Slice()
		if err != nil {
			return nil, wrapErr("apply", err)
		}
		replies = append(replies, v)
	}
	return replies, nil
}

// DispatchParams say how much one dispatch step may hand out.
type DispatchParams struct {
	Pool string
	Now  time.Time
	// Prefetch is how many dispatches may exceed the live slots.
	Prefetch int
	// MaxBatch bounds the jobs one step hands out.
	MaxBatch int
	// DispatchIDPrefix must be unique per call (a UUIDv7); dispatch ids are
	// "<prefix>-<n>".
	DispatchIDPrefix string
	// Lookahead leases delayed jobs due within it ahead of their due time
	// (Template.NotBefore), so a burst of due jobs is promoted and handed
	// out before the instant rather than after it. Jobs a gate decides on
	// (a concurrency key, a tenant's rate limits or open breakers) wait
	// until due. 0: no job is dispatched before it is due.
	Lookahead time.Duration
	// WorkWindow lets short jobs go further beyond the live slots than
	// Prefetch: a job whose run-time estimate is e may be dispatched while
	// fewer than slots × WorkWindow / e dispatches (at most WorkMax) are
	// beyond the slots, so about WorkWindow of expected work waits per slot
	// however long the jobs are. 0: none beyond the slots + Prefetch.
	WorkWindow time.Duration
	WorkMax    int
}

// DispatchResult is the outcome of one dispatch step.
type DispatchResult struct {
	// Dispatched are the jobs leased in this step; produce their dispatch
	// records, and Release those that could not be produced.
	Dispatched []Template
	// Expired are jobs whose not_after passed; produce their dlq records
	// and AckExpired them.
	Expired []Template
	// NextDue is the earliest due time of a delayed job of the pool, or,
	// with a Lookahead, when it enters the look-ahead (zero if none).
	NextDue time.Time
	// NextLease is the earliest lease deadline in the pool (zero if none).
	NextLease time.Time
	// More is true when the step stopped at MaxBatch with capacity left.
	More bool
	// LeaseExpiries is how many in-flight jobs this step re-queued because
	// their lease expired (worker_lost).
	LeaseExpiries int
}

// Dispatch runs one scheduling step of a pool in one round trip.
func (s *Store) Dispatch(ctx context.Context, p DispatchParams) (DispatchResult, error) {
	v, err := dispatchScript.call(ctx, s.rdb, s.dispatchArgs(p, true)...).Slice()
	if err != nil {
		return DispatchResult{}, wrapErr("dispatch "+p.Pool, err)
	}
	res, err := decodeDispatchReply(v)
	if err != nil {
		return res, fmt.Errorf("qstore: dispatch %s: %w", p.Pool, err)
	}
	return res, nil
}

// dispatchArgs encodes a dispatch step as dispatch.lua reads its ARGV:
// prefix pool now_ms lease_ms prefetch max_batch dispatch_id_prefix ttl_s
// outbox_retry_ms check_epoch default_estimate_ms lookahead_ms work_window_ms
// work_max housekeeping. A loop's step (full) checks the epoch and does the
// pool's housekeeping; a step an apply runs (apply_dispatch) does neither:
// the apply checked the epoch, and the loops' steps keep the housekeeping.
func (s *Store) dispatchArgs(p DispatchParams, full bool) []any {
	return []any{s.opts.Prefix, p.Pool, p.Now.UnixMilli(), s.opts.Lease.Milliseconds(),
		p.Prefetch, p.MaxBatch, p.DispatchIDPrefix, int64(s.opts.TerminalTTL.Seconds()), s.opts.OutboxRetry.Milliseconds(), flag(full),
		s.opts.DefaultEstimate.Milliseconds(), max(p.Lookahead.Milliseconds(), 0),
		max(p.WorkWindow.Milliseconds(), 0), max(p.WorkMax, 0), flag(full)}
}

func flag(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

func str(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case int64:
		return strconv.FormatInt(x, 10)
	}
	return ""
}
