package scheduler

import (
	"errors"
	"fmt"
	"time"

	"github.com/ferryhq/ferry/events/schema"
	"github.com/ferryhq/ferry/platform/config"
	"github.com/ferryhq/ferry/platform/service"
)

// Needs are the connections the scheduler uses.
var Needs = service.Needs{Redis: true, Kafka: true}

// Config configures the scheduler.
type Config struct {
	// Lease is how long a dispatched job may go without started/progress
	// before it is re-dispatched. Defaults to 30s.
	Lease time.Duration
	// Prefetch is how many dispatches may exceed the pool's live slots.
	// Defaults to 16. Negative means 0.
	Prefetch int
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
		errs = append(errs, errors.New("scheduler: retry base exceeds retry max"))
	}
	return errors.Join(errs...)
}

// LoadConfig reads the scheduler's settings; call Validate on the result.
func LoadConfig(l *config.Loader) Config {
	return Config{
		Lease:    l.Duration("FERRY_SCHEDULER_LEASE"),
		Prefetch: l.Int("FERRY_SCHEDULER_PREFETCH"),
		Tick:     l.Duration("FERRY_SCHEDULER_TICK"),
	}
}
