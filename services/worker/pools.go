package worker

import (
	"context"
	"errors"

	"github.com/go-chi/chi/v5"

	"github.com/ferryhq/ferry/events/schema"
	"github.com/ferryhq/ferry/platform/config"
	"github.com/ferryhq/ferry/platform/service"
	"github.com/ferryhq/ferry/services/worker/handlers"
)

// BuildPools is a service.Builder that runs one worker per pool (short and
// long) in one component, each with FERRY_WORKER_CONCURRENCY slots and the
// built-in handlers. `ferry dev` uses it so jobs of both pools run;
// FERRY_WORKER_POOL is ignored and a FERRY_WORKER_ID gets the pool appended.
func BuildPools(_ context.Context, deps *service.Deps, l *config.Loader) (service.Component, error) {
	base := LoadConfig(l).WithDefaults()
	opts, err := handlerOptions(deps, base)
	if err != nil {
		return nil, err
	}
	var ps pools
	for _, pool := range schema.Pools {
		cfg := base
		cfg.Pool = pool
		cfg.WorkerID = base.WorkerID + "-" + pool
		reg := NewRegistry()
		handlers.Register(reg, opts)
		s, err := New(deps, cfg, reg)
		if err != nil {
			return nil, err
		}
		ps = append(ps, s)
	}
	return ps, nil
}

// pools runs several workers as one component.
type pools []*Service

func (ps pools) Routes(chi.Router) {}

// Run runs every worker and returns when all have stopped.
func (ps pools) Run(ctx context.Context) error {
	errs := make(chan error, len(ps))
	for _, s := range ps {
		go func() { errs <- s.Run(ctx) }()
	}
	var all []error
	for range ps {
		all = append(all, <-errs)
	}
	return errors.Join(all...)
}
