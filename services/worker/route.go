package worker

import (
	"context"
	"log/slog"
	"slices"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferryhq/ferry/events/schema"
)

// Type-aware routing, the worker's side. The worker announces, with its
// slots, the job types it has handlers for and the dispatch partitions it
// owns (schema.WorkerRouting); the scheduler dispatches a job only to a
// partition owned by a worker that handles its type. A dispatch that lands
// here anyway (its partition moved to this worker during a rebalance, or
// the scheduler routed by an older announcement) is never failed: it is
// rejected, and the scheduler re-queues it at the front without using up
// an attempt.

// routing is what the worker announces it can take now.
func (s *Service) routing() *schema.WorkerRouting {
	s.mu.Lock()
	parts := make([]int32, 0, len(s.assigned))
	for p := range s.assigned {
		parts = append(parts, p)
	}
	s.mu.Unlock()
	slices.Sort(parts)
	return &schema.WorkerRouting{Types: s.reg.Types(), Partitions: parts}
}

// announceSoon makes the status loop announce at once (never blocks): the
// scheduler learns of a rebalance within a round trip, not a status
// interval, so few dispatches go to a partition's former owner.
func (s *Service) announceSoon() {
	select {
	case s.reannounce <- struct{}{}:
	default:
	}
}

// reject hands a dispatch of a type the worker lacks back to the scheduler
// in an announcement of its own, and commits past it. Should the
// announcement be lost, the dispatch's lease expires and the job is
// re-queued just the same (worker_lost, no attempt used).
func (s *Service) reject(ctx context.Context, rec *kgo.Record, d schema.Dispatch, log *slog.Logger) {
	log.Info("rejecting dispatch: no handler for its type here; the scheduler re-routes it", "type", d.Job.Type)
	st := s.status(false)
	st.Rejected = []schema.DispatchRef{{JobRef: d.JobRef, DispatchID: d.DispatchID}}
	s.produceAsync(ctx, st)
	s.consumer.MarkCommitRecords(rec)
}
