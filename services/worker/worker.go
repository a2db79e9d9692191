package worker

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/ferryhq/ferry/events/schema"
	"github.com/ferryhq/ferry/platform/config"
	"github.com/ferryhq/ferry/platform/secretbox"
	"github.com/ferryhq/ferry/platform/service"
	"github.com/ferryhq/ferry/services/worker/handlers"
)

// Config configures a worker. A field read from an environment variable
// names it; its default is the one platform/config.Vars declares (see
// WithDefaults).
type Config struct {
	// Pool is the pool this worker serves (short or long); it consumes
	// <prefix>jobs.dispatch.<pool> in group ferry-worker-<pool>
	// (FERRY_WORKER_POOL).
	Pool string
	// Concurrency is how many handlers run at once (FERRY_WORKER_CONCURRENCY).
	Concurrency int
	// QueueSize bounds the dispatches fetched but not yet started; while it
	// is full the worker pauses fetching, and resumes once it is half empty.
	// It must hold what the scheduler dispatches beyond the free slots (its
	// prefetch grows with the pool's rate, FERRY_SCHEDULER_PREFETCH_WINDOW):
	// a queue smaller than that makes the worker pause and resume fetching
	// all the time. Defaults to max(Concurrency, 1024).
	QueueSize int
	// Hold is how many dispatches leased ahead of their not-before the
	// worker keeps waiting outside its slots (FERRY_WORKER_HOLD). The
	// worker announces it; the scheduler leases at most that many ahead to
	// the pool. A dispatch that does not fit waits in a runner, as every
	// one does with NoHold, which turns lease-ahead off for this worker.
	Hold int
	// WorkerID identifies this worker in events (FERRY_WORKER_ID). Defaults
	// to hostname-pid.
	WorkerID string
	// Grace is how long running handlers may take to finish once Run's
	// context is done; the rest are cancelled and handed back
	// (FERRY_WORKER_GRACE).
	Grace time.Duration
	// Heartbeat is how often a running job reports progress (its lease
	// heartbeat; FERRY_WORKER_HEARTBEAT).
	Heartbeat time.Duration
	// ProgressInterval is the shortest gap between two progress events of
	// one job; reports in between are coalesced. Defaults to 100ms.
	ProgressInterval time.Duration
	// StartedDelay is how long a job's started event may wait for the
	// job's outcome, to be produced with it (reporter); negative, or not
	// shorter than Heartbeat, sends it at once. Defaults to 10ms.
	StartedDelay time.Duration
	// StatusInterval is how often the worker announces its slots on the
	// workers topic. Defaults to 1s.
	StatusInterval time.Duration
	// MaxResultBytes bounds a result's JSON; a larger result is replaced by
	// {"truncated": true, "bytes": N}. Defaults to 64 KiB.
	MaxResultBytes int
	// RememberJobs is how many recently run jobs the worker remembers to
	// drop late or repeated dispatches. Defaults to 100000.
	RememberJobs int
	// SecretKey (FERRY_SECRET_KEY) opens the tenants' http signing secrets
	// the api sealed. When empty, SecretKeyFile is used (development).
	SecretKey []byte
	// SecretKeyFile is the key file used when SecretKey is empty. LoadConfig
	// sets it to FERRY_DATA_DIR/secret-key.
	SecretKeyFile string
	// CallbackURL is the api's base URL as the receivers of async http
	// jobs reach it (FERRY_CALLBACK_URL); `ferry dev` defaults it to its
	// own address. Empty: async http jobs fail permanent.
	CallbackURL string
	// AsyncLease is the lease of an async http job whose payload sets none:
	// how long its receiver may go between two reports (FERRY_HTTP_ASYNC_LEASE).
	AsyncLease time.Duration
	// CallbackTokenTTL bounds how long an async http job's attempt may be
	// held in all: its callback token expires then
	// (FERRY_HTTP_CALLBACK_TOKEN_TTL).
	CallbackTokenTTL time.Duration

	loadErr error
}

// NoHold is the Hold of a worker that holds no dispatch leased ahead
// (FERRY_WORKER_HOLD=0): the scheduler leases nothing ahead to it.
const NoHold = -1

// WithDefaults returns c with zero fields set to their defaults: a setting
// read from an environment variable takes the default platform/config.Vars
// declares for it, the others the default written here.
func (c Config) WithDefaults() Config {
	config.DefaultVar(&c.Pool, "FERRY_WORKER_POOL")
	config.DefaultVar(&c.Concurrency, "FERRY_WORKER_CONCURRENCY")
	config.Default(&c.QueueSize, max(c.Concurrency, 1024))
	config.DefaultVar(&c.Hold, "FERRY_WORKER_HOLD")
	if c.WorkerID == "" {
		host, _ := os.Hostname()
		if host == "" {
			host = "worker"
		}
		c.WorkerID = fmt.Sprintf("%s-%d", host, os.Getpid())
	}
	config.DefaultVar(&c.Grace, "FERRY_WORKER_GRACE")
	config.DefaultVar(&c.Heartbeat, "FERRY_WORKER_HEARTBEAT")
	config.Default(&c.ProgressInterval, 100*time.Millisecond)
	config.Default(&c.StartedDelay, 10*time.Millisecond)
	config.Default(&c.StatusInterval, time.Second)
	config.Default(&c.MaxResultBytes, 64<<10)
	config.Default(&c.RememberJobs, 100_000)
	config.DefaultVar(&c.AsyncLease, "FERRY_HTTP_ASYNC_LEASE")
	config.DefaultVar(&c.CallbackTokenTTL, "FERRY_HTTP_CALLBACK_TOKEN_TTL")
	return c
}

