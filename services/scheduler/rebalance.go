package scheduler

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferryhq/ferry/events/schema"
)

// onRevoked is the consumer's OnPartitionsRevoked callback. Setting one
// replaces franz-go's default, which commits what was marked: so it
// commits the marked offsets first, as the default would, then holds the
// leases.
func (s *Service) onRevoked(ctx context.Context, cl *kgo.Client, moved map[string][]int32) {
	if err := cl.CommitMarkedOffsets(ctx); err != nil {
		s.log.Warn("committing offsets on revoke", "err", err)
	}
	s.holdLeasesOnRebalance(ctx, cl, moved)
}

// holdLeasesOnRebalance is the consumer's OnPartitionsAssigned callback
// (and part of onRevoked): when partitions that renew or end leases
// (started, progress, completed, failed) change hands, every in-flight
// lease is held for one more lease from now (qstore.Store.HoldLeases says
// why), so the records waiting in those partitions are applied before any
// lease is taken for a lost worker.
func (s *Service) holdLeasesOnRebalance(ctx context.Context, _ *kgo.Client, moved map[string][]int32) {
	t := s.deps.Topics
	renewing := false
	for _, et := range []schema.EventType{schema.EventStarted, schema.EventProgress, schema.EventCompleted, schema.EventFailed} {
		if len(moved[t.Lifecycle(et)]) > 0 {
			renewing = true
		}
	}
	if !renewing {
		return
	}
	hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	n, err := s.store.HoldLeases(hctx, s.cfg.Pools, s.cfg.Now(), s.cfg.Lease)
	if err != nil {
		s.log.Warn("consumer group rebalance: holding in-flight leases", "err", err)
		return
	}
	if n > 0 {
		s.log.Info("consumer group rebalance: in-flight leases held for one lease", "leases", n)
	}
}
