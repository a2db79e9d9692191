package scheduler

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/ferryhq/ferry/events/schema"
	"github.com/ferryhq/ferry/platform/config"
	"github.com/ferryhq/ferry/platform/service"
	"github.com/ferryhq/ferry/services/scheduler/internal/retry"
)

// Needs are the connections the scheduler uses. Postgres holds the tenants'
// fair-share settings, the paused queues and the API keys of the queue routes.
var Needs = service.Needs{Postgres: true, Redis: true, Kafka: true}

// Config configures the scheduler.
type Config struct {
	// Lease is how long a dispatched job may go without started/progress
	// before it is re-dispatched. Defaults to 30s.
	Lease time.Duration
	// Prefetch is how many dispatches may always exceed the pool's live
	// slots. Defaults to 16. Negative means 0.
	Prefetch int
	// PrefetchWindow sizes the rest of the dispatch window to the round
	// trip: on top of Prefetch, a pool may have as many dispatches beyond its
	// slots as it dispatched in the last PrefetchWindow (its recent rate ×
	// PrefetchWindow, at most PrefetchMax). A busy pool of short jobs so
	// keeps enough in flight to cover dispatch → completed → slot freed;
	// a pool of slow jobs (low rate) stays at Prefetch. Prefetched jobs wait
	// at most about PrefetchWindow at the worker. Defaults to 100ms;
	// negative disables it.
	PrefetchWindow time.Duration
	// PrefetchMax bounds the rate-sized part of the window per pool.
	// Defaults to 2048.
	PrefetchMax int
	// Tick is the fallback period of the dispatch loops. Defaults to 5ms.
	Tick time.Duration
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
	// MaxPoll bounds the records one consumer batch processes. Defaults to 5000.
	MaxPoll int
	// RetryBase and RetryMax are the backoff min(base·2^(n-1), max) of
	// app_error retries, ±25 % jitter; a job's backoff overrides them.
	// Default to 1s and 10m.
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
	// gone back in time is stamped and checked (checkpoint.go). Defaults to 1s.
	CheckpointInterval time.Duration
	// QueueIdle is how long a queue stays in the scheduler's indexes (and in
	// GET /v1/queues and the gauges) after it was last seen empty: empty
	// queues are swept every QueueIdle and leave on the second sweep that
	// finds them empty (prune.go). Defaults to 1m.
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

// WithDefaults returns c with unset fields defaulted.
func (c Config) WithDefaults() Config {
	if c.Lease <= 0 {
		c.Lease = 30 * time.Second
	}
	if c.Prefetch < 0 {
		c.Prefetch = 0
	}
	config.Default(&c.PrefetchWindow, 100*time.Millisecond)
	if c.PrefetchMax <= 0 {
		c.PrefetchMax = 2048
	}
	if c.Tick <= 0 {
		c.Tick = 5 * time.Millisecond
	}
	if c.WorkerTTL <= 0 {
		c.WorkerTTL = 5 * time.Second
	}
	if c.TerminalTTL <= 0 {
		c.TerminalTTL = 7 * 24 * time.Hour
	}
	if c.KeyPrefix == "" {
		c.KeyPrefix = "ferry:sched:"
	}
	if len(c.Pools) == 0 {
		c.Pools = append([]string(nil), schema.Pools...)
	}
	if c.MaxBatch <= 0 {
		c.MaxBatch = 512
	}
	if c.MaxPoll <= 0 {
		c.MaxPoll = 5000
	}
	if c.RetryBase <= 0 {
		c.RetryBase = time.Second
	}
	if c.RetryMax <= 0 {
		c.RetryMax = 10 * time.Minute
	}
	if c.RebuildLockTTL <= 0 {
		c.RebuildLockTTL = 30 * time.Second
	}
	if c.EpochCheck <= 0 {
		c.EpochCheck = time.Second
	}
	config.Default(&c.CheckpointInterval, time.Second)
	config.Default(&c.QueueIdle, time.Minute)
	if c.SettingsRefresh <= 0 {
		c.SettingsRefresh = 2 * time.Second
	}
	if c.DefaultEstimate <= 0 {
		c.DefaultEstimate = time.Second
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// Validate reports settings that cannot work.
func (c Config) Validate() error {
	var errs []error
	if c.Lease < 100*time.Millisecond {
		errs = append(errs, fmt.Errorf("FERRY_SCHEDULER_LEASE=%v: must be ≥ 100ms", c.Lease))
	}
	if c.Tick > time.Minute {
		errs = append(errs, fmt.Errorf("FERRY_SCHEDULER_TICK=%v: must be ≤ 1m", c.Tick))
	}
	if c.RetryBase > c.RetryMax {
		errs = append(errs, errors.New("FERRY_SCHEDULER_RETRY_BASE exceeds FERRY_SCHEDULER_RETRY_MAX"))
	}
	for typ, b := range c.RetryTypes {
		if b.Base < 0 || b.Max < 0 || (b.Base > 0 && b.Max > 0 && b.Base > b.Max) {
			errs = append(errs, fmt.Errorf("FERRY_SCHEDULER_RETRY_TYPES: %s: base must be ≤ max, both ≥ 0", typ))
		}
	}
	return errors.Join(errs...)
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
	return Config{
		Lease:              l.Duration("FERRY_SCHEDULER_LEASE"),
		Prefetch:           l.Int("FERRY_SCHEDULER_PREFETCH"),
		PrefetchWindow:     l.Duration("FERRY_SCHEDULER_PREFETCH_WINDOW"),
		PrefetchMax:        l.Int("FERRY_SCHEDULER_PREFETCH_MAX"),
		Tick:               l.Duration("FERRY_SCHEDULER_TICK"),
		RetryBase:          l.Duration("FERRY_SCHEDULER_RETRY_BASE"),
		RetryMax:           l.Duration("FERRY_SCHEDULER_RETRY_MAX"),
		RetryTypes:         types,
		CheckpointInterval: l.Duration("FERRY_SCHEDULER_CHECKPOINT_INTERVAL"),
		QueueIdle:          l.Duration("FERRY_SCHEDULER_QUEUE_IDLE"),
	}, err
}
