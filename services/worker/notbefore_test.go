package worker_test

import (
	"context"
	"slices"
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

// TestHoldTakesNoSlot: dispatches leased ahead wait in the worker's hold,
// not in a runner: with one slot, a job due now dispatched after them
// starts first, and they still start no earlier than their not_before. A
// worker without a hold (FERRY_WORKER_HOLD=0) waits in its runner instead,
// so there the job due now starts after them, and it announces no hold.
func TestHoldTakesNoSlot(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		hold      int
		announced int
	}{{"hold", 0, 10000}, {"no hold", worker.NoHold, 0}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := newBench(t)
			b.start(worker.Config{Concurrency: 1, Hold: tc.hold}, nil)
			ws := b.waitFor("announcement", func(ev schema.Event) bool {
				ws, ok := ev.Data.(schema.WorkerStatus)
				return ok && ws.WorkerID == "w-"+t.Name()
			}).Data.(schema.WorkerStatus)
			if ws.Hold != tc.announced {
				t.Fatalf("announced hold %d, want %d", ws.Hold, tc.announced)
			}
			due := time.Now().Add(2 * time.Second).Truncate(time.Millisecond).UTC()
			var held []schema.Dispatch
			for range 3 {
				held = append(held, b.newDispatch("noop", nil, withNotBefore(due)))
			}
			now := b.newDispatch("noop", nil)
			b.dispatchInOrder(append(held, now)...)
			nowStarted := b.completed(now).StartedAt
			for _, d := range held {
				started := b.completed(d).StartedAt
				if started.Before(due) {
					t.Fatalf("held job started at %v, before its not_before %v", started, due)
				}
				if holds := tc.announced > 0; holds != nowStarted.Before(started) {
					t.Fatalf("job due now started at %v, held job at %v: want the one due now first = %v", nowStarted, started, holds)
				}
			}
		})
	}
}

// TestStopHandsBackHeldDispatches: a worker stopping with dispatches in its
// hold hands them back in its final announcement, unstarted.
func TestStopHandsBackHeldDispatches(t *testing.T) {
	t.Parallel()
	b := newBench(t)
	stop := b.start(worker.Config{Concurrency: 2}, nil)
	held := b.newDispatch("noop", nil, withNotBefore(time.Now().Add(time.Minute).UTC()))
	after := b.newDispatch("noop", nil)
	b.dispatchInOrder(held, after)
	b.completed(after) // read after the held one
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	final := b.waitFor("final status", func(ev schema.Event) bool {
		ws, ok := ev.Data.(schema.WorkerStatus)
		return ok && ws.Stopping && ws.HandedBack != nil
	}).Data.(schema.WorkerStatus)
	if !slices.ContainsFunc(final.HandedBack, func(r schema.JobRef) bool { return r == held.JobRef }) {
		t.Fatalf("handed back %v, want the held job %s", final.HandedBack, held.JobID)
	}
	if n := len(b.all(ofJob[schema.Started](held.JobID))); n != 0 {
		t.Fatalf("the held job started %d times", n)
	}
}

// dispatchInOrder sends dispatches to one partition of the short pool's
// topic, in order, so the worker reads them in that order.
func (b *bench) dispatchInOrder(ds ...schema.Dispatch) {
	b.t.Helper()
	var recs []*kgo.Record
	for _, d := range ds {
		rec, err := schema.NewRecord(b.topics.Dispatch(schema.PoolShort), "ferry/test", d)
		if err != nil {
			b.t.Fatal(err)
		}
		rec.Partition = 0
		recs = append(recs, rec)
	}
	cl, err := kafkax.NewClient(kafkax.Config{Brokers: b.deps.Common.KafkaBrokers, ClientID: "test-in-order"},
		kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		b.t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		b.t.Fatal(err)
	}
}
