package worker_test

import (
	"context"
	"testing"
	"time"

	"github.com/ferryhq/ferry/events/schema"
	"github.com/ferryhq/ferry/services/worker"
)

// TestDetachedAttemptFreesTheSlot: a handler that hands its attempt over
// (worker.Detached) reports a progress event carrying the lease, neither
// completed nor failed, and its slot runs the next job at once.
func TestDetachedAttemptFreesTheSlot(t *testing.T) {
	t.Parallel()
	b := newBench(t)
	b.start(worker.Config{Concurrency: 1}, func(r *worker.Registry) {
		r.Register("handover", func(_ context.Context, job *worker.Job) (any, error) {
			job.Progress(10, "sent")
			return nil, &worker.Detached{Lease: 90 * time.Second, Message: "taken by the receiver"}
		})
	})
	d := b.dispatch("handover", nil)
	b.waitFor("the hand-over", func(ev schema.Event) bool {
		p, ok := ev.Data.(schema.Progress)
		return ok && p.JobID == d.JobID && p.Lease.D() == 90*time.Second && p.DispatchID == d.DispatchID &&
			p.Message == "taken by the receiver" && p.Percent == 10
	})
	// The one slot is free: the next job runs to completion.
	next := b.dispatch("noop", nil)
	b.completed(next)
	for _, ev := range b.all(func(ev schema.Event) bool {
		switch x := ev.Data.(type) {
		case schema.Completed:
			return x.JobID == d.JobID
		case schema.Failed:
			return x.JobID == d.JobID
		}
		return false
	}) {
		t.Errorf("a detached attempt was reported %s", ev.Type)
	}
}
