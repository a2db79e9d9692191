package worker_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/ferryhq/ferry/events/schema"
	"github.com/ferryhq/ferry/services/worker"
)

func withNotBefore(t time.Time) jobOpt {
	return func(x *schema.Dispatch) { x.NotBefore = &t }
}

// TestNotBeforeNeverStartsEarly: a dispatch leased ahead of its due time
// starts (handler called, started_at) no earlier than its not_before, and
// does not hold up a dispatch that may start at once.
func TestNotBeforeNeverStartsEarly(t *testing.T) {
	t.Parallel()
	b := newBench(t)
	var mu sync.Mutex
	calledAt := map[string]time.Time{}
	b.start(worker.Config{Concurrency: 4}, func(r *worker.Registry) {
		r.Register("stamp", func(_ context.Context, job *worker.Job) (any, error) {
			mu.Lock()
			calledAt[job.ID] = time.Now()
			mu.Unlock()
			return nil, nil
		})
	})
	due := time.Now().Add(1500 * time.Millisecond).Truncate(time.Millisecond).UTC()
	held := b.dispatch("stamp", nil, withNotBefore(due))
	now := b.dispatch("stamp", nil)
	b.completed(now)
	b.completed(held)
	started := b.waitFor("started of the held job", ofJob[schema.Started](held.JobID)).Data.(schema.Started)
	mu.Lock()
	called := calledAt[held.JobID]
	mu.Unlock()
	if started.StartedAt.Before(due) || called.Before(due) {
		t.Fatalf("started at %v, handler called at %v: before its not_before %v", started.StartedAt, called, due)
	}
}

// TestNotBeforeCancelledMeanwhileNeverRuns: a job cancelled while its
// dispatch waits for its not_before is dropped when the wait ends: its
// handler is never called and it reports nothing.
func TestNotBeforeCancelledMeanwhileNeverRuns(t *testing.T) {
	t.Parallel()
	b := newBench(t)
	var mu sync.Mutex
	calls := map[int]int{}
	b.start(worker.Config{Concurrency: 2}, func(r *worker.Registry) {
		r.Register("hold", func(ctx context.Context, job *worker.Job) (any, error) {
			mu.Lock()
			calls[job.Attempt]++
			mu.Unlock()
			if job.Attempt == 1 { // runs until cancelled: the sign the cancellation was read
				<-ctx.Done()
				return nil, ctx.Err()
			}
			return nil, nil
		})
	})
	// Attempt 2 of job x waits for its not_before; attempt 1 of the same
	// job (same partition, read after it) runs meanwhile on the other slot.
	due := time.Now().Add(3 * time.Second).UTC()
	waiting := b.dispatch("hold", nil, withAttempt(2), withNotBefore(due))
	running := b.dispatch("hold", nil, withID(waiting.JobID), withAttempt(1))
	b.waitFor("attempt 1 started", func(ev schema.Event) bool {
		s, ok := ev.Data.(schema.Started)
		return ok && s.JobID == waiting.JobID && s.Attempt == 1
	})
	// Cancelling attempt 2 stops the running attempt 1 too: once its
	// failure is seen, the worker has read the cancellation.
	b.produce(b.topics.Lifecycle(schema.EventCancelled), schema.Cancelled{JobRef: waiting.JobRef, Reason: "test", At: time.Now().UTC()})
	b.failed(running)
	// Past the not_before, a later attempt runs: the waiting dispatch's
	// turn came and went.
	time.Sleep(time.Until(due))
	probe := b.dispatch("hold", nil, withID(waiting.JobID), withAttempt(3))
	b.completed(probe)
	if n := len(b.all(func(ev schema.Event) bool {
		s, ok := ev.Data.(schema.Started)
		return ok && s.JobID == waiting.JobID && s.Attempt == 2
	})); n != 0 {
		t.Fatalf("the cancelled attempt 2 started %d times", n)
	}
	mu.Lock()
	defer mu.Unlock()
	if calls[2] != 0 {
		t.Fatalf("the cancelled attempt's handler was called %d times", calls[2])
	}
}
