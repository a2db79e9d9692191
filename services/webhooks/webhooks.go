// Package webhooks is Ferry's webhooks service: signed outbound webhooks on
// lifecycle events, retried, with a delivery log.
//
// # How it works
//
// Tenants register endpoints (POST /v1/webhooks). Each endpoint gets a
// Standard Webhooks signing secret (whsec_…), shown once and stored sealed
// with AES-256-GCM under FERRY_SECRET_KEY.
//
// The fan-out consumes every lifecycle topic in the consumer group
// ferry-webhooks through projection.Run: for each event it matches the
// tenant's active endpoints (kept in memory; each fan-out transaction
// checks an endpoint change counter and reloads them when it moved, so an
// event produced after an endpoint change is matched against it on every
// replica)
// and inserts one delivery row per matching endpoint in the same Postgres
// transaction as the Kafka offsets — an outbox, so an event is never lost
// nor fanned out twice.
//
// The delivery loop claims due deliveries with FOR UPDATE SKIP LOCKED (so
// replicas share the work), sends them through the SSRF-guarded outbound
// client with a bounded pool and a per-endpoint in-flight cap, records every
// attempt and retries failures with exponential backoff and jitter. A 410
// Gone, or failures without a success for FERRY_WEBHOOKS_DISABLE_AFTER,
// disable the endpoint. Delivery is at-least-once: receivers deduplicate on
// the webhook-id header, which is the same on every retry.
//
// # Retention
//
// A periodic loop deletes, in bounded chunks, deliveries that reached a
// final state (delivered, failed, cancelled) more than Config.Retention ago
// with their attempts, and webhook_jobs rows neither seen nor due to run
// within Config.Retention. Pending deliveries are kept however old.
package webhooks

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/go-chi/chi/v5"
	"golang.org/x/sync/errgroup"

	"github.com/ferryhq/ferry/platform/auth"
	"github.com/ferryhq/ferry/platform/config"
	"github.com/ferryhq/ferry/platform/outbound"
	"github.com/ferryhq/ferry/platform/projection"
	"github.com/ferryhq/ferry/platform/secretbox"
	"github.com/ferryhq/ferry/platform/service"
	"github.com/ferryhq/ferry/services/webhooks/internal/deliver"
	"github.com/ferryhq/ferry/services/webhooks/internal/fanout"
	"github.com/ferryhq/ferry/services/webhooks/internal/policy"
	"github.com/ferryhq/ferry/services/webhooks/internal/store"
)

// Needs lists the connections the service uses.
var Needs = service.Needs{Postgres: true, Kafka: true}

// ConsumerGroup is the fan-out's consumer group (and key of its stored offsets).
const ConsumerGroup = "ferry-webhooks"

// Config is the service's configuration.
type Config struct {
	// SecretKey is the 32-byte AES-256-GCM key sealing signing secrets
	// (FERRY_SECRET_KEY). When empty, SecretKeyFile is read, or created
	// with a random key (a development convenience).
	SecretKey []byte
	// SecretKeyFile is the key file used when SecretKey is empty. LoadConfig
	// sets it to FERRY_DATA_DIR/secret-key.
	SecretKeyFile string
	// Timeout bounds one delivery request. Defaults to 10s.
	Timeout time.Duration
	// Backoff is the wait before each retry. Defaults to
	// policy.DefaultSchedule (5s … 8h).
	Backoff []time.Duration
	// Jitter spreads each wait by ±Jitter. Defaults to 0.2; negative disables it.
	Jitter float64
	// Concurrency bounds requests in flight per replica. Defaults to 64.
	Concurrency int
	// EndpointConcurrency bounds requests in flight to one endpoint per
	// replica. Defaults to 4.
	EndpointConcurrency int
	// DisableAfter disables an endpoint whose deliveries all failed for
	// this long. Defaults to 24h; negative never disables.
	DisableAfter time.Duration
	// SecretGrace is how long a rotated-out secret keeps signing. Defaults to 24h.
	SecretGrace time.Duration
	// CacheRefresh is how often the active endpoints are reloaded when no
	// events flow (the fan-out reloads them as soon as they change). It
	// bounds how long a replica's delivery loop takes to notice an endpoint
	// enabled elsewhere. Defaults to 5s.
	CacheRefresh time.Duration
	// Poll is how often the delivery loop looks for due deliveries when
	// nothing wakes it. Defaults to 250ms.
	Poll time.Duration
	// MaxBatch bounds records per fan-out transaction. Defaults to 2000.
	MaxBatch int
	// Retention is how long a delivery (with its attempts) is kept after it
	// reached a final state, and a webhook_jobs row after its job was last
	// seen or due to run (FERRY_WEBHOOKS_RETENTION). Defaults to 720h (30
	// days). Pending deliveries are never deleted.
	Retention time.Duration
	// RetentionInterval is how often expired rows are deleted. Defaults to 1m.
	RetentionInterval time.Duration
	// RetentionChunk bounds the rows one retention statement deletes.
	// Defaults to 1000.
	RetentionChunk int
	// MaxEndpoints is max_webhook_endpoints for tenants without their own
	// (FERRY_WEBHOOKS_MAX_ENDPOINTS): every endpoint is matched against
	// every event, so a tenant may not register without bound. Defaults to 50.
	MaxEndpoints int
	// Now is the clock of the retention loop. Defaults to time.Now.
	Now func() time.Time

	loadErr error
}

