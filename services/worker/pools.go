package worker

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/go-chi/chi/v5"

	"github.com/ferryhq/ferry/events/schema"
	"github.com/ferryhq/ferry/platform/config"
	"github.com/ferryhq/ferry/platform/service"
	"github.com/ferryhq/ferry/services/worker/handlers"
)

// BuildPools is a service.Builder that runs one worker per pool of
// FERRY_DEV_WORKER_POOLS (short and long by default) in one component, each
// with FERRY_WORKER_CONCURRENCY slots and the built-in handlers. `ferry dev`
// uses it so jobs of both pools run; FERRY_WORKER_POOL is ignored and a
// FERRY_WORKER_ID gets the pool appended.
func BuildPools(ctx context.Context, deps *service.Deps, l *config.Loader) (service.Component, error) {
	base := LoadConfig(l).WithDefaults()
	opts, err := handlerOptions(ctx, deps, base)
	if err != nil {
		return nil, err
	}
	served, err := devPools(l)
	if err != nil {
		return nil, err
	}
	var ps pools
	for _, pool := range served {
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

// devPools reads FERRY_DEV_WORKER_POOLS: a subset of schema.Pools, or none.
func devPools(l *config.Loader) ([]string, error) {
	list := l.List("FERRY_DEV_WORKER_POOLS")
	if len(list) == 1 && list[0] == "none" {
		return nil, nil
	}
	for _, p := range list {
		if !slices.Contains(schema.Pools, p) {
			return nil, fmt.Errorf("FERRY_DEV_WORKER_POOLS: %q is not a pool (%v) nor none", p, schema.Pools)
		}
	}
	return list, nil
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
