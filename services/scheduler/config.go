package scheduler

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/ferryhq/ferry/events/schema"
	"github.com/ferryhq/ferry/platform/config"
	"github.com/ferryhq/ferry/platform/service"
	"github.com/ferryhq/ferry/services/scheduler/internal/qstore"
	"github.com/ferryhq/ferry/services/scheduler/internal/retry"
)

// Needs are the connections the scheduler uses. Postgres holds the tenants'
// fair-share settings, the paused queues and the API keys of the queue routes.
var Needs = service.Needs{Postgres: true, Redis: true, Kafka: true}

// Config configures the scheduler. A setting read from an environment
// variable (named beside its field) has its default once, in
// platform/config.Vars (documented in docs/configuration.md); WithDefaults
// takes it from there for a Config built in code. Settings no variable
// sets carry their default here.
type Config struct {
	// Lease is how long a dispatched job may go without started/progress
	// before it is re-dispatched (FERRY_SCHEDULER_LEASE).
	Lease time.Duration
	// Prefetch is how many dispatches may always exceed the pool's live
	// slots (FERRY_SCHEDULER_PREFETCH). Negative means none: zero is
	// "unset" and takes the default, so LoadConfig reads
	// FERRY_SCHEDULER_PREFETCH=0 as NoPrefetch.
	Prefetch int
	// PrefetchWindow sizes the rest of the dispatch window to the round
	// trip: on top of Prefetch, a pool may have as many dispatches beyond its
	// slots as it dispatched in the last PrefetchWindow (its recent rate ×
	// PrefetchWindow, at most PrefetchMax). A busy pool of short jobs so
	// keeps enough in flight to cover dispatch → completed → slot freed;
	// a pool of slow jobs (low rate) stays at Prefetch. Short jobs may go
	// further, by their run-time estimate (qstore.DispatchParams.WorkWindow):
	// a burst's rate is only known a round trip later, its jobs' length at
	// once. Prefetched jobs wait at most about PrefetchWindow at the worker
	// (FERRY_SCHEDULER_PREFETCH_WINDOW); negative disables both.
	PrefetchWindow time.Duration
	// PrefetchMax bounds each of the rate-sized and the work-sized parts of
	// the window per pool (FERRY_SCHEDULER_PREFETCH_MAX).
	PrefetchMax int
	// Tick is the fallback period of the dispatch loops
	// (FERRY_SCHEDULER_TICK).
	Tick time.Duration
	// Lookahead leases delayed jobs (run_at, retries) this long before they
	// are due, with their due time as the dispatch's not_before, so a burst
	// due at one instant is promoted and handed out before it and starts on
	// time (FERRY_SCHEDULER_LOOKAHEAD; NoLookahead: only once due).
	Lookahead time.Duration
	// WorkerTTL is how long a worker counts as live after its last
	// announcement. Defaults to 5s.
	WorkerTTL time.Duration
	// TerminalTTL is how long done/cancelled markers are kept in Redis, so
	// late or replayed events of those jobs are ignored. Defaults to 7 days.
	TerminalTTL time.Duration
	// KeyPrefix prefixes every Redis key. Defaults to "ferry:sched:".
	KeyPrefix string
	// Pools are the pools dispatched to. Defaults to schema.Pools.
	Pools []string
	// MaxBatch bounds the jobs one dispatch step hands out. Defaults to 512.
	MaxBatch int
	// MaxPoll bounds the records one consumer batch applies in one Redis
	// script (FERRY_SCHEDULER_MAX_POLL). Redis runs one script at a time,
	// so a batch of thousands held it for tens to hundreds of ms under
	// load, and every dispatch step and submission waited behind it.
	MaxPoll int
	// RetryBase and RetryMax are the backoff min(base·2^(n-1), max) of
	// app_error retries, ±25 % jitter; a job's backoff overrides them
	// (FERRY_SCHEDULER_RETRY_BASE, FERRY_SCHEDULER_RETRY_MAX).
	RetryBase, RetryMax time.Duration
	// RetryTypes overrides RetryBase/RetryMax per job type; a job's own
	// backoff still overrides these. Read from FERRY_SCHEDULER_RETRY_TYPES
	// ("type=base/max,…"). Defaults to none.
	RetryTypes map[string]retry.TypeBackoff
	// RebuildLockTTL is how long the Redis rebuild lock outlives a replica
	// that died while rebuilding. Defaults to 30s.
	RebuildLockTTL time.Duration
	// EpochCheck is how often an idle scheduler checks that Redis still
	// holds its state (busy ones notice at their next script call).
	// Defaults to 1s.
	EpochCheck time.Duration
	// CheckpointInterval is how often the checkpoint that detects a Redis
	// gone back in time is stamped and checked (checkpoint.go;
	// FERRY_SCHEDULER_CHECKPOINT_INTERVAL).
	CheckpointInterval time.Duration
	// QueueIdle is how long a queue stays in the scheduler's indexes (and in
	// GET /v1/queues and the gauges) after it was last seen empty: empty
	// queues are swept every QueueIdle and leave on the second sweep that
	// finds them empty (prune.go; FERRY_SCHEDULER_QUEUE_IDLE).
	QueueIdle time.Duration
	// SettingsRefresh is how often the tenants' weights and max_running and
	// the paused queues are copied from Postgres into Redis. Defaults to 2s.
	SettingsRefresh time.Duration
	// DefaultEstimate is the slot-time charged for a job whose (tenant,
	// type) has no measured run time yet. Defaults to 1s.
	DefaultEstimate time.Duration
	// Now is the clock. Defaults to time.Now.
	Now func() time.Time
	// Rand returns uniform numbers in [0, 1) for the retry jitter.
	// Defaults to math/rand/v2.
	Rand func() float64
}

