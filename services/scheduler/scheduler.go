package scheduler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/sync/errgroup"

	"github.com/ferryhq/ferry/events/schema"
	"github.com/ferryhq/ferry/platform/config"
	"github.com/ferryhq/ferry/platform/kafkax"
	"github.com/ferryhq/ferry/platform/service"
	"github.com/ferryhq/ferry/services/scheduler/internal/qstore"
	"github.com/ferryhq/ferry/services/scheduler/internal/retry"
)

// Source is the CloudEvents source of the records the scheduler produces.
const Source = "ferry/scheduler"

// Group is the scheduler's consumer group.
const Group = "ferry-scheduler"

// Service is the scheduler. It implements service.Component.
type Service struct {
	cfg    Config
	deps   *service.Deps
	log    *slog.Logger
	store  *qstore.Store
	policy retry.Policy
	// loops holds what each pool's dispatch loop shares with the consumer
	// (steps.go).
	loops map[string]*poolLoop
	// gate is held shared by every batch apply and dispatch step and
	// exclusively while the Redis state is rebuilt, so normal work pauses.
	gate sync.RWMutex
	// lost (capacity 1) tells the recovery loop that a script found the
	// Redis state gone.
	lost chan struct{}
	// owner identifies this replica as holder of the rebuild lock.
	owner string
	// produces counts dispatch steps whose records are not all
	// acknowledged yet (dispatch.go); Run waits for them before returning.
	produces sync.WaitGroup
}

var _ service.Component = (*Service)(nil)

// Build is the scheduler's service.Builder.
func Build(ctx context.Context, deps *service.Deps, l *config.Loader) (service.Component, error) {
	cfg, err := LoadConfig(l)
	if err != nil {
		return nil, err
	}
	return New(ctx, deps, cfg)
}

// New returns a scheduler over deps (which must have Redis and Kafka),
// applying its migrations with ctx when deps has Postgres. Without Postgres
// every tenant has weight 1 and no max_running, and the queue routes are
// not mounted.
func New(ctx context.Context, deps *service.Deps, cfg Config) (*Service, error) {
	if deps == nil || deps.Redis == nil || deps.Kafka == nil {
		return nil, errors.New("scheduler: needs Redis and Kafka")
	}
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if deps.Postgres != nil {
		if err := Migrate(ctx, deps.Postgres); err != nil {
			return nil, fmt.Errorf("scheduler: %w", err)
		}
	}
	log := deps.Log("scheduler")
	s := &Service{
		cfg:    cfg,
		deps:   deps,
		log:    log,
		store:  newStore(deps.Redis, cfg),
		policy: retry.Policy{Base: cfg.RetryBase, Max: cfg.RetryMax, Rand: cfg.Rand, Types: cfg.RetryTypes},
		loops:  make(map[string]*poolLoop, len(cfg.Pools)),
		lost:   make(chan struct{}, 1),
		owner:  schema.NewEventID(),
	}
	for _, p := range cfg.Pools {
		s.loops[p] = newPoolLoop()
	}
	return s, nil
}

func newStore(rdb *redis.Client, cfg Config) *qstore.Store {
	return qstore.New(rdb, qstore.Options{Prefix: cfg.KeyPrefix, Lease: cfg.Lease, TerminalTTL: cfg.TerminalTTL,
		DefaultEstimate: cfg.DefaultEstimate})
}

// Topics are the topics the scheduler consumes.
func (s *Service) Topics() []string {
	t := s.deps.Topics
	return []string{
		t.Lifecycle(schema.EventEnqueued), t.Lifecycle(schema.EventStarted), t.Lifecycle(schema.EventProgress),
		t.Lifecycle(schema.EventCompleted), t.Lifecycle(schema.EventFailed), t.Lifecycle(schema.EventCancelled),
		t.Workers(),
	}
}

// Run consumes and dispatches until ctx is done. On stop it finishes the
// batch in hand, commits it and leaves the group.
//
// When Redis has no scheduler state (first start, or Redis lost it), Run
// first rebuilds it from the log (see recover.go); while running, it does
// the same as soon as the state disappears.
func (s *Service) Run(ctx context.Context) error {
	if err := s.store.Load(ctx); err != nil {
		return err
	}
	if err := s.recoverState(ctx); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	// Offsets are marked once a batch's effects are in Redis and its records
	// in Kafka, and committed in the background (every second, on revoke and
	// on close): a synchronous commit per batch would hold up the next poll.
	opts := append(kafkax.MarkedGroup(Group, s.Topics()...), kgo.BlockRebalanceOnPoll(),
		kgo.OnPartitionsAssigned(s.holdLeasesOnRebalance), kgo.OnPartitionsRevoked(s.onRevoked))
	cl, err := kafkax.NewClient(s.deps.KafkaConfig("scheduler"), opts...)
	if err != nil {
		return fmt.Errorf("scheduler: %w", err)
	}
	defer cl.Close()

	defer s.registerGauges()()     // observability: queue gauges (observe.go)
	defer s.registerGateGauges()() // flow control (breakers.go)
	defer s.registerRouteGauge()() // type-aware routing: unroutable jobs
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { kafkax.WatchLag(gctx, cl, Group, s.Topics(), nil); return nil })
	g.Go(func() error { return s.consume(gctx, cl) })
	g.Go(func() error { return s.watchState(gctx) })
	g.Go(func() error { return s.checkpointLoop(gctx) })      // partial Redis loss (checkpoint.go)
	g.Go(func() error { return s.pruneLoop(gctx) })           // empty queues leave the indexes (prune.go)
	g.Go(func() error { return s.syncLoop(gctx) })            // fair-share settings (tenants.go)
	g.Go(func() error { return s.publishBreakersLoop(gctx) }) // breaker transitions (breakers.go)
	for _, p := range s.cfg.Pools {
		g.Go(func() error { return s.dispatchLoop(gctx, p) })
	}
	err = g.Wait()
	s.produces.Wait()
	return err
}

// wakeAll makes every dispatch loop run a step at once.
func (s *Service) wakeAll() {
	s.wakePools(qstore.Wake{All: true}, nil)
}

// wakePools makes the dispatch loops w names, but for those in except, run
// a step at once; a loop already woken runs one step for all its wakes.
func (s *Service) wakePools(w qstore.Wake, except map[string]bool) {
	for pool, l := range s.loops {
		if w.Has(pool) && !except[pool] {
			l.signal()
		}
	}
}
