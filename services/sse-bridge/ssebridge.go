// Package ssebridge is Ferry's sse-bridge service: live Server-Sent Event
// streams per job (GET /v1/jobs/{id}/events) and per tenant (GET
// /v1/events), resumable with Last-Event-ID.
//
// # Design
//
// Each process keeps a bounded event log in memory (internal/eventlog),
// fed by its own consumer of every lifecycle partition: the hot path writes
// nothing to Postgres or Redis. The log numbers events in the order streams
// show them; that number is the SSE id. An event consumed before its
// predecessor (a completed before its started: they travel on different
// topics) waits in the log's hold until the predecessor is logged, for at
// most OrderHold. The log hands each new event to an in-memory hub that
// fans it out to the process's clients, so a process consumes Kafka once
// however many clients it serves. A connecting client subscribes to the hub
// first, then replays from the log (ids > Last-Event-ID), then switches to
// the live events, dropping those it already sent: no gap, no duplicate.
//
// Slow clients never hold up the consumer or other clients: each has a
// bounded buffer (FERRY_SSE_BUFFER). A client whose buffer overflows (a
// burst) catches up from the log at its own pace; one further behind than
// MaxLag events, or that accepts no data for WriteTimeout, is sent `event:
// overflow` (when it still can be) and disconnected. The log keeps the
// newest LogSize events, none older than Retention; resuming from before
// that, or with an id of another process, answers `event: reset`. See
// docs/sse.md.
package ssebridge

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	"golang.org/x/sync/errgroup"

	"github.com/ferryhq/ferry/platform/auth"
	"github.com/ferryhq/ferry/platform/config"
	"github.com/ferryhq/ferry/platform/kafkax"
	"github.com/ferryhq/ferry/platform/service"
	"github.com/ferryhq/ferry/services/sse-bridge/internal/eventlog"
	"github.com/ferryhq/ferry/services/sse-bridge/internal/hub"
)

// Needs lists the connections the service uses.
var Needs = service.Needs{Postgres: true, Kafka: true}

// Config is the service's configuration.
type Config struct {
	// Retention is how long events stay resumable. Defaults to 24h.
	Retention time.Duration
	// KeepAlive is the interval of keep-alive comments. Defaults to 15s.
	KeepAlive time.Duration
	// Buffer is the number of events buffered per client before it is
	// disconnected with an overflow event. Defaults to 256.
	Buffer int
	// MaxLag is how many events a client whose buffer overflowed may catch
	// up on from the log before it is sent `event: overflow` and
	// disconnected. Defaults to 8 × Buffer.
	MaxLag int
	// WriteTimeout bounds one write to a client; a client that accepts no
	// data for that long is disconnected. Defaults to 10s.
	WriteTimeout time.Duration
	// JobGrace is how long a job stream waits for a job the log has not
	// seen yet (just submitted) before answering 404. Defaults to 2s.
	JobGrace time.Duration
	// LogSize is the most events the log of one process keeps for replay
	// and resumption (FERRY_SSE_LOG_SIZE). Defaults to 50000.
	LogSize int
	// OrderHold is the longest an event waits in the log's hold for its
	// predecessor (a completed for its started, a started for its
	// enqueued) when the topics deliver them out of order
	// (FERRY_SSE_ORDER_HOLD). Defaults to 3s; negative disables holding:
	// events are logged in arrival order and a started consumed after its
	// job's completed is dropped.
	OrderHold time.Duration
	// PruneInterval is how often retention runs. Defaults to 1m.
	PruneInterval time.Duration
	// MaxStreams bounds the streams one tenant may have open in this
	// process (FERRY_SSE_MAX_STREAMS); one more answers 429
	// too_many_streams. Defaults to 100.
	MaxStreams int
	// KeyCheck is how often open streams' API keys are checked against
	// Postgres: a stream of a key revoked (or of a tenant disabled) ends
	// within this interval (FERRY_SSE_KEY_CHECK). Defaults to 2s.
	KeyCheck time.Duration
	// Now is the clock. Defaults to time.Now.
	Now func() time.Time
}

