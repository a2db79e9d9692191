// Package dlq is Ferry's dlq service: the dead-letter projection, and the
// routes to inspect, search, re-drive (single and bulk, with dry-run),
// suppress and purge dead-lettered jobs.
//
// # Projection
//
// The service consumes ferry.jobs.dlq and ferry.jobs.enqueued (group
// ferry-dlq-entries) through platform/projection, so rows and Kafka offsets
// commit in one transaction. A dlq event becomes one row of dlq_entries
// holding the original submission, the attempt history, the final error,
// and the dead-letter time; duplicates are ignored and a later attempt's
// event replaces an earlier one. Enqueued events with reason "redrive"
// confirm re-drives (table dlq_redrives), which repairs a re-drive whose
// produce succeeded but whose bookkeeping did not.
//
// # Re-drive
//
// A re-drive emits an enqueued event for a new job (job_ + UUIDv7, attempt
// 1, fresh attempt budget, reason "redrive", redriven_from = the dead job).
// Before producing, the caller claims the entry with a conditional insert in
// dlq_redrives that reserves the new job id; concurrent callers lose the
// claim and answer with the winner's job, and a failed produce releases the
// claim but keeps the reserved id, so an entry is re-driven into at most one
// job. Bulk re-drives claim in batches, are rate limited service-wide, and
// skip suppressed and already re-driven entries.
//
// # Retention
//
// Entries dead longer than Config.Retention are deleted by a periodic loop.
package dlq

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/go-chi/chi/v5"
	"golang.org/x/sync/errgroup"
	"golang.org/x/time/rate"

	"github.com/ferryhq/ferry/events/schema"
	"github.com/ferryhq/ferry/platform/auth"
	"github.com/ferryhq/ferry/platform/config"
	"github.com/ferryhq/ferry/platform/jobs"
	"github.com/ferryhq/ferry/platform/projection"
	"github.com/ferryhq/ferry/platform/service"
	"github.com/ferryhq/ferry/services/dlq/internal/store"
)

// Needs lists the connections the service uses.
var Needs = service.Needs{Postgres: true, Kafka: true}

// Config of the dlq service.
type Config struct {
	// Retention is how long an entry is kept after its job died.
	// Defaults to 720h (30 days).
	Retention time.Duration
	// RetentionInterval is how often expired entries are deleted.
	// Defaults to 1m.
	RetentionInterval time.Duration
	// RedriveRate bounds bulk re-drives, in jobs per second, across all
	// callers of this process. Defaults to 500.
	RedriveRate int
	// BulkBatch is how many entries a bulk re-drive claims and produces at
	// a time. Defaults to 500.
	BulkBatch int
	// BulkMax bounds the entries one bulk re-drive call processes; the
	// answer says how many remain. Defaults to 10000.
	BulkMax int
	// ClaimTTL is how long a re-drive claim is honoured before another
	// caller may take it over (its owner crashed). Defaults to 30s.
	ClaimTTL time.Duration
	// ProduceTimeout bounds producing a re-drive. Must be shorter than
	// ClaimTTL. Defaults to 10s.
	ProduceTimeout time.Duration
	// ClaimWait is how long a re-drive waits for a concurrent re-drive of
	// the same entry to finish before answering 409. Defaults to 5s.
	ClaimWait time.Duration
	// MaxPayloadBytes bounds an edited payload of a tenant without its own
	// max_payload_bytes: the deployment's payload limit, the api's
	// (FERRY_API_MAX_PAYLOAD_BYTES), so a re-drive is held to the limit a
	// submission is (jobs.CheckRedriveEdit).
	MaxPayloadBytes int
	// ProjectionBatch bounds records per projection transaction.
	// Defaults to 2000.
	ProjectionBatch int
	// Now is the clock. Defaults to time.Now.
	Now func() time.Time
}

// WithDefaults returns c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	config.DefaultVar(&c.Retention, "FERRY_DLQ_RETENTION")
	config.Default(&c.RetentionInterval, time.Minute)
	config.Default(&c.ClaimTTL, 30*time.Second)
	config.Default(&c.ProduceTimeout, 10*time.Second)
	config.Default(&c.ClaimWait, 5*time.Second)
	config.DefaultVar(&c.RedriveRate, "FERRY_DLQ_REDRIVE_RATE")
	config.Default(&c.BulkBatch, 500)
	config.Default(&c.BulkMax, 10000)
	config.DefaultVar(&c.MaxPayloadBytes, "FERRY_API_MAX_PAYLOAD_BYTES")
	config.Default(&c.ProjectionBatch, 2000)
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// Validate reports settings that cannot work.
func (c Config) Validate() error {
	var errs []error
	if c.Retention < time.Hour {
		errs = append(errs, errors.New("FERRY_DLQ_RETENTION must be at least 1h"))
	}
	if c.RedriveRate < 1 {
		errs = append(errs, errors.New("FERRY_DLQ_REDRIVE_RATE must be at least 1"))
	}
	if c.RetentionInterval <= 0 || c.BulkBatch < 1 || c.BulkMax < 1 || c.MaxPayloadBytes < 1 || c.ProjectionBatch < 1 || c.ClaimWait <= 0 {
		errs = append(errs, errors.New("dlq: RetentionInterval, BulkBatch, BulkMax, MaxPayloadBytes, ProjectionBatch and ClaimWait must be positive"))
	}
	if c.ProduceTimeout <= 0 || c.ProduceTimeout >= c.ClaimTTL {
		errs = append(errs, errors.New("dlq: ProduceTimeout must be positive and shorter than ClaimTTL"))
	}
	return errors.Join(errs...)
}

