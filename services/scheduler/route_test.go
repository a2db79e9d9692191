package scheduler_test

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/sync/errgroup"

	"github.com/ferryhq/ferry/events/schema"
	"github.com/ferryhq/ferry/platform/kafkax"
	"github.com/ferryhq/ferry/services/scheduler"
)

// The scheduler produces each dispatch to the partition owned by the worker
// that announced the job's type, and a dispatch that worker rejects comes
// again, at the same attempt, under a new dispatch id; a job of a type no
// worker announced is not dispatched at all.
func TestDispatchFollowsRoutingAndRejections(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithCancel(context.Background())
	g, gctx := errgroup.WithContext(ctx)
	t.Cleanup(func() { cancel(); _ = g.Wait() })
	e.scheduler(gctx, g, scheduler.Config{})
	cl := e.client(kgo.ConsumeTopics(e.topics.Dispatch(schema.PoolShort)), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))

	announce := func(rejected ...schema.DispatchRef) error {
		rec, err := schema.NewRecord(e.topics.Workers(), "test/worker", schema.WorkerStatus{
			WorkerID: "w", Pool: schema.PoolShort, Slots: 4, At: time.Now().UTC(),
			Routing:  &schema.WorkerRouting{Types: []string{"noop"}, Partitions: []int32{2}},
			Rejected: rejected,
		})
		if err != nil {
			return err
		}
		return kafkax.ProduceAll(ctx, cl, rec)
	}
	g.Go(func() error { // keep the worker live
		tk := time.NewTicker(300 * time.Millisecond)
		defer tk.Stop()
		for {
			select {
			case <-gctx.Done():
				return nil
			case <-tk.C:
				_ = announce() // the next tick tries again
			}
		}
	})
	if err := announce(); err != nil {
		t.Fatal(err)
	}
	other := enqueued("job-other-type", time.Time{}, false)
	other.Job.Type = "report.build"
	var recs []*kgo.Record
	for _, en := range []schema.Enqueued{other, enqueued("job-noop", time.Time{}, false)} {
		rec, _ := schema.NewRecord(e.topics.Lifecycle(schema.EventEnqueued), "test", en)
		recs = append(recs, rec)
	}
	if err := kafkax.ProduceAll(ctx, cl, recs...); err != nil {
		t.Fatal(err)
	}

	next := func() (schema.Dispatch, int32) {
		t.Helper()
		pctx, pcancel := context.WithTimeout(ctx, 30*time.Second)
		defer pcancel()
		for {
			fs := cl.PollRecords(pctx, 1)
			if pctx.Err() != nil {
				t.Fatal("no dispatch within 30s")
			}
			for _, r := range fs.Records() {
				ev, err := schema.Decode(r)
				if err != nil {
					t.Fatal(err)
				}
				return ev.Data.(schema.Dispatch), r.Partition
			}
		}
	}
	first, p := next()
	if first.JobID != "job-noop" || p != 2 {
		t.Fatalf("dispatched %s to partition %d, want job-noop to the worker's partition 2", first.JobID, p)
	}
	if err := announce(schema.DispatchRef{JobRef: first.JobRef, DispatchID: first.DispatchID}); err != nil {
		t.Fatal(err)
	}
	again, p := next()
	if again.JobID != "job-noop" || again.Attempt != 1 || again.DispatchID == first.DispatchID || p != 2 {
		t.Fatalf("after the rejection: %s attempt %d dispatch %s on %d; want job-noop attempt 1, a new dispatch, on 2",
			again.JobID, again.Attempt, again.DispatchID, p)
	}
	// Nothing else comes: report.build has no worker.
	pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
	defer pcancel()
	if fs := cl.PollRecords(pctx, 1); len(fs.Records()) > 0 {
		ev, _ := schema.Decode(fs.Records()[0])
		t.Errorf("unexpected dispatch %+v", ev.Data)
	}
}