// WithDefaults returns c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	config.DefaultVar(&c.Retention, "FERRY_SSE_RETENTION")
	config.DefaultVar(&c.KeepAlive, "FERRY_SSE_KEEPALIVE")
	config.Default(&c.WriteTimeout, 10*time.Second)
	config.Default(&c.JobGrace, 2*time.Second)
	config.DefaultVar(&c.OrderHold, "FERRY_SSE_ORDER_HOLD")
	config.Default(&c.PruneInterval, time.Minute)
	config.DefaultVar(&c.Buffer, "FERRY_SSE_BUFFER")
	config.Default(&c.MaxLag, 8*c.Buffer)
	config.DefaultVar(&c.LogSize, "FERRY_SSE_LOG_SIZE")
	config.DefaultVar(&c.MaxStreams, "FERRY_SSE_MAX_STREAMS")
	config.DefaultVar(&c.KeyCheck, "FERRY_SSE_KEY_CHECK")
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// Validate reports settings that cannot work.
func (c Config) Validate() error {
	var errs []error
	if c.Retention < time.Minute {
		errs = append(errs, errors.New("FERRY_SSE_RETENTION must be at least 1m"))
	}
	if c.KeepAlive <= 0 {
		errs = append(errs, errors.New("FERRY_SSE_KEEPALIVE must be positive"))
	}
	if c.Buffer < 1 {
		errs = append(errs, errors.New("FERRY_SSE_BUFFER must be at least 1"))
	}
	if c.LogSize < 1 {
		errs = append(errs, errors.New("FERRY_SSE_LOG_SIZE must be at least 1"))
	}
	if c.MaxStreams < 1 {
		errs = append(errs, errors.New("FERRY_SSE_MAX_STREAMS must be at least 1"))
	}
	if c.KeyCheck <= 0 {
		errs = append(errs, errors.New("FERRY_SSE_KEY_CHECK must be positive"))
	}
	if c.WriteTimeout <= 0 || c.MaxLag < 0 || c.JobGrace < 0 || c.PruneInterval <= 0 {
		errs = append(errs, errors.New("ssebridge: WriteTimeout and PruneInterval must be positive"))
	}
	return errors.Join(errs...)
}

// LoadConfig reads the service's settings.
func LoadConfig(l *config.Loader) Config {
	return Config{
		Retention:  l.Duration("FERRY_SSE_RETENTION"),
		KeepAlive:  l.Duration("FERRY_SSE_KEEPALIVE"),
		Buffer:     l.Int("FERRY_SSE_BUFFER"),
		OrderHold:  l.Duration("FERRY_SSE_ORDER_HOLD"),
		LogSize:    l.Int("FERRY_SSE_LOG_SIZE"),
		MaxStreams: l.Int("FERRY_SSE_MAX_STREAMS"),
		KeyCheck:   l.Duration("FERRY_SSE_KEY_CHECK"),
	}
}

// Service is the running service.
type Service struct {
	deps   *service.Deps
	cfg    Config
	log    *slog.Logger
	events *eventlog.Log
	hub    *hub.Hub
	slots  *streamSlots
	keys   *keyWatch

	conns     metric.Int64UpDownCounter
	overflows metric.Int64Counter
}

var _ service.Component = (*Service)(nil)

// New returns the service over deps (which must hold Postgres, for API
// keys, and Kafka), applying its migrations with ctx.
func New(ctx context.Context, deps *service.Deps, cfg Config) (*Service, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if deps.Postgres == nil {
		return nil, errors.New("ssebridge: needs Postgres")
	}
	log := deps.Log("sse-bridge")
	if err := eventlog.Migrations.Apply(ctx, deps.Postgres); err != nil {
		return nil, fmt.Errorf("ssebridge: %w", err)
	}
	h := hub.New(cfg.Buffer)
	meter := otel.Meter("ferry/sse-bridge")
	conns, err := meter.Int64UpDownCounter("ferry.sse.connections",
		metric.WithDescription("Open SSE streams."), metric.WithUnit("{connection}"))
	if err != nil {
		return nil, err
	}
	overflows, err := meter.Int64Counter("ferry.sse.overflows",
		metric.WithDescription("SSE clients disconnected because they fell too far behind."), metric.WithUnit("{connection}"))
	if err != nil {
		return nil, err
	}
	return &Service{
		deps: deps, cfg: cfg, log: log, hub: h,
		events: eventlog.New(eventlog.Config{Size: cfg.LogSize, Hold: max(cfg.OrderHold, 0), Now: cfg.Now}, h, log),
		slots:  newStreamSlots(cfg.MaxStreams),
		keys:   newKeyWatch(deps.Postgres),
		conns:  conns, overflows: overflows,
	}, nil
}

// Build is the service.Builder of this service.
func Build(ctx context.Context, deps *service.Deps, l *config.Loader) (service.Component, error) {
	return New(ctx, deps, LoadConfig(l))
}

// Routes registers the SSE routes with their full paths.
func (s *Service) Routes(r chi.Router) {
	r.Group(func(r chi.Router) {
		r.Use(s.deps.Authenticate(), auth.RequireTenant)
		r.Get("/v1/jobs/{id}/events", s.handleJobEvents)
		r.Get("/v1/events", s.handleTenantEvents)
	})
}

// Streams returns the number of SSE streams this process has open.
func (s *Service) Streams() int { return s.hub.Len() }

