// Package service is the glue every Ferry service main shares: it reads the
// environment once, sets up telemetry, opens the Kafka, Postgres and Redis
// connections a service needs, serves its routes beside /healthz, /readyz
// and /metrics, runs its background loops and stops all of it gracefully on
// SIGINT/SIGTERM. `ferry dev` uses the same pieces to run every service in
// one process.
package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"syscall"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/sync/errgroup"

	"github.com/ferryhq/ferry/events/schema"
	"github.com/ferryhq/ferry/platform/auth"
	"github.com/ferryhq/ferry/platform/config"
	"github.com/ferryhq/ferry/platform/httpx"
	"github.com/ferryhq/ferry/platform/kafkax"
	"github.com/ferryhq/ferry/platform/pgstore"
	"github.com/ferryhq/ferry/platform/projection"
	"github.com/ferryhq/ferry/platform/redisx"
	"github.com/ferryhq/ferry/platform/telemetry"
)

// Component is one service as its own main and `ferry dev` run it.
type Component interface {
	// Routes mounts the service's HTTP routes (under /v1) on r.
	Routes(r chi.Router)
	// Run runs the background loops until ctx is done, then stops them
	// gracefully (finishing or handing back in-flight work, committing
	// what was processed) and returns.
	Run(ctx context.Context) error
}

// Needs says which connections a service uses.
type Needs struct {
	Postgres bool
	Redis    bool
	Kafka    bool
}

// Deps are a service's connections and shared settings. Fields a service
// did not ask for are nil.
type Deps struct {
	Common   config.Common
	Topics   schema.Topics
	Logger   *slog.Logger
	Postgres *pgxpool.Pool
	Redis    *redis.Client
	// Kafka is a durable producer (acks=all, idempotent). Consumers make
	// their own clients with KafkaConfig and kafkax.Group.
	Kafka *kgo.Client
	// Keys resolves API keys (needs Postgres).
	Keys *auth.KeyStore
	// Projections, when set, is the one Kafka reader of the process's
	// projections (the all-in-one process: cmd/ferry's stack); nil gives
	// each projection its own (see Projection).
	Projections *projection.Shared

	closers []func()
}

// Open connects what needs asks for, applies the shared migrations
// (tenants, keys, projection offsets) and creates Ferry's topics.
func Open(ctx context.Context, c config.Common, logger *slog.Logger, needs Needs) (*Deps, error) {
	d := &Deps{Common: c, Topics: schema.Topics{Prefix: c.TopicPrefix}, Logger: logger}
	fail := func(err error) (*Deps, error) { d.Close(); return nil, err }
	if needs.Postgres {
		pool, err := pgstore.Open(ctx, c.PostgresURL, c.PostgresMaxConns)
		if err != nil {
			return fail(err)
		}
		d.Postgres = pool
		d.closers = append(d.closers, pool.Close)
		if !c.PostgresMigrate {
			// A least-privilege role: `ferry migrate` applied the schema.
			d.closers = append(d.closers, pgstore.RequireMigrated(pool))
		}
		if err := auth.Migrate(ctx, pool); err != nil {
			return fail(err)
		}
		if err := projection.Migrate(ctx, pool); err != nil {
			return fail(err)
		}
		d.Keys = auth.NewKeyStore(pool, 0)
	}
	if needs.Redis {
		rdb, err := redisx.Connect(ctx, c.RedisURL, c.Redis)
		if err != nil {
			return fail(err)
		}
		d.Redis = rdb
		d.closers = append(d.closers, func() { rdb.Close() })
	}
	if needs.Kafka {
		cl, err := d.openKafka(ctx)
		if err != nil {
			return fail(err)
		}
		d.Kafka = cl
		d.closers = append(d.closers, cl.Close)
	}
	return d, nil
}

// KafkaConfig returns the connection settings for a client named clientID.
func (d *Deps) KafkaConfig(clientID string) kafkax.Config {
	return kafkax.Config{Brokers: d.Common.KafkaBrokers, ClientID: "ferry-" + clientID, Linger: d.Common.KafkaLinger,
		Security: d.Common.KafkaSecurity}
}

// Projection returns what runs the projection cfg with apply: its own
// consumer (projection.Run with d's Postgres and cfg.Kafka), or its place
// in the process's shared reader (Projections, which takes it before it
// starts: call Projection when the service is built, run the result in its
// Run).
func (d *Deps) Projection(cfg projection.Config, apply projection.ApplyFunc) (func(context.Context) error, error) {
	if d.Projections != nil {
		return d.Projections.Add(cfg, apply)
	}
	return func(ctx context.Context) error { return projection.Run(ctx, d.Postgres, cfg, apply) }, nil
}

