// Package audit is Ferry's audit service: the append-only, hash-chained
// audit log of every lifecycle event, with compliance queries, export and
// verification.
//
// # Projection
//
// The service consumes every lifecycle topic (group ferry-audit) through
// platform/projection, so each batch of rows commits with its Kafka offsets
// in one transaction: a crash neither loses nor doubles a row, and an event
// delivered twice (same ce_id) is recorded once.
//
// # Hash chains
//
// Rows are chained per (tenant, topic, partition): each stores its seq in
// its chain, the previous row's hash and its own hash, SHA-256 over a
// canonical encoding of the row (internal/chain). The chain heads live in
// audit_chain_heads, updated in the same transaction, so parallel consumers
// never wait on one chain. GET /v1/audit/verify walks every chain.
//
// # Append-only and retention
//
// Triggers reject UPDATE, DELETE and TRUNCATE of audit rows for every role.
// Rows are partitioned by month of occurred_at; the service (or, for a
// runtime role without DDL rights, `ferry migrate partitions`: see
// partitions.go) creates partitions ahead and drops whole partitions older
// than the retention,
// recording per chain where the cut was (audit_chain_cuts) so verification
// starts after it.
package audit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/go-chi/chi/v5"
	"golang.org/x/sync/errgroup"

	"github.com/ferryhq/ferry/platform/auth"
	"github.com/ferryhq/ferry/platform/config"
	"github.com/ferryhq/ferry/platform/projection"
	"github.com/ferryhq/ferry/platform/service"
	"github.com/ferryhq/ferry/services/audit/internal/store"
)

// Needs lists the connections the service uses.
var Needs = service.Needs{Postgres: true, Kafka: true}

// ProjectionGroup is the consumer group (and offsets key) of the projection.
const ProjectionGroup = "ferry-audit"

// Config of the audit service. A field read from an environment variable
// names it; its default is the one platform/config.Vars declares (see
// WithDefaults).
type Config struct {
	// Retention is how long audit rows are kept: monthly partitions that
	// end before now − Retention are dropped whole (FERRY_AUDIT_RETENTION).
	Retention time.Duration
	// PartitionsAhead is how many months of partitions exist beyond the
	// current one. Defaults to 3.
	PartitionsAhead int
	// MaintenanceInterval is how often partitions are created and expired
	// ones dropped (also once at start). Defaults to 24h.
	MaintenanceInterval time.Duration
	// ProjectionBatch bounds the records applied per transaction.
	// Defaults to 2000.
	ProjectionBatch int
	// PageLimit is the default page size of GET /v1/audit/events.
	// Defaults to 100; MaxPageLimit (1000) caps the limit parameter.
	PageLimit    int
	MaxPageLimit int
	// ExportBatch is the rows per query and per flush of an export.
	// Defaults to 1000.
	ExportBatch int
	// VerifyBatch is the rows per query of a verification walk.
	// Defaults to 5000.
	VerifyBatch int
	// ExportConcurrency bounds the exports one tenant runs at once per
	// replica (FERRY_AUDIT_EXPORT_CONCURRENCY).
	ExportConcurrency int
	// ExportWriteTimeout bounds how long one page of an export may take to
	// reach a slow client (FERRY_AUDIT_EXPORT_WRITE_TIMEOUT).
	ExportWriteTimeout time.Duration
	// Now is the clock. Defaults to time.Now.
	Now func() time.Time
}