// NoPrefetch is the Prefetch of a scheduler that never dispatches beyond a
// pool's free slots (FERRY_SCHEDULER_PREFETCH=0).
const NoPrefetch = -1

// NoLookahead is the Lookahead of a scheduler that dispatches a delayed job
// only once it is due (FERRY_SCHEDULER_LOOKAHEAD=0).
const NoLookahead = -1

// WithDefaults returns c with unset (zero) fields defaulted.
func (c Config) WithDefaults() Config {
	config.DefaultVar(&c.Lease, "FERRY_SCHEDULER_LEASE")
	config.DefaultVar(&c.Prefetch, "FERRY_SCHEDULER_PREFETCH")
	config.DefaultVar(&c.PrefetchWindow, "FERRY_SCHEDULER_PREFETCH_WINDOW")
	config.DefaultVar(&c.PrefetchMax, "FERRY_SCHEDULER_PREFETCH_MAX")
	config.DefaultVar(&c.Tick, "FERRY_SCHEDULER_TICK")
	if c.Lookahead == 0 {
		// The declared default, kept below the lease: a short lease
		// (FERRY_SCHEDULER_LEASE=2s in the chaos tests) must not make the
		// default look-ahead invalid. One set explicitly is validated.
		config.DefaultVar(&c.Lookahead, "FERRY_SCHEDULER_LOOKAHEAD")
		c.Lookahead = min(c.Lookahead, c.Lease/2)
	}
	config.DefaultVar(&c.RetryBase, "FERRY_SCHEDULER_RETRY_BASE")
	config.DefaultVar(&c.RetryMax, "FERRY_SCHEDULER_RETRY_MAX")
	config.DefaultVar(&c.CheckpointInterval, "FERRY_SCHEDULER_CHECKPOINT_INTERVAL")
	config.DefaultVar(&c.QueueIdle, "FERRY_SCHEDULER_QUEUE_IDLE")
	config.Default(&c.WorkerTTL, 5*time.Second)
	config.Default(&c.TerminalTTL, qstore.DefaultTerminalTTL)
	config.Default(&c.KeyPrefix, qstore.DefaultPrefix)
	if len(c.Pools) == 0 {
		c.Pools = append([]string(nil), schema.Pools...)
	}
	config.Default(&c.MaxBatch, 512)
	config.DefaultVar(&c.MaxPoll, "FERRY_SCHEDULER_MAX_POLL")
	config.Default(&c.RebuildLockTTL, 30*time.Second)
	config.Default(&c.EpochCheck, time.Second)
	config.Default(&c.SettingsRefresh, 2*time.Second)
	config.Default(&c.DefaultEstimate, qstore.DefaultRunEstimate)
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// basePrefetch is the dispatches a pool may always have beyond its live
// slots: Prefetch, where a negative one (NoPrefetch) is none.
func (c Config) basePrefetch() int { return max(c.Prefetch, 0) }

// Validate reports settings that cannot work, naming the environment
// variable of a setting read from one and the field of the others.
func (c Config) Validate() error {
	var errs []error
	if c.Lease < 100*time.Millisecond {
		errs = append(errs, fmt.Errorf("FERRY_SCHEDULER_LEASE=%v: must be ≥ 100ms", c.Lease))
	}
	if c.Tick <= 0 || c.Tick > time.Minute {
		errs = append(errs, fmt.Errorf("FERRY_SCHEDULER_TICK=%v: must be > 0 and ≤ 1m", c.Tick))
	}
	if c.Lookahead >= c.Lease {
		errs = append(errs, fmt.Errorf("FERRY_SCHEDULER_LOOKAHEAD=%v: must be < FERRY_SCHEDULER_LEASE=%v", c.Lookahead, c.Lease))
	}
	if c.PrefetchMax < 0 {
		errs = append(errs, fmt.Errorf("FERRY_SCHEDULER_PREFETCH_MAX=%d: must be ≥ 0", c.PrefetchMax))
	}
	if c.RetryBase <= 0 || c.RetryBase > c.RetryMax {
		errs = append(errs, fmt.Errorf("FERRY_SCHEDULER_RETRY_BASE=%v: must be > 0 and ≤ FERRY_SCHEDULER_RETRY_MAX=%v", c.RetryBase, c.RetryMax))
	}
	if c.CheckpointInterval <= 0 || c.QueueIdle <= 0 {
		errs = append(errs, errors.New("FERRY_SCHEDULER_CHECKPOINT_INTERVAL and FERRY_SCHEDULER_QUEUE_IDLE must be > 0"))
	}
	for typ, b := range c.RetryTypes {
		if b.Base < 0 || b.Max < 0 || (b.Base > 0 && b.Max > 0 && b.Base > b.Max) {
			errs = append(errs, fmt.Errorf("FERRY_SCHEDULER_RETRY_TYPES: %s: base must be ≤ max, both ≥ 0", typ))
		}
	}
	return errors.Join(append(errs, c.validateInternal())...)
}

// validateInternal checks the settings no environment variable sets.
func (c Config) validateInternal() error {
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"WorkerTTL", c.WorkerTTL}, {"TerminalTTL", c.TerminalTTL}, {"RebuildLockTTL", c.RebuildLockTTL},
		{"EpochCheck", c.EpochCheck}, {"SettingsRefresh", c.SettingsRefresh}, {"DefaultEstimate", c.DefaultEstimate},
	} {
		if d.v <= 0 {
			return fmt.Errorf("scheduler: %s=%v: must be > 0", d.name, d.v)
		}
	}
	if c.MaxBatch < 1 {
		return fmt.Errorf("scheduler: MaxBatch=%d must be ≥ 1", c.MaxBatch)
	}
	if c.MaxPoll < 1 {
		return fmt.Errorf("scheduler: FERRY_SCHEDULER_MAX_POLL=%d must be ≥ 1", c.MaxPoll)
	}
	return nil
}