// WithDefaults returns c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	config.DefaultVar(&c.Timeout, "FERRY_WEBHOOKS_TIMEOUT")
	if len(c.Backoff) == 0 {
		c.Backoff = policy.DefaultSchedule
	}
	config.Default(&c.Jitter, 0.2)
	config.DefaultVar(&c.Concurrency, "FERRY_WEBHOOKS_CONCURRENCY")
	config.DefaultVar(&c.EndpointConcurrency, "FERRY_WEBHOOKS_ENDPOINT_CONCURRENCY")
	config.DefaultVar(&c.DisableAfter, "FERRY_WEBHOOKS_DISABLE_AFTER")
	config.DefaultVar(&c.SecretGrace, "FERRY_WEBHOOKS_SECRET_GRACE")
	config.Default(&c.CacheRefresh, 5*time.Second)
	config.Default(&c.Poll, 250*time.Millisecond)
	config.Default(&c.MaxBatch, 2000)
	config.DefaultVar(&c.Retention, "FERRY_WEBHOOKS_RETENTION")
	config.Default(&c.RetentionInterval, time.Minute)
	config.Default(&c.RetentionChunk, 1000)
	config.DefaultVar(&c.MaxEndpoints, "FERRY_WEBHOOKS_MAX_ENDPOINTS")
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// Validate reports settings that cannot work.
func (c Config) Validate() error {
	errs := []error{c.loadErr}
	if len(c.SecretKey) != 0 && len(c.SecretKey) != secretbox.KeySize {
		errs = append(errs, fmt.Errorf("FERRY_SECRET_KEY must be %d bytes", secretbox.KeySize))
	}
	if len(c.SecretKey) == 0 && c.SecretKeyFile == "" {
		errs = append(errs, errors.New("FERRY_SECRET_KEY is not set"))
	}
	if c.Timeout <= 0 {
		errs = append(errs, errors.New("FERRY_WEBHOOKS_TIMEOUT must be > 0"))
	}
	for _, d := range c.Backoff {
		if d <= 0 {
			errs = append(errs, errors.New("FERRY_WEBHOOKS_BACKOFF: every wait must be > 0"))
			break
		}
	}
	if c.Jitter >= 1 {
		errs = append(errs, errors.New("webhooks: Jitter must be < 1"))
	}
	if c.Concurrency < 1 || c.EndpointConcurrency < 1 {
		errs = append(errs, errors.New("FERRY_WEBHOOKS_CONCURRENCY and FERRY_WEBHOOKS_ENDPOINT_CONCURRENCY must be ≥ 1"))
	}
	if c.SecretGrace < 0 {
		errs = append(errs, errors.New("FERRY_WEBHOOKS_SECRET_GRACE must be ≥ 0"))
	}
	if c.Retention < time.Hour {
		errs = append(errs, errors.New("FERRY_WEBHOOKS_RETENTION must be at least 1h"))
	}
	if c.RetentionInterval <= 0 || c.RetentionChunk < 1 {
		errs = append(errs, errors.New("webhooks: RetentionInterval and RetentionChunk must be positive"))
	}
	return errors.Join(errs...)
}

