package scheduler

import (
	"context"

	"github.com/ferryhq/ferry/platform/service"
)

// pruneLoop sweeps every pool's queue indexes each QueueIdle until ctx
// ends: a queue found empty on two sweeps in a row leaves them
// (qstore.Prune). Any number of replicas may run it; each sweep is one
// atomic script call per pool.
func (s *Service) pruneLoop(ctx context.Context) error {
	service.Every(ctx, s.cfg.QueueIdle, func(ctx context.Context) {
		s.gate.RLock() // never during a rebuild
		defer s.gate.RUnlock()
		for _, p := range s.cfg.Pools {
			if _, _, err := s.store.Prune(ctx, p, s.cfg.Now(), s.cfg.QueueIdle); err != nil && ctx.Err() == nil {
				s.log.Warn("pruning the queue index", "pool", p, "err", err)
			}
		}
	})
	return nil
}