// LoadConfig reads the service's settings.
func LoadConfig(l *config.Loader) Config {
	return Config{
		Retention:   l.Duration("FERRY_DLQ_RETENTION"),
		RedriveRate: l.Int("FERRY_DLQ_REDRIVE_RATE"),
		// The deployment's payload limit, which an edited payload is held to
		// as a submitted one is.
		MaxPayloadBytes: l.Int("FERRY_API_MAX_PAYLOAD_BYTES"),
	}
}

// Build is the service.Builder of this service.
func Build(ctx context.Context, deps *service.Deps, l *config.Loader) (service.Component, error) {
	return New(ctx, deps, LoadConfig(l))
}

// Service is the running dlq service.
type Service struct {
	deps  *service.Deps
	cfg   Config
	log   *slog.Logger
	store *store.Store
	// limits are each tenant's submission limits, which bound re-drive
	// edits.
	limits  *jobs.LimitsReader
	limiter *rate.Limiter
	// batch is the bulk batch size: BulkBatch, but never more than one
	// second's worth of RedriveRate, so no batch exceeds the rate.
	batch int
	// project runs the dead-letter projection (deps.Projection).
	project func(context.Context) error
}

var _ service.Component = (*Service)(nil)

// New returns the service over deps (which must hold Postgres and Kafka),
// applying its migrations with ctx.
func New(ctx context.Context, deps *service.Deps, cfg Config) (*Service, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if deps.Postgres == nil || deps.Kafka == nil {
		return nil, errors.New("dlq: needs Postgres and Kafka")
	}
	log := deps.Log("dlq")
	if err := store.Migrate(ctx, deps.Postgres); err != nil {
		return nil, fmt.Errorf("dlq: %w", err)
	}
	s := &Service{
		deps:  deps,
		cfg:   cfg,
		log:   log,
		store: store.New(deps.Postgres, deps.Topics, log),
		limits: jobs.NewLimitsReader(auth.NewTenantCache(deps.Postgres, time.Second),
			jobs.Defaults{MaxPayloadBytes: cfg.MaxPayloadBytes}),
		// The burst is one batch, so a batch waits for its whole budget.
		limiter: rate.NewLimiter(rate.Limit(cfg.RedriveRate), min(cfg.BulkBatch, cfg.RedriveRate)),
		batch:   min(cfg.BulkBatch, cfg.RedriveRate),
	}
	var err error
	if s.project, err = deps.Projection(projection.Config{
		Group:    "ferry-dlq-entries",
		Topics:   []string{deps.Topics.Lifecycle(schema.EventDLQ), deps.Topics.Lifecycle(schema.EventEnqueued)},
		Kafka:    deps.KafkaConfig("dlq-entries"),
		MaxBatch: cfg.ProjectionBatch,
		Logger:   log,
	}, s.store.Apply); err != nil {
		return nil, fmt.Errorf("dlq: %w", err)
	}
	return s, nil
}

// Routes registers the service's routes with their full paths.
func (s *Service) Routes(r chi.Router) {
	r.Group(func(r chi.Router) {
		r.Use(s.deps.Authenticate(), auth.RequireTenant)
		r.Get("/v1/dlq", s.handleList)
		r.Post("/v1/dlq/redrive", s.handleBulkRedrive)
		r.Get("/v1/dlq/{id}", s.handleGet)
		r.Delete("/v1/dlq/{id}", s.handlePurge)
		r.Post("/v1/dlq/{id}/redrive", s.handleRedrive)
		r.Post("/v1/dlq/{id}/suppress", s.handleSuppress)
		r.Delete("/v1/dlq/{id}/suppress", s.handleUnsuppress)
	})
}

// Run runs the projection and the retention loop until ctx is done.
func (s *Service) Run(ctx context.Context) error {
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return s.project(ctx) })
	g.Go(func() error { service.Every(ctx, s.cfg.RetentionInterval, s.expireOnce); return nil })
	return g.Wait()
}

func (s *Service) expireOnce(ctx context.Context) {
	n, err := s.store.Expire(ctx, s.cfg.Now().Add(-s.cfg.Retention), 1000)
	switch {
	case err != nil && ctx.Err() == nil:
		s.log.ErrorContext(ctx, "dlq retention failed", "err", err)
	case n > 0:
		s.log.InfoContext(ctx, "dlq entries expired", "count", n, "retention", s.cfg.Retention.String())
	}
}
