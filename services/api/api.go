// Package api is Ferry's front door for jobs: submission (single and batch,
// with Idempotency-Key), status, listing and cancellation, and the status
// projection in Postgres those reads come from.
//
// # Submission
//
// A valid submission gets a job id (job_ + UUIDv7) and is produced as an
// enqueued event (attempt 1) to ferry.jobs.enqueued with acks=all before the
// 202 answer. Submissions arriving while every produce slot is busy
// (Config.ProduceInflight) share the next produce call (internal/groupcommit),
// each request answered once its own records are acknowledged. A submission
// without Idempotency-Key or unique key makes no Redis call: a read of a job
// the status projection does not have yet, minted moments ago, waits for
// the projection to pass the log's end (a projection.Barrier) instead of
// reading a cache written beside every produce.
// Delivery of jobs to handlers is at least once.
//
// # Idempotency
//
// Idempotency-Key is checked first in Redis (ferry:idem:<tenant>:<key>) and,
// when Redis has no entry, in the status projection, which keeps the key and
// the request hash for the job's lifetime. A batch applies the header key K
// to item i as "K#i"; an item may carry its own idempotency_key instead.
//
// # Unique jobs
//
// A submission's unique key (unique: {key, while, ttl}) is claimed in Redis
// (ferry:unique:<tenant>:<key>, internal/unique) with the job id; a later
// submission that finds the claim reads the job's state from the status
// projection and is answered with the job while it holds the key, and when
// Redis has no claim the projection is asked for a holder. See
// docs/unique-jobs.md.
//
// # Tenants and limits
//
// The admin routes (/v1/admin/..., admin key only) create tenants, change
// their settings and issue and revoke API keys in the shared tenants and
// api_keys tables (platform/auth). Submissions are bounded per tenant by a
// Redis token bucket (internal/limits), by max_queued against the
// tenant_job_counts row the projection keeps, and by max_payload_bytes; see
// docs/tenancy.md.
//
// # Status projection
//
// The service consumes every lifecycle topic (group ferry-api-status) and
// folds each job's events into one row of table jobs with order-independent
// rules (internal/status), committing Kafka offsets in the same transaction.
package api

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ferryhq/ferry/events/schema"
	"github.com/ferryhq/ferry/platform/auth"
	"github.com/ferryhq/ferry/platform/callback"
	"github.com/ferryhq/ferry/platform/config"
	"github.com/ferryhq/ferry/platform/jobs"
	"github.com/ferryhq/ferry/platform/projection"
	"github.com/ferryhq/ferry/platform/secretbox"
	"github.com/ferryhq/ferry/platform/service"
	"github.com/ferryhq/ferry/platform/signing"
	"github.com/ferryhq/ferry/platform/ttlcache"
	"github.com/ferryhq/ferry/services/api/console"
	"github.com/ferryhq/ferry/services/api/internal/groupcommit"
	"github.com/ferryhq/ferry/services/api/internal/idem"
	"github.com/ferryhq/ferry/services/api/internal/limits"
	"github.com/ferryhq/ferry/services/api/internal/schedules"
	"github.com/ferryhq/ferry/services/api/internal/store"
	"github.com/ferryhq/ferry/services/api/internal/unique"
	"github.com/ferryhq/ferry/services/api/internal/workers"
)

//go:embed openapi.json
var openAPI []byte

// OpenAPI returns the OpenAPI 3.1 document of Ferry's whole HTTP surface;
// routes not served yet carry "x-ferry-status": "planned". The caller owns
// the returned bytes.
func OpenAPI() []byte { return append([]byte(nil), openAPI...) }