// Validate reports settings that cannot work.
func (c Config) Validate() error {
	errs := []error{c.loadErr}
	if !slices.Contains(schema.Pools, c.Pool) {
		errs = append(errs, fmt.Errorf("FERRY_WORKER_POOL %q: use one of %v", c.Pool, schema.Pools))
	}
	if c.Concurrency < 1 {
		errs = append(errs, errors.New("FERRY_WORKER_CONCURRENCY must be ≥ 1"))
	}
	if c.Hold < NoHold {
		errs = append(errs, errors.New("FERRY_WORKER_HOLD must be ≥ 0"))
	}
	if c.Grace < 0 || c.Heartbeat <= 0 {
		errs = append(errs, errors.New("FERRY_WORKER_GRACE must be ≥ 0 and FERRY_WORKER_HEARTBEAT > 0"))
	}
	if c.QueueSize < 1 || c.ProgressInterval <= 0 || c.StatusInterval <= 0 || c.MaxResultBytes < 1 || c.RememberJobs < 1 {
		errs = append(errs, errors.New("worker: QueueSize, ProgressInterval, StatusInterval, MaxResultBytes and RememberJobs must be > 0"))
	}
	errs = append(errs, handlers.CheckAsyncLease(c.AsyncLease, "FERRY_HTTP_ASYNC_LEASE"))
	if c.CallbackTokenTTL < c.AsyncLease {
		errs = append(errs, fmt.Errorf("FERRY_HTTP_CALLBACK_TOKEN_TTL=%v must be at least FERRY_HTTP_ASYNC_LEASE=%v", c.CallbackTokenTTL, c.AsyncLease))
	}
	if c.CallbackURL != "" {
		if u, err := url.Parse(c.CallbackURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			errs = append(errs, fmt.Errorf("FERRY_CALLBACK_URL %q: want the api's absolute http(s) URL", c.CallbackURL))
		}
	}
	return errors.Join(errs...)
}

// LoadConfig reads the worker's settings.
func LoadConfig(l *config.Loader) Config {
	hold := l.Int("FERRY_WORKER_HOLD")
	if hold == 0 {
		hold = NoHold
	}
	c := Config{
		Pool:          l.String("FERRY_WORKER_POOL"),
		Concurrency:   l.Int("FERRY_WORKER_CONCURRENCY"),
		Hold:          hold,
		WorkerID:      l.String("FERRY_WORKER_ID"),
		Grace:         l.Duration("FERRY_WORKER_GRACE"),
		Heartbeat:     l.Duration("FERRY_WORKER_HEARTBEAT"),
		SecretKeyFile: filepath.Join(l.String("FERRY_DATA_DIR"), "secret-key"),

		CallbackURL:      l.String("FERRY_CALLBACK_URL"),
		AsyncLease:       l.Duration("FERRY_HTTP_ASYNC_LEASE"),
		CallbackTokenTTL: l.Duration("FERRY_HTTP_CALLBACK_TOKEN_TTL"),
	}
	if l.IsSet("FERRY_SECRET_KEY") {
		k, err := secretbox.ParseKey(l.String("FERRY_SECRET_KEY"))
		if err != nil {
			c.loadErr = fmt.Errorf("FERRY_SECRET_KEY: %w", err)
		}
		c.SecretKey = k
	}
	return c
}

// Needs are the connections a worker uses: Kafka for its jobs, and Postgres
// for the one thing that must not travel through Kafka, the tenants' http
// signing secrets (see signing.Secrets).
var Needs = service.Needs{Kafka: true, Postgres: true}

// Build is the service.Builder of a worker with the built-in handlers.
func Build(ctx context.Context, deps *service.Deps, l *config.Loader) (service.Component, error) {
	return BuildWith(nil)(ctx, deps, l)
}

// BuildWith returns a service.Builder of a worker that runs the built-in
// handlers plus those register adds (which may override built-ins). An
// application's worker main is:
//
//	service.Main("worker", worker.Needs, worker.BuildWith(func(r *worker.Registry) {
//		r.Register("email.send", sendEmail)
//	}))
func BuildWith(register func(*Registry)) service.Builder {
	return func(ctx context.Context, deps *service.Deps, l *config.Loader) (service.Component, error) {
		cfg := LoadConfig(l).WithDefaults()
		opts, err := handlerOptions(ctx, deps, cfg)
		if err != nil {
			return nil, err
		}
		reg := NewRegistry()
		handlers.Register(reg, opts)
		if register != nil {
			register(reg)
		}
		return New(deps, cfg, reg)
	}
}

// New returns a worker running the handlers of reg. cfg gets its defaults
// applied.
func New(deps *service.Deps, cfg Config, reg *Registry) (*Service, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("worker: %w", err)
	}
	if deps == nil || deps.Kafka == nil {
		return nil, errors.New("worker: deps.Kafka is required")
	}
	if reg == nil {
		reg = NewRegistry()
	}
	return newService(deps, cfg, reg, deps.Log("worker", "worker_id", cfg.WorkerID, "pool", cfg.Pool)), nil
}

// Routes mounts nothing: a worker has no API of its own beyond the
// /healthz, /readyz and /metrics every service serves.
func (s *Service) Routes(chi.Router) {}

var _ service.Component = (*Service)(nil)