// LoadConfig reads the service's settings.
func LoadConfig(l *config.Loader) Config {
	c := Config{
		SecretKeyFile:       filepath.Join(l.String("FERRY_DATA_DIR"), "secret-key"),
		Timeout:             l.Duration("FERRY_WEBHOOKS_TIMEOUT"),
		Concurrency:         l.Int("FERRY_WEBHOOKS_CONCURRENCY"),
		EndpointConcurrency: l.Int("FERRY_WEBHOOKS_ENDPOINT_CONCURRENCY"),
		DisableAfter:        l.Duration("FERRY_WEBHOOKS_DISABLE_AFTER"),
		SecretGrace:         l.Duration("FERRY_WEBHOOKS_SECRET_GRACE"),
		Retention:           l.Duration("FERRY_WEBHOOKS_RETENTION"),
		MaxEndpoints:        l.Int("FERRY_WEBHOOKS_MAX_ENDPOINTS"),
	}
	var errs []error
	if l.IsSet("FERRY_SECRET_KEY") {
		k, err := secretbox.ParseKey(l.String("FERRY_SECRET_KEY"))
		if err != nil {
			errs = append(errs, fmt.Errorf("FERRY_SECRET_KEY: %w", err))
		}
		c.SecretKey = k
	}
	for _, s := range l.List("FERRY_WEBHOOKS_BACKOFF") {
		d, err := time.ParseDuration(s)
		if err != nil {
			errs = append(errs, fmt.Errorf("FERRY_WEBHOOKS_BACKOFF: %q is not a duration", s))
			continue
		}
		c.Backoff = append(c.Backoff, d)
	}
	c.loadErr = errors.Join(errs...)
	return c
}

// Service is the running service.
type Service struct {
	deps  *service.Deps
	cfg   Config
	log   *slog.Logger
	store *store.Store
	box   *secretbox.Box
	cache *fanout.Cache
	loop  *deliver.Loop
	// project runs the fan-out projection (deps.Projection).
	project func(context.Context) error
}

// Build is the service.Builder of this service.
func Build(ctx context.Context, deps *service.Deps, l *config.Loader) (service.Component, error) {
	return New(ctx, deps, LoadConfig(l))
}

// New returns the service over deps, applying its migrations with ctx.
func New(ctx context.Context, deps *service.Deps, cfg Config) (*Service, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("webhooks: %w", err)
	}
	if deps.Postgres == nil || deps.Kafka == nil {
		return nil, errors.New("webhooks: needs Postgres and Kafka")
	}
	log := deps.Log("webhooks")
	key := cfg.SecretKey
	if len(key) == 0 {
		k, created, err := secretbox.LoadOrCreateKeyFile(cfg.SecretKeyFile)
		if err != nil {
			return nil, fmt.Errorf("webhooks: FERRY_SECRET_KEY unset and key file unusable: %w", err)
		}
		log.Warn("webhooks: FERRY_SECRET_KEY is not set; using a key file (fine for development, set FERRY_SECRET_KEY in production)",
			"file", cfg.SecretKeyFile, "created", created)
		key = k
	}
	box, err := secretbox.New(key)
	if err != nil {
		return nil, fmt.Errorf("webhooks: %w", err)
	}
	if err := store.Migrate(ctx, deps.Postgres); err != nil {
		return nil, err
	}
	st := store.New(deps.Postgres)
	// Refuse to start with a key that does not open the stored secrets:
	// every delivery would fail.
	ids, sealed, err := st.SealedSecrets(ctx, 3)
	if err != nil {
		return nil, fmt.Errorf("webhooks: check secrets: %w", err)
	}
	for i := range ids {
		if _, err := box.Open(sealed[i], []byte(ids[i])); err != nil {
			return nil, fmt.Errorf("webhooks: FERRY_SECRET_KEY does not decrypt the stored signing secrets (was it changed?): %w", err)
		}
	}
	cache := fanout.NewCache(st, log)
	if err := cache.Refresh(ctx); err != nil {
		return nil, fmt.Errorf("webhooks: load endpoints: %w", err)
	}
	client := outbound.NewClient(outbound.Options{
		Allow:        deps.Common.OutboundAllow,
		Timeout:      cfg.Timeout,
		DialTimeout:  min(cfg.Timeout, 10*time.Second),
		MaxRedirects: -1, // a redirect is a failed delivery, as Standard Webhooks senders do
	})
	disableAfter := cfg.DisableAfter
	if disableAfter < 0 {
		disableAfter = 0
	}
	jitter := max(cfg.Jitter, 0)
	loop := deliver.New(deliver.Config{
		Concurrency: cfg.Concurrency, PerEndpoint: cfg.EndpointConcurrency, Timeout: cfg.Timeout,
		Retry: policy.Retry{Schedule: cfg.Backoff, Jitter: jitter}, DisableAfter: disableAfter, Poll: cfg.Poll,
	}, st, box, client, cache, log)
	s := &Service{deps: deps, cfg: cfg, log: log, store: st, box: box, cache: cache, loop: loop}
	loop.OnDisable = func(string, string) { s.refresh(ctx) }
	if s.project, err = deps.Projection(projection.Config{
		Group: ConsumerGroup, Topics: deps.Topics.LifecycleTopics(), Kafka: deps.KafkaConfig("webhooks"),
		MaxBatch: cfg.MaxBatch, Logger: log,
	}, cache.Apply); err != nil {
		return nil, fmt.Errorf("webhooks: %w", err)
	}
	return s, nil
}