// Config of the api service. A field read from an environment variable
// names it; its default is the one platform/config.Vars declares (see
// WithDefaults).
type Config struct {
	// IdempotencyTTL is how long Redis remembers an Idempotency-Key
	// (FERRY_API_IDEMPOTENCY_TTL).
	IdempotencyTTL time.Duration
	// IdempotencyClaimTTL is the lease of an Idempotency-Key while its
	// request is in flight: a request that dies holding it makes retries
	// answer 409 for this long at most. Longer than a produce normally
	// takes. It is also the lease of a unique key's in-flight claim
	// (FERRY_API_IDEMPOTENCY_CLAIM_TTL).
	IdempotencyClaimTTL time.Duration
	// TestPauseAt makes keyed submissions wait at a point of the
	// idempotency flow ("claimed": after the claim, before the produce;
	// "produced": after the produce, before the key is completed) until
	// the request ends, so that tests can kill the api there. Test only;
	// empty (never pause) in production.
	TestPauseAt string
	// ProduceInflight bounds the group commit's produce calls in flight at
	// once (FERRY_API_PRODUCE_INFLIGHT).
	ProduceInflight int
	// FreshWindow: a read of a job the status projection does not have
	// waits for the projection (see VisibleWait) when the job id was minted
	// this recently, since it may have been submitted moments ago; an older
	// id it does not have is unknown at once. Defaults to 2m.
	FreshWindow time.Duration
	// VisibleWait bounds that wait: a just-submitted job the projection
	// still lacks after it answers 503 not_visible_yet (the projection is
	// far behind). Defaults to 5s.
	VisibleWait time.Duration
	// MaxPayloadBytes bounds a job's payload (FERRY_API_MAX_PAYLOAD_BYTES).
	MaxPayloadBytes int
	// MaxDelay bounds how far ahead a job's run_at, delay or retry backoff
	// may reach (FERRY_API_MAX_DELAY); it must stay below the topics'
	// retention (FERRY_TOPIC_RETENTION): after losing Redis the scheduler
	// rebuilds delayed jobs only from what Kafka still holds.
	MaxDelay time.Duration
	// MaxAttemptsByType is the default max_attempts per job type, for jobs
	// that do not set their own (FERRY_API_MAX_ATTEMPTS_TYPES). Defaults to
	// none (5 for every type).
	MaxAttemptsByType map[string]int
	// MaxBatchBytes bounds the body of POST /v1/jobs/batch. Defaults to 32 MiB.
	MaxBatchBytes int64
	// MaxBatchJobs bounds the jobs of one batch. Defaults to 1000.
	MaxBatchJobs int
	// ProjectionBatch bounds the records applied per projection
	// transaction. Defaults to 2000.
	ProjectionBatch int
	// TenantCacheTTL is how long a tenant's settings are cached. Defaults to 1s.
	TenantCacheTTL time.Duration
	// CountsCacheTTL is how long a tenant's unfinished-job counts (for
	// max_queued) and live queues (for max_queues) are cached. Defaults to 1s.
	CountsCacheTTL time.Duration
	// DefaultMaxQueued is max_queued for tenants without their own: a
	// tenant's jobs waiting to run, each held in Redis until it runs
	// (FERRY_API_DEFAULT_MAX_QUEUED).
	DefaultMaxQueued int
	// DefaultMaxQueues is max_queues for tenants without their own: the
	// distinct queues with unfinished jobs a tenant may have, each a set the
	// scheduler visits on every dispatch step (FERRY_API_DEFAULT_MAX_QUEUES).
	DefaultMaxQueues int
	// JobRetention is how long a finished job (succeeded, dead, cancelled)
	// stays in the status projection (FERRY_JOB_RETENTION).
	JobRetention time.Duration
	// RetentionInterval is how often finished jobs past JobRetention are
	// deleted. Defaults to 1m.
	RetentionInterval time.Duration
	// SecretKey (FERRY_SECRET_KEY) seals the tenants' http signing
	// secrets. When empty, SecretKeyFile is used (development); when both
	// are empty the signing secret routes answer 503.
	SecretKey []byte
	// SecretKeyFile is the key file used when SecretKey is empty. LoadConfig
	// sets it to FERRY_DATA_DIR/secret-key.
	SecretKeyFile string
	// SigningSecretGrace is how long a rotated-out http signing secret keeps
	// signing beside the new one (FERRY_HTTP_SIGNING_SECRET_GRACE).
	SigningSecretGrace time.Duration
	// ScheduleFiring runs the schedules firing loop in this replica
	// (FERRY_SCHEDULES_FIRING, default true). A bool has no "unset": the
	// zero Config, as tests build it, does not fire.
	ScheduleFiring bool
	// ScheduleGrace is how late a schedule's latest fire time may be and
	// still fire under catch-up skip (FERRY_SCHEDULES_MISFIRE_GRACE).
	ScheduleGrace time.Duration
	// ScheduleIdle bounds how long the firing loop sleeps without a due
	// schedule (a safety net should a change notification be lost).
	// Defaults to 10s.
	ScheduleIdle time.Duration
	// MaxSchedules is how many schedules a tenant may have
	// (FERRY_SCHEDULES_MAX_PER_TENANT).
	MaxSchedules int
	// UnknownTypes is accept or reject (FERRY_API_UNKNOWN_TYPES): reject
	// refuses job types no worker announced within KnownTypesWindow.
	UnknownTypes string
	// KnownTypesWindow is how long a type stays known after a worker
	// announced it (FERRY_API_KNOWN_TYPES_WINDOW).
	KnownTypesWindow time.Duration
	// Now is the clock. Defaults to time.Now.
	Now func() time.Time

	loadErr error

	// Console are the settings of the web console the api serves.
	Console console.Config
}