// parseRetryTypes parses "type=base/max" items; a bad item is reported.
func parseRetryTypes(items []string) (map[string]retry.TypeBackoff, error) {
	if len(items) == 0 {
		return nil, nil
	}
	out := make(map[string]retry.TypeBackoff, len(items))
	var errs []error
	for _, it := range items {
		typ, spec, ok := strings.Cut(it, "=")
		base, maxS, ok2 := strings.Cut(spec, "/")
		typ = strings.TrimSpace(typ)
		if !ok || !ok2 || typ == "" {
			errs = append(errs, fmt.Errorf("FERRY_SCHEDULER_RETRY_TYPES: %q: want type=base/max", it))
			continue
		}
		var b retry.TypeBackoff
		var err1, err2 error
		b.Base, err1 = time.ParseDuration(strings.TrimSpace(base))
		b.Max, err2 = time.ParseDuration(strings.TrimSpace(maxS))
		if err1 != nil || err2 != nil {
			errs = append(errs, fmt.Errorf("FERRY_SCHEDULER_RETRY_TYPES: %q: %w", it, errors.Join(err1, err2)))
			continue
		}
		out[typ] = b
	}
	return out, errors.Join(errs...)
}

// LoadConfig reads the scheduler's settings; call Validate on the result.
// A malformed FERRY_SCHEDULER_RETRY_TYPES is returned as the error.
func LoadConfig(l *config.Loader) (Config, error) {
	types, err := parseRetryTypes(l.List("FERRY_SCHEDULER_RETRY_TYPES"))
	prefetch := l.Int("FERRY_SCHEDULER_PREFETCH")
	if prefetch == 0 {
		prefetch = NoPrefetch
	}
	lookahead := l.Duration("FERRY_SCHEDULER_LOOKAHEAD")
	switch {
	case !l.IsSet("FERRY_SCHEDULER_LOOKAHEAD"):
		lookahead = 0 // the default, below the lease (WithDefaults)
	case lookahead == 0:
		lookahead = NoLookahead
	}
	return Config{
		Lease:              l.Duration("FERRY_SCHEDULER_LEASE"),
		Prefetch:           prefetch,
		PrefetchWindow:     l.Duration("FERRY_SCHEDULER_PREFETCH_WINDOW"),
		PrefetchMax:        l.Int("FERRY_SCHEDULER_PREFETCH_MAX"),
		Tick:               l.Duration("FERRY_SCHEDULER_TICK"),
		Lookahead:          lookahead,
		RetryBase:          l.Duration("FERRY_SCHEDULER_RETRY_BASE"),
		RetryMax:           l.Duration("FERRY_SCHEDULER_RETRY_MAX"),
		RetryTypes:         types,
		CheckpointInterval: l.Duration("FERRY_SCHEDULER_CHECKPOINT_INTERVAL"),
		QueueIdle:          l.Duration("FERRY_SCHEDULER_QUEUE_IDLE"),
		MaxPoll:            l.Int("FERRY_SCHEDULER_MAX_POLL"),
	}, err
}
