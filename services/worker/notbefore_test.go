package worker_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferryhq/ferry/events/schema"
	"github.com/ferryhq/ferry/platform/kafkax"
	"github.com/ferryhq/ferry/platform/testenv"
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
	addr := testenv.Kafka(t)
	b := newBenchOn(t, addr)
	var mu sync.Mutex
	calls := map[string]int{}
	b.start(worker.Config{Concurrency: 2}, func(r *worker.Registry) {
		r.Register("hold", func(ctx context.Context, job *worker.Job) (any, error) {
			mu.Lock()
			calls[job.ID]++
			mu.Unlock()
			<-ctx.Done() // runs until cancelled
			return nil, ctx.Err()
		})
	})
	due := time.Now().Add(3 * time.Second).UTC()
	waiting := b.dispatch("hold", nil, withNotBefore(due))
	sentinel := b.dispatch("hold", nil)
	b.waitFor("sentinel started", ofJob[schema.Started](sentinel.JobID))
	// Both cancellations on one partition, the waiting job's first: once
	// the sentinel fails cancelled, the worker has read the other one.
	cl, err := kafkax.NewClient(kafkax.Config{Brokers: []string{addr}, ClientID: "test-cancels"}, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var recs []*kgo.Record
	for _, d := range []schema.Dispatch{waiting, sentinel} {
		rec, err := schema.NewRecord(b.topics.Lifecycle(schema.EventCancelled), "ferry/test", schema.Cancelled{JobRef: d.JobRef, Reason: "test", At: time.Now().UTC()})
		if err != nil {
			t.Fatal(err)
		}
		rec.Partition = 0
		recs = append(recs, rec)
	}
	if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	b.failed(sentinel)
	if time.Now().After(due) {
		t.Fatalf("the cancellation was read after the not_before %v: nothing was cancelled during the wait", due)
	}
	time.Sleep(time.Until(due.Add(2 * time.Second))) // past the not_before
	if n := len(b.all(ofJob[schema.Started](waiting.JobID))); n != 0 {
		t.Fatalf("the job cancelled during its wait started %d times", n)
	}
	mu.Lock()
	defer mu.Unlock()
	if calls[waiting.JobID] != 0 {
		t.Fatalf("the cancelled job's handler was called %d times", calls[waiting.JobID])
	}
}