// WithDefaults returns c with zero fields set to their defaults: a setting
// read from an environment variable takes the default platform/config.Vars
// declares for it (the one table of defaults, documented in
// docs/configuration.md), the others the default written here.
func (c Config) WithDefaults() Config {
	config.DefaultVar(&c.IdempotencyTTL, "FERRY_API_IDEMPOTENCY_TTL")
	config.DefaultVar(&c.IdempotencyClaimTTL, "FERRY_API_IDEMPOTENCY_CLAIM_TTL")
	config.DefaultVar(&c.ProduceInflight, "FERRY_API_PRODUCE_INFLIGHT")
	config.DefaultVar(&c.MaxPayloadBytes, "FERRY_API_MAX_PAYLOAD_BYTES")
	config.DefaultVar(&c.MaxDelay, "FERRY_API_MAX_DELAY")
	config.DefaultVar(&c.DefaultMaxQueued, "FERRY_API_DEFAULT_MAX_QUEUED")
	config.DefaultVar(&c.DefaultMaxQueues, "FERRY_API_DEFAULT_MAX_QUEUES")
	config.DefaultVar(&c.JobRetention, "FERRY_JOB_RETENTION")
	config.DefaultVar(&c.SigningSecretGrace, "FERRY_HTTP_SIGNING_SECRET_GRACE")
	config.DefaultVar(&c.ScheduleGrace, "FERRY_SCHEDULES_MISFIRE_GRACE")
	config.DefaultVar(&c.MaxSchedules, "FERRY_SCHEDULES_MAX_PER_TENANT")
	config.DefaultVar(&c.UnknownTypes, "FERRY_API_UNKNOWN_TYPES")
	config.DefaultVar(&c.KnownTypesWindow, "FERRY_API_KNOWN_TYPES_WINDOW")
	config.Default(&c.FreshWindow, 2*time.Minute)
	config.Default(&c.VisibleWait, 5*time.Second)
	config.Default(&c.MaxBatchBytes, 32<<20)
	config.Default(&c.MaxBatchJobs, 1000)
	config.Default(&c.ProjectionBatch, 2000)
	config.Default(&c.TenantCacheTTL, time.Second)
	config.Default(&c.CountsCacheTTL, time.Second)
	config.Default(&c.RetentionInterval, time.Minute)
	config.Default(&c.ScheduleIdle, 10*time.Second)
	c.Console = c.Console.WithDefaults()
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// Validate reports settings that cannot work.
func (c Config) Validate() error {
	errs := []error{c.loadErr, c.Console.Validate()}
	if len(c.SecretKey) != 0 && len(c.SecretKey) != secretbox.KeySize {
		errs = append(errs, fmt.Errorf("FERRY_SECRET_KEY must be %d bytes", secretbox.KeySize))
	}
	if c.SigningSecretGrace < 0 {
		errs = append(errs, errors.New("FERRY_HTTP_SIGNING_SECRET_GRACE must be ≥ 0"))
	}
	if c.IdempotencyTTL < time.Minute {
		errs = append(errs, errors.New("FERRY_API_IDEMPOTENCY_TTL must be at least 1m"))
	}
	if c.IdempotencyClaimTTL < 100*time.Millisecond || c.IdempotencyClaimTTL > c.IdempotencyTTL {
		errs = append(errs, errors.New("FERRY_API_IDEMPOTENCY_CLAIM_TTL must be at least 100ms and at most FERRY_API_IDEMPOTENCY_TTL"))
	}
	if c.ProduceInflight < 1 {
		errs = append(errs, errors.New("FERRY_API_PRODUCE_INFLIGHT must be at least 1"))
	}
	if c.TestPauseAt != "" && c.TestPauseAt != pauseClaimed && c.TestPauseAt != pauseProduced {
		errs = append(errs, fmt.Errorf("FERRY_API_TEST_PAUSE_AT must be empty, %q or %q", pauseClaimed, pauseProduced))
	}
	if c.FreshWindow <= 0 || c.VisibleWait <= 0 {
		errs = append(errs, errors.New("api: FreshWindow and VisibleWait must be > 0"))
	}
	if c.MaxPayloadBytes < 1 {
		errs = append(errs, errors.New("FERRY_API_MAX_PAYLOAD_BYTES must be positive"))
	}
	if c.MaxDelay < time.Second || c.MaxDelay > jobs.MaxAhead {
		errs = append(errs, fmt.Errorf("FERRY_API_MAX_DELAY must be between 1s and %s", jobs.MaxAhead))
	}
	if c.MaxBatchBytes < int64(c.MaxPayloadBytes) {
		errs = append(errs, errors.New("api: MaxBatchBytes must be at least FERRY_API_MAX_PAYLOAD_BYTES"))
	}
	for typ, n := range c.MaxAttemptsByType {
		if n < 1 || n > jobs.MaxMaxAttempts {
			errs = append(errs, fmt.Errorf("FERRY_API_MAX_ATTEMPTS_TYPES: %s=%d: must be between 1 and %d", typ, n, jobs.MaxMaxAttempts))
		}
	}
	if c.JobRetention < time.Hour {
		errs = append(errs, errors.New("FERRY_JOB_RETENTION must be at least 1h"))
	}
	if c.DefaultMaxQueued < 1 || c.DefaultMaxQueues < 1 {
		errs = append(errs, errors.New("FERRY_API_DEFAULT_MAX_QUEUED and FERRY_API_DEFAULT_MAX_QUEUES must be positive"))
	}
	if c.ScheduleGrace < 0 || c.MaxSchedules < 1 {
		errs = append(errs, errors.New("FERRY_SCHEDULES_MISFIRE_GRACE must be ≥ 0 and FERRY_SCHEDULES_MAX_PER_TENANT positive"))
	}
	if c.UnknownTypes != unknownTypesAccept && c.UnknownTypes != unknownTypesReject {
		errs = append(errs, fmt.Errorf("FERRY_API_UNKNOWN_TYPES %q: use accept or reject", c.UnknownTypes))
	}
	if c.KnownTypesWindow < workerTTL {
		errs = append(errs, fmt.Errorf("FERRY_API_KNOWN_TYPES_WINDOW must be at least %s", workerTTL))
	}
	if c.MaxBatchJobs < 1 || c.ProjectionBatch < 1 {
		errs = append(errs, errors.New("api: MaxBatchJobs and ProjectionBatch must be positive"))
	}
	return errors.Join(errs...)
}

// LoadConfig reads the api's settings.
func LoadConfig(l *config.Loader) Config {
	c := Config{
		IdempotencyTTL:      l.Duration("FERRY_API_IDEMPOTENCY_TTL"),
		IdempotencyClaimTTL: l.Duration("FERRY_API_IDEMPOTENCY_CLAIM_TTL"),
		ProduceInflight:     l.Int("FERRY_API_PRODUCE_INFLIGHT"),
		TestPauseAt:         l.String("FERRY_API_TEST_PAUSE_AT"),
		MaxPayloadBytes:     l.Int("FERRY_API_MAX_PAYLOAD_BYTES"),
		MaxDelay:            l.Duration("FERRY_API_MAX_DELAY"),
		MaxAttemptsByType:   l.IntMap("FERRY_API_MAX_ATTEMPTS_TYPES"),
		DefaultMaxQueued:    l.Int("FERRY_API_DEFAULT_MAX_QUEUED"),
		DefaultMaxQueues:    l.Int("FERRY_API_DEFAULT_MAX_QUEUES"),
		JobRetention:        l.Duration("FERRY_JOB_RETENTION"),
		SecretKeyFile:       filepath.Join(l.String("FERRY_DATA_DIR"), "secret-key"),
		SigningSecretGrace:  l.Duration("FERRY_HTTP_SIGNING_SECRET_GRACE"),
		Console:             console.LoadConfig(l),
		ScheduleGrace:       l.Duration("FERRY_SCHEDULES_MISFIRE_GRACE"),
		MaxSchedules:        l.Int("FERRY_SCHEDULES_MAX_PER_TENANT"),
		UnknownTypes:        l.String("FERRY_API_UNKNOWN_TYPES"),
		KnownTypesWindow:    l.Duration("FERRY_API_KNOWN_TYPES_WINDOW"),
	}
	var firingErr error
	c.ScheduleFiring, firingErr = loadBool(l, "FERRY_SCHEDULES_FIRING")
	if l.IsSet("FERRY_SECRET_KEY") {
		c.SecretKey, c.loadErr = secretbox.ParseKey(l.String("FERRY_SECRET_KEY"))
		if c.loadErr != nil {
			c.loadErr = fmt.Errorf("FERRY_SECRET_KEY: %w", c.loadErr)
		}
	}
	c.loadErr = errors.Join(c.loadErr, firingErr)
	return c
}

// loadBool reads a true/false setting.
func loadBool(l *config.Loader, name string) (bool, error) {
	v, err := strconv.ParseBool(l.String(name))
	if err != nil {
		return false, fmt.Errorf("%s: use true or false", name)
	}
	return v, nil
}

// checkMaxDelay refuses a maximum delay the topics do not retain: a job
// delayed that long could not be rebuilt after losing Redis. retention 0
// (not configured, the broker's default) is not checked.
func checkMaxDelay(maxDelay, retention time.Duration) error {
	if retention > 0 && maxDelay >= retention {
		return fmt.Errorf("FERRY_API_MAX_DELAY (%s) must be below FERRY_TOPIC_RETENTION (%s): after losing Redis, delayed jobs are rebuilt only from what the topics retain", maxDelay, retention)
	}
	return nil
}

// Needs are the connections the api uses.
var Needs = service.Needs{Postgres: true, Redis: true, Kafka: true}

// Build is the api's service.Builder.
func Build(ctx context.Context, deps *service.Deps, l *config.Loader) (service.Component, error) {
	return New(ctx, deps, LoadConfig(l))
}

// Service is the api service.
type Service struct {
	deps    *service.Deps
	cfg     Config
	log     *slog.Logger
	store   *store.Store
	idem    *idem.Store
	unique  *unique.Store
	tenants *auth.TenantCache
	counts  *ttlcache.Cache[store.Counts]
	queues  *limits.Queues
	signing *signing.Secrets
	// callbackBox opens async http jobs' callback tokens; callbacks fences
	// their reports (callbacks.go). Unset with signing.
	callbackBox *secretbox.Box
	callbacks   *callback.Attempts
	// commit produces concurrent submissions together (a group commit).
	commit *groupcommit.Committer
	// visible waits for the status projection to show what was submitted
	// before a read (findJobs).
	visible *projection.Barrier
	// schedules is the schedules table (schedules.go, schedule_fire.go).
	schedules *schedules.Store
	workers   *workers.Table // workers.go
	// project runs the status projection (deps.Projection).
	project func(context.Context) error
}

var _ service.Component = (*Service)(nil)

// statusGroup is the status projection's group: where its offsets are
// stored, which the read barrier (Service.visible) watches.
const statusGroup = "ferry-api-status"

// New returns the api over deps (which must hold Postgres, Redis and
// Kafka), applying its migrations with ctx.
func New(ctx context.Context, deps *service.Deps, cfg Config) (*Service, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if deps.Postgres == nil || deps.Redis == nil || deps.Kafka == nil {
		return nil, errors.New("api: needs Postgres, Redis and Kafka")
	}
	if err := checkMaxDelay(cfg.MaxDelay, deps.Common.TopicRetention); err != nil {
		return nil, err
	}
	log := deps.Log("api")
	if err := migrate(ctx, deps.Postgres); err != nil {
		return nil, fmt.Errorf("api: %w", err)
	}
	st := store.New(deps.Postgres, log)
	var err error
	s := &Service{
		deps:    deps,
		cfg:     cfg,
		log:     log,
		store:   st,
		idem:    idem.New(deps.Redis, cfg.IdempotencyTTL, cfg.IdempotencyClaimTTL),
		unique:  unique.New(deps.Redis, cfg.IdempotencyClaimTTL),
		tenants: auth.NewTenantCache(deps.Postgres, cfg.TenantCacheTTL),
		counts:  ttlcache.New(cfg.CountsCacheTTL, st.TenantCounts),
		queues:  limits.NewQueues(cfg.CountsCacheTTL, time.Minute, st.TenantQueues),
		workers: newWorkersTable(cfg),
	}
	s.commit = groupcommit.New(deps.Kafka.ProduceSync, produceGroupTimeout, cfg.ProduceInflight)
	s.visible = projection.NewBarrier(deps.Postgres, deps.Kafka, projection.BarrierConfig{
		Group: statusGroup, Topic: deps.Topics.Lifecycle(schema.EventEnqueued), Timeout: cfg.VisibleWait})
	if err := s.openSigning(ctx); err != nil {
		return nil, err
	}
	if s.schedules, err = schedules.New(ctx, deps.Postgres); err != nil {
		return nil, fmt.Errorf("api: %w", err)
	}
	if s.project, err = deps.Projection(projection.Config{
		Group:    statusGroup,
		Topics:   deps.Topics.LifecycleTopics(),
		Kafka:    deps.KafkaConfig("api-status"),
		MaxBatch: cfg.ProjectionBatch,
		Logger:   log,
	}, st.Apply); err != nil {
		return nil, fmt.Errorf("api: %w", err)
	}
	return s, nil
}

// migrate applies the schema migrations of the api's own tables (the
// status projection and its companions) and of the http signing secrets
// and async http callbacks it shares with the workers; the schedules store
// applies its own as it opens. `ferry migrate up` applies all of them too.
func migrate(ctx context.Context, pool *pgxpool.Pool) error {
	if err := store.Migrate(ctx, pool); err != nil {
		return err
	}
	if err := signing.Migrate(ctx, pool); err != nil {
		return err
	}
	return callback.Migrate(ctx, pool)
}

// Routes registers the api's routes with their full paths.
func (s *Service) Routes(r chi.Router) {
	r.Get("/v1/openapi.json", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(openAPI)
	})
	s.callbackRoutes(r) // callbacks.go: authenticated by their job-scoped token
	r.Group(func(r chi.Router) {
		r.Use(s.deps.Authenticate(), auth.RequireTenant)
		r.Post("/v1/jobs", s.handleSubmit)
		r.Post("/v1/jobs/batch", s.handleBatch)
		r.Get("/v1/jobs", s.handleList)
		r.Get("/v1/jobs/{id}", s.handleGet)
		r.Post("/v1/jobs/{id}/cancel", s.handleCancel)
		r.Get("/v1/stats/throughput", s.handleThroughput) // stats.go
		r.Get("/v1/http-signing/secret", s.handleGetSigningSecret)
		r.Post("/v1/http-signing/secret/rotate", s.handleRotateSigningSecret)
		s.scheduleRoutes(r) // schedules.go
	})
	r.Group(func(r chi.Router) {
		r.Use(s.deps.Authenticate(), auth.RequireAdmin)
		r.Post("/v1/admin/tenants", s.handleCreateTenant)
		r.Get("/v1/admin/tenants", s.handleListTenants)
		r.Get("/v1/admin/tenants/{id}", s.handleGetTenant)
		r.Patch("/v1/admin/tenants/{id}", s.handleUpdateTenant)
		r.Post("/v1/admin/tenants/{id}/keys", s.handleCreateKey)
		r.Get("/v1/admin/tenants/{id}/keys", s.handleListKeys)
		r.Delete("/v1/admin/keys/{key_id}", s.handleRevokeKey)
		s.quarantineRoutes(r) // quarantine.go
	})
	console.New(s.cfg.Console, s.deps.Keys, s.deps.Common.AdminKey, s.deps.Authenticate()).Routes(r)
}

// Run runs the status projection, the retention of finished jobs and,
// unless disabled, the schedules firing loop, until ctx is done.
func (s *Service) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	var loops sync.WaitGroup
	loops.Go(func() { s.retentionLoop(ctx) }) // limits.go
	if s.cfg.ScheduleFiring {
		loops.Go(func() { s.fireLoop(ctx) }) // schedule_fire.go
	}
	loops.Go(func() { s.followWorkers(ctx) }) // workers.go
	defer func() { cancel(); loops.Wait() }()
	return s.project(ctx)
}