// Run runs the log's Kafka consumer, retention, the hold's release and the
// key check until ctx is done.
func (s *Service) Run(ctx context.Context) error {
	g, ctx := errgroup.WithContext(ctx)
	if s.deps.Kafka != nil || len(s.deps.Common.KafkaBrokers) > 0 {
		cl, err := s.newConsumerClient()
		if err != nil {
			return err
		}
		defer cl.Close()
		topics := s.deps.Topics.LifecycleTopics()
		c := eventlog.NewConsumer(cl, topics, s.events, s.log)
		g.Go(func() error { return c.Run(ctx) })
		g.Go(func() error {
			kafkax.WatchLag(ctx, cl, lagGroup, topics, c.Positions)
			return nil
		})
	}
	unregister, err := s.registerLogGauges()
	if err != nil {
		return err
	}
	defer unregister()
	g.Go(func() error { service.Every(ctx, s.cfg.PruneInterval, s.prune); return nil })
	g.Go(func() error { service.Every(ctx, s.cfg.KeyCheck, s.checkKeys); return nil })
	if s.cfg.OrderHold > 0 {
		g.Go(func() error { service.Every(ctx, s.cfg.OrderHold/4, s.releaseHeld); return nil })
	}
	return g.Wait()
}

// registerLogGauges reports the log's horizon — the events it holds and
// the age of the oldest — which bounds how far back a client can resume
// (FERRY_SSE_LOG_SIZE, FERRY_SSE_RETENTION). The returned func unregisters.
func (s *Service) registerLogGauges() (func(), error) {
	m := otel.Meter("ferry/sse-bridge")
	events, err1 := m.Int64ObservableGauge("ferry.sse.log.events", metric.WithUnit("{event}"),
		metric.WithDescription("Events in this process's SSE log, available to replay and resume."))
	age, err2 := m.Float64ObservableGauge("ferry.sse.log.horizon", metric.WithUnit("s"),
		metric.WithDescription("Age of the oldest event in this process's SSE log: how far back a client can resume."))
	if err := errors.Join(err1, err2); err != nil {
		return nil, err
	}
	reg, err := m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		n, oldest := s.events.Horizon()
		o.ObserveInt64(events, int64(n))
		if n > 0 {
			o.ObserveFloat64(age, s.cfg.Now().Sub(oldest).Seconds())
		}
		return nil
	}, events, age)
	if err != nil {
		return nil, err
	}
	return func() { _ = reg.Unregister() }, nil
}

// lagGroup names the log's consumer in the ferry.kafka.consumer.lag gauge
// (it is no Kafka consumer group: each process reads every partition).
const lagGroup = "ferry-sse-log"

// logFetchMinBytes and logFetchMaxWait batch the log's fetches: the broker
// answers once 64 KiB wait or 50 ms have passed, instead of on every
// produced record. At 1,000 jobs/s (four records each) a fetch per record
// woke this consumer thousands of times a second, and the broker and this
// process paid a request for each; 50 ms more before a stream shows an
// event is nothing a person watching it notices. At 1,000 jobs/s 64 KiB
// come in ~16 ms; when little happens, the wait is what an idle stack
// pays for: 20 ms (this fetch 50 times a second, over every lifecycle
// partition) cost an idle `ferry dev` ~30 % more CPU than 50 ms
// (docs/performance.md, Round 18).
const (
	logFetchMinBytes = 64 << 10
	logFetchMaxWait  = 50 * time.Millisecond
)

// newConsumerClient returns a client that reads every lifecycle partition,
// starting with about LogSize records in all, spread over the partitions.
func (s *Service) newConsumerClient() (*kgo.Client, error) {
	topics := s.deps.Topics.LifecycleTopics()
	perPartition := s.cfg.LogSize / (len(topics) * max(s.deps.Common.TopicPartitions, 1))
	cl, err := kafkax.NewClient(s.deps.KafkaConfig("sse-log"),
		kgo.ConsumeTopics(topics...),
		kgo.ConsumeResetOffset(eventlog.StartOffset(perPartition)),
		kgo.FetchMinBytes(logFetchMinBytes), kgo.FetchMaxWait(logFetchMaxWait))
	if err != nil {
		return nil, fmt.Errorf("ssebridge: %w", err)
	}
	return cl, nil
}

// releaseHeld logs held events whose hold passed while no records arrived.
func (s *Service) releaseHeld(context.Context) {
	s.events.ReleaseHeld()
}

// checkKeys ends the streams of keys revoked since the last check.
func (s *Service) checkKeys(ctx context.Context) {
	if err := s.keys.check(ctx); err != nil && ctx.Err() == nil {
		s.log.Warn("sse-bridge: checking stream keys", "err", err)
	}
}

// prune evicts events older than the retention window.
func (s *Service) prune(context.Context) {
	if n := s.events.Prune(s.cfg.Now().Add(-s.cfg.Retention)); n > 0 {
		s.log.Debug("sse-bridge: retention", "evicted", n)
	}
}