// WithDefaults returns c with zero fields set to their defaults: a setting
// read from an environment variable takes the default platform/config.Vars
// declares for it, the others the default written here.
func (c Config) WithDefaults() Config {
	config.DefaultVar(&c.Retention, "FERRY_AUDIT_RETENTION")
	config.Default(&c.PartitionsAhead, 3)
	config.Default(&c.MaintenanceInterval, 24*time.Hour)
	config.Default(&c.ProjectionBatch, 2000)
	config.Default(&c.PageLimit, 100)
	config.Default(&c.MaxPageLimit, 1000)
	config.Default(&c.ExportBatch, 1000)
	config.Default(&c.VerifyBatch, 5000)
	config.DefaultVar(&c.ExportConcurrency, "FERRY_AUDIT_EXPORT_CONCURRENCY")
	config.DefaultVar(&c.ExportWriteTimeout, "FERRY_AUDIT_EXPORT_WRITE_TIMEOUT")
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// Validate reports settings that cannot work.
func (c Config) Validate() error {
	var errs []error
	if c.Retention < 24*time.Hour {
		errs = append(errs, errors.New("FERRY_AUDIT_RETENTION must be at least 24h"))
	}
	if c.PartitionsAhead < 1 || c.PartitionsAhead > 24 {
		errs = append(errs, fmt.Errorf("audit: PartitionsAhead=%d must be between 1 and 24", c.PartitionsAhead))
	}
	if c.MaintenanceInterval < time.Minute {
		errs = append(errs, fmt.Errorf("audit: MaintenanceInterval=%v must be at least 1m", c.MaintenanceInterval))
	}
	if c.ProjectionBatch < 1 || c.PageLimit < 1 || c.MaxPageLimit < c.PageLimit || c.ExportBatch < 1 || c.VerifyBatch < 1 {
		errs = append(errs, errors.New("audit: batch sizes and page limits must be positive, PageLimit ≤ MaxPageLimit"))
	}
	if c.ExportConcurrency < 1 || c.ExportWriteTimeout < time.Second {
		errs = append(errs, errors.New("FERRY_AUDIT_EXPORT_CONCURRENCY must be ≥ 1 and FERRY_AUDIT_EXPORT_WRITE_TIMEOUT ≥ 1s"))
	}
	return errors.Join(errs...)
}

// LoadConfig reads the service's settings.
func LoadConfig(l *config.Loader) Config {
	return Config{
		Retention:          l.Duration("FERRY_AUDIT_RETENTION"),
		ExportConcurrency:  l.Int("FERRY_AUDIT_EXPORT_CONCURRENCY"),
		ExportWriteTimeout: l.Duration("FERRY_AUDIT_EXPORT_WRITE_TIMEOUT"),
	}
}

// Build is the service.Builder of this service.
func Build(ctx context.Context, deps *service.Deps, l *config.Loader) (service.Component, error) {
	return New(ctx, deps, LoadConfig(l))
}

// Service is the running audit service.
type Service struct {
	deps  *service.Deps
	cfg   Config
	log   *slog.Logger
	store *store.Store
	// exports counts each tenant's exports in progress (export.go).
	exports *exportSlots
	// project runs the audit projection (deps.Projection).
	project func(context.Context) error
}

var _ service.Component = (*Service)(nil)

// New returns the service over deps (which must hold Postgres), applying
// its migrations and creating the partitions it needs now, with ctx.
func New(ctx context.Context, deps *service.Deps, cfg Config) (*Service, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if deps.Postgres == nil {
		return nil, errors.New("audit: needs Postgres")
	}
	log := deps.Log("audit")
	if err := store.Migrate(ctx, deps.Postgres); err != nil {
		return nil, fmt.Errorf("audit: %w", err)
	}
	s := &Service{deps: deps, cfg: cfg, log: log, store: store.New(deps.Postgres, log, cfg.Now),
		exports: newExportSlots(cfg.ExportConcurrency)}
	if err := s.ensurePartitions(ctx); err != nil && !IsNoDDL(err) {
		// Not fatal: rows land in the default partition meanwhile. A role
		// without DDL rights is told what to do by Maintain, in Run.
		log.Error("audit: creating partitions", "err", err)
	}
	var err error
	if s.project, err = deps.Projection(projection.Config{
		Group:    ProjectionGroup,
		Topics:   append(deps.Topics.LifecycleTopics(), deps.Topics.Breakers(), deps.Topics.Changes()),
		Kafka:    deps.KafkaConfig("audit"),
		MaxBatch: cfg.ProjectionBatch,
		Logger:   log,
	}, s.store.Apply); err != nil {
		return nil, fmt.Errorf("audit: %w", err)
	}
	return s, nil
}

// Routes registers the audit routes with their full paths.
func (s *Service) Routes(r chi.Router) {
	r.Group(func(r chi.Router) {
		r.Use(s.deps.Authenticate(), auth.RequireTenant)
		r.Get("/v1/audit/events", s.handleEvents)
		r.Get("/v1/audit/export", s.handleExport)
	})
	r.Group(func(r chi.Router) {
		// The admin key without Ferry-Tenant verifies every tenant.
		r.Use(s.deps.Authenticate())
		r.Get("/v1/audit/verify", s.handleVerify)
	})
}

// Run runs the projection and the partition maintenance until ctx is done.
func (s *Service) Run(ctx context.Context) error {
	defer s.registerRunwayGauges()()
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return s.project(gctx) })
	g.Go(func() error { service.Every(gctx, s.cfg.MaintenanceInterval, s.Maintain); return nil })
	return g.Wait()
}

// ensurePartitions creates the partitions needed from the retention horizon
// to PartitionsAhead months ahead, so that the first rows find theirs.
func (s *Service) ensurePartitions(ctx context.Context) error {
	now := s.cfg.Now().UTC()
	to := store.MonthOf(now).Start.AddDate(0, s.cfg.PartitionsAhead, 0)
	_, _, err := s.store.EnsurePartitions(ctx, now.Add(-s.cfg.Retention), to)
	return err
}