// Routes mounts the service's routes.
func (s *Service) Routes(r chi.Router) {
	r.Group(func(r chi.Router) {
		r.Use(s.deps.Authenticate(), auth.RequireTenant)
		r.Post("/v1/webhooks", s.handleCreate)
		r.Get("/v1/webhooks", s.handleList)
		r.Get("/v1/webhooks/{id}", s.handleGet)
		r.Delete("/v1/webhooks/{id}", s.handleDelete)
		r.Post("/v1/webhooks/{id}/rotate-secret", s.handleRotate)
		r.Post("/v1/webhooks/{id}/enable", s.handleEnable)
		r.Get("/v1/webhooks/{id}/deliveries", s.handleDeliveries)
		r.Get("/v1/webhooks/{id}/deliveries/{delivery}", s.handleDelivery)
		r.Post("/v1/webhooks/{id}/deliveries/{delivery}/replay", s.handleReplay)
		r.Get("/v1/webhooks/deliveries", s.handleJobDeliveries)
	})
}

// Run runs the fan-out, the endpoint cache, the delivery loop and the
// retention loop until ctx is done; in-flight deliveries finish (bounded by
// Timeout) and are recorded.
func (s *Service) Run(ctx context.Context) error {
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return s.project(gctx) })
	g.Go(func() error { s.cache.Run(gctx, s.cfg.CacheRefresh); return nil })
	g.Go(func() error { return s.loop.Run(gctx) })
	g.Go(func() error { service.Every(gctx, s.cfg.RetentionInterval, s.expireOnce); return nil })
	return g.Wait()
}

func (s *Service) expireOnce(ctx context.Context) {
	deliveries, jobs, err := s.store.Expire(ctx, s.cfg.Now().Add(-s.cfg.Retention), s.cfg.RetentionChunk)
	switch {
	case err != nil && ctx.Err() == nil:
		s.log.ErrorContext(ctx, "webhooks: retention failed", "err", err)
	case deliveries > 0 || jobs > 0:
		s.log.InfoContext(ctx, "webhooks: expired rows deleted", "deliveries", deliveries, "jobs", jobs,
			"retention", s.cfg.Retention.String())
	}
}

// refresh reloads the endpoint cache after a change made through this
// replica, so its delivery loop sees it at once (the fan-out of every
// replica sees it in its next transaction anyway).
func (s *Service) refresh(ctx context.Context) {
	if err := s.cache.Refresh(context.WithoutCancel(ctx)); err != nil {
		s.log.Warn("webhooks: refresh endpoints", "err", err)
	}
}