// ensureTopics creates the topics Ferry uses that do not exist: the
// dispatch topics with DispatchPartitions (they bound a pool's workers), the
// others with TopicPartitions. Existing topics keep their partitions.
func (d *Deps) ensureTopics(ctx context.Context, cl *kgo.Client) error {
	c := d.Common
	dispatch := d.Topics.DispatchTopics()
	others := slices.DeleteFunc(d.Topics.All(), func(t string) bool { return slices.Contains(dispatch, t) })
	for _, g := range []struct {
		names      []string
		partitions int
	}{{others, c.TopicPartitions}, {dispatch, c.DispatchTopicPartitions()}} {
		err := kafkax.EnsureTopics(ctx, cl, kafkax.TopicSpec{
			Names: g.names, Partitions: int32(g.partitions), Retention: c.TopicRetention,
			Replication: int16(c.TopicReplication), MinInsync: c.TopicMinInsync,
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// KafkaConnectTimeout bounds how long a starting service waits for a Kafka
// broker to answer; authentication and TLS errors fail at once.
var KafkaConnectTimeout = 30 * time.Second

// openKafka opens the shared producer, checks that it reaches and
// authenticates to the brokers (a wrong password is a startup error, not a
// retry loop), creates Ferry's topics and checks their durability: in
// production a topic that could lose acknowledged records on one broker
// failure stops the start.
func (d *Deps) openKafka(ctx context.Context) (*kgo.Client, error) {
	c, log := d.Common, d.Logger
	if log == nil {
		log = slog.Default()
	}
	if c.KafkaSecurity.TLSInsecureSkipVerify {
		log.Warn("FERRY_KAFKA_TLS_INSECURE_SKIP_VERIFY is set: Kafka broker certificates are NOT verified, anyone on the path can read and forge Ferry's records")
	}
	cfg := d.KafkaConfig("producer")
	cl, err := kafkax.NewClient(cfg)
	if err != nil {
		return nil, err
	}
	err = kafkax.CheckConnection(ctx, cl, cfg, KafkaConnectTimeout)
	if err == nil {
		err = d.ensureTopics(ctx, cl)
	}
	if err == nil {
		err = kafkax.CheckDurability(ctx, cl, d.Topics.All(), c.Env == config.EnvProduction, log)
	}
	if err != nil {
		cl.Close()
		return nil, err
	}
	return cl, nil
}

// Authenticate is the authentication middleware every service's routes use.
func (d *Deps) Authenticate() func(http.Handler) http.Handler {
	return auth.Middleware(d.Keys, d.Common.AdminKey)
}

// Checks are the readiness probes of the connections that are open.
func (d *Deps) Checks() []httpx.Check {
	var cs []httpx.Check
	if d.Postgres != nil {
		cs = append(cs, httpx.Check{Name: "postgres", Check: d.Postgres.Ping})
	}
	if d.Redis != nil {
		cs = append(cs, httpx.Check{Name: "redis", Check: func(ctx context.Context) error { return d.Redis.Ping(ctx).Err() }})
	}
	if d.Kafka != nil {
		cs = append(cs, httpx.Check{Name: "kafka", Check: func(ctx context.Context) error { return kafkax.Ping(ctx, d.Kafka) }})
	}
	return cs
}

// Close closes every connection, last opened first.
func (d *Deps) Close() {
	for i := len(d.closers) - 1; i >= 0; i-- {
		d.closers[i]()
	}
	d.closers = nil
}

// Builder makes a service's Component from its connections, reading its
// own settings from l.
type Builder func(ctx context.Context, deps *Deps, l *config.Loader) (Component, error)

// Main is the entire main function of a service binary.
func Main(name string, needs Needs, build Builder) {
	TuneGC()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, name, needs, build); err != nil {
		slog.Error("exiting", "service", name, "err", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, name string, needs Needs, build Builder) error {
	l := config.NewLoader(nil)
	common := config.LoadCommon(l)
	if err := errors.Join(l.Err(), common.Validate()); err != nil {
		return fmt.Errorf("configuration: %w", err)
	}
	tel, err := telemetry.Setup(ctx, telemetry.Options{Service: serviceName(name, common), LogLevel: common.LogLevel, OTLPEndpoint: common.OTLPEndpoint})
	if err != nil {
		return err
	}
	defer tel.Shutdown(context.WithoutCancel(ctx)) //nolint:errcheck
	deps, err := Open(ctx, common, tel.Logger, needs)
	if err != nil {
		return err
	}
	defer deps.Close()
	comp, err := build(ctx, deps, l)
	if err != nil {
		return err
	}
	if err := l.Err(); err != nil {
		return fmt.Errorf("configuration: %w", err)
	}
	router := httpx.NewRouter(deps.Checks(), tel.Metrics)
	comp.Routes(router)
	return Serve(ctx, common, router, comp)
}

// Serve serves router on common.HTTPAddr and runs comp until ctx is done or
// either fails, then stops both within common.ShutdownTimeout.
func Serve(ctx context.Context, common config.Common, router http.Handler, comps ...Component) error {
	ln, err := net.Listen("tcp", common.HTTPAddr)
	if err != nil {
		return fmt.Errorf("listen %s: %w", common.HTTPAddr, err)
	}
	slog.Info("listening", "addr", ln.Addr().String())
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return httpx.Serve(gctx, ln, router, common.ShutdownTimeout) })
	for _, c := range comps {
		g.Go(func() error { return RunComponent(gctx, c) })
	}
	return g.Wait()
}

// RunComponent runs c until ctx is done. A component that gives up with a
// context error because it was stopped while starting has stopped cleanly,
// not failed.
func RunComponent(ctx context.Context, c Component) error {
	err := c.Run(ctx)
	if ctx.Err() != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) {
		return nil
	}
	return err
}

func serviceName(name string, c config.Common) string {
	if c.ServiceName != "" {
		return c.ServiceName
	}
	return "ferry-" + name
}

// Log returns the logger of the service named name: deps' logger (the
// default one when unset) tagged with the service.
func (d *Deps) Log(name string, attrs ...any) *slog.Logger {
	l := d.Logger
	if l == nil {
		l = slog.Default()
	}
	return l.With(append([]any{"service", name}, attrs...)...)
}
