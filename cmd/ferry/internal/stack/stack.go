// Package stack runs every Ferry service in one process on one HTTP port:
// the front door of `ferry dev` and of the end-to-end tests.
package stack

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"

	"github.com/go-chi/chi/v5"
	"golang.org/x/sync/errgroup"

	"github.com/ferryhq/ferry/platform/config"
	"github.com/ferryhq/ferry/platform/httpx"
	"github.com/ferryhq/ferry/platform/kafkax"
	"github.com/ferryhq/ferry/platform/projection"
	"github.com/ferryhq/ferry/platform/service"
	"github.com/ferryhq/ferry/platform/telemetry"
	"github.com/ferryhq/ferry/services/api"
	"github.com/ferryhq/ferry/services/audit"
	"github.com/ferryhq/ferry/services/dlq"
	"github.com/ferryhq/ferry/services/scheduler"
	ssebridge "github.com/ferryhq/ferry/services/sse-bridge"
	"github.com/ferryhq/ferry/services/webhooks"
	"github.com/ferryhq/ferry/services/worker"
)

// Service is one service as the stack runs it.
type Service struct {
	Name  string
	Needs service.Needs
	Build service.Builder
}

// Services are every Ferry service. The worker runs once per pool (see
// worker.BuildPools) so short and long jobs both have workers in dev.
var Services = []Service{
	{"api", api.Needs, api.Build},
	{"scheduler", scheduler.Needs, scheduler.Build},
	{"worker", worker.Needs, worker.BuildPools},
	{"dlq", dlq.Needs, dlq.Build},
	{"sse-bridge", ssebridge.Needs, ssebridge.Build},
	{"audit", audit.Needs, audit.Build},
	{"webhooks", webhooks.Needs, webhooks.Build},
}

// Stack is a running set of services.
type Stack struct {
	// Addr is the address of the front door (host:port).
	Addr string
	// Deps are the connections every service shares.
	Deps    *service.Deps
	Handler http.Handler
	done    chan struct{}
	err     error
}

// Start connects to the infrastructure named in common, builds every
// service and serves them all on common.HTTPAddr (port 0 picks a free one).
// The stack runs until ctx is done; Wait returns its error.
func Start(ctx context.Context, common config.Common, l *config.Loader, tel *telemetry.Telemetry) (*Stack, error) {
	deps, err := service.Open(ctx, common, tel.Logger, service.Needs{Postgres: true, Redis: true, Kafka: true})
	if err != nil {
		return nil, err
	}
	// closeAll closes the services' own producers, then the shared
	// connections.
	var producers []func()
	closeAll := func() {
		for _, c := range producers {
			c()
		}
		deps.Close()
	}
	// Listen first: the workers' callback URL (async http jobs) defaults
	// to the front door's address, port 0 included.
	ln, err := net.Listen("tcp", common.HTTPAddr)
	if err != nil {
		closeAll()
		return nil, fmt.Errorf("listen %s: %w", common.HTTPAddr, err)
	}
	l.SetDefault("FERRY_CALLBACK_URL", "http://"+reachable(ln.Addr()))
	if l.Bool("FERRY_DEV_SHARED_PROJECTIONS") {
		deps.Projections = projection.NewShared(deps.Postgres, projection.SharedConfig{
			Kafka: deps.KafkaConfig("projections"), Logger: deps.Log("projections")})
	}
	router := httpx.NewRouter(deps.Checks(), tel.Metrics)
	comps, err := build(ctx, deps, l, router, &producers)
	if err == nil {
		err = l.Err()
		if err != nil {
			err = fmt.Errorf("configuration: %w", err)
		}
	}
	if err != nil {
		ln.Close()
		closeAll()
		return nil, err
	}
	st := &Stack{Addr: ln.Addr().String(), Deps: deps, Handler: router, done: make(chan struct{})}
	go func() {
		defer close(st.done)
		defer closeAll()
		g, gctx := errgroup.WithContext(ctx)
		g.Go(func() error { return httpx.Serve(gctx, ln, router, common.ShutdownTimeout) })
		if deps.Projections != nil {
			g.Go(func() error { return deps.Projections.Run(gctx) })
		}
		for _, c := range comps {
			g.Go(func() error { return service.RunComponent(gctx, c) })
		}
		st.err = g.Wait()
		if errors.Is(st.err, http.ErrServerClosed) {
			st.err = nil
		}
	}()
	return st, nil
}

// build builds every service, each with its own Kafka producer (whose
// Close it appends to producers), and mounts their routes on router.
func build(ctx context.Context, deps *service.Deps, l *config.Loader, router chi.Router, producers *[]func()) ([]service.Component, error) {
	var comps []service.Component
	for _, s := range Services {
		own, err := withOwnProducer(deps, s)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", s.Name, err)
		}
		if own.Kafka != deps.Kafka {
			*producers = append(*producers, own.Kafka.Close)
		}
		c, err := s.Build(ctx, own, l)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", s.Name, err)
		}
		c.Routes(router)
		comps = append(comps, c)
	}
	return comps, nil
}

// withOwnProducer returns deps with a Kafka producer of s's own, as s has
// when it runs as its own process. A client shared by every service of the
// process would queue the api's acks=all produce, which a POST waits for,
// behind the scheduler's dispatch and the workers' started and completed
// batches: a client keeps at most five produce requests in flight to a
// broker. The topics were created and checked with deps' producer.
func withOwnProducer(deps *service.Deps, s Service) (*service.Deps, error) {
	if !s.Needs.Kafka {
		return deps, nil
	}
	cl, err := kafkax.NewClient(deps.KafkaConfig("producer-" + s.Name))
	if err != nil {
		return nil, err
	}
	own := *deps
	own.Kafka = cl
	return &own, nil
}

// reachable is addr as a client on this host dials it: an unspecified
// host (listening on every interface) is loopback.
func reachable(addr net.Addr) string {
	if a, ok := addr.(*net.TCPAddr); ok && a.IP.IsUnspecified() {
		return net.JoinHostPort("127.0.0.1", strconv.Itoa(a.Port))
	}
	return addr.String()
}

// Wait blocks until the stack has stopped and returns why.
func (s *Stack) Wait() error {
	<-s.done
	return s.err
}
