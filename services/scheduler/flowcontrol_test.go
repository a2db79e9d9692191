package scheduler_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/sync/errgroup"

	"github.com/ferryhq/ferry/events/schema"
	"github.com/ferryhq/ferry/platform/kafkax"
	"github.com/ferryhq/ferry/services/scheduler"
)

// holdingWorker is a fake worker of the short pool that announces 16 slots
// and hands each new dispatch to the test, which finishes it when it likes.
func (e *env) holdingWorker(ctx context.Context, g *errgroup.Group) (<-chan schema.Dispatch, *kgo.Client) {
	cl := e.client(kafkax.Group("ferry-worker-short", e.topics.Dispatch(schema.PoolShort))...)
	out := make(chan schema.Dispatch, 100)
	g.Go(func() error {
		tk := time.NewTicker(200 * time.Millisecond)
		defer tk.Stop()
		for ctx.Err() == nil {
			rec, _ := schema.NewRecord(e.topics.Workers(), "test/worker", schema.WorkerStatus{
				WorkerID: "hold", Pool: schema.PoolShort, Slots: 16, At: time.Now()})
			_ = kafkax.ProduceAll(ctx, cl, rec)
			select {
			case <-ctx.Done():
			case <-tk.C:
			}
		}
		return nil
	})
	g.Go(func() error {
		seen := map[string]bool{}
		for {
			fs := cl.PollFetches(ctx)
			if ctx.Err() != nil {
				return nil
			}
			fs.EachRecord(func(r *kgo.Record) {
				if ev, err := schema.Decode(r); err == nil && !seen[ev.Data.(schema.Dispatch).DispatchID] {
					seen[ev.Data.(schema.Dispatch).DispatchID] = true
					out <- ev.Data.(schema.Dispatch)
				}
			})
			_ = cl.CommitUncommittedOffsets(ctx)
		}
	})
	return out, cl
}

// drain collects dispatches: waits up to first for one (0: not at all),
// then collects until none came for quiet.
func drain(ch <-chan schema.Dispatch, first, quiet time.Duration) []schema.Dispatch {
	var out []schema.Dispatch
	if first > 0 {
		select {
		case d := <-ch:
			out = append(out, d)
		case <-time.After(first):
			return nil
		}
	}
	for {
		select {
		case d := <-ch:
			out = append(out, d)
		case <-time.After(quiet):
			return out
		}
	}
}

// TestConcurrencyKeySurvivesRebuild: a concurrency key's limit holds
// across a Redis loss. Six jobs of one key with limit 2: two run; Redis is
// flushed and the state rebuilt from the log; again only two are
// dispatched (the key and limit travel in the enqueued event); each
// completion then admits one more until all six ran, never more than two
// at once.
func TestConcurrencyKeySurvivesRebuild(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var sched, workers errgroup.Group
	e.scheduler(ctx, &sched, scheduler.Config{Lease: time.Minute, EpochCheck: 100 * time.Millisecond})
	wctx, wcancel := context.WithCancel(context.Background())
	defer wcancel()
	dispatches, cl := e.holdingWorker(wctx, &workers)

	var recs []*kgo.Record
	for i := range 6 {
		ev := enqueued(fmt.Sprintf("keyed-%d", i), time.Time{}, false)
		ev.Job.Concurrency = &schema.Concurrency{Key: "customer-42", Limit: 2}
		rec, err := schema.NewRecord(e.topics.Lifecycle(schema.EventEnqueued), "ferry/api", ev)
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, rec)
	}
	if err := kafkax.ProduceAll(ctx, cl, recs...); err != nil {
		t.Fatal(err)
	}
	if got := drain(dispatches, 30*time.Second, 2*time.Second); len(got) != 2 {
		t.Fatalf("%d jobs of a key with limit 2 dispatched before the flush", len(got))
	}

	rdb := e.rdb()
	if err := rdb.FlushDB(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	running := drain(dispatches, 30*time.Second, 3*time.Second)
	if len(running) != 2 {
		t.Fatalf("%d jobs dispatched after the rebuild, want the limit 2", len(running))
	}
	if ep, _ := rdb.Get(ctx, "ferry:sched:epoch").Result(); ep == "" {
		t.Fatal("no epoch after the rebuild")
	}
	done := map[string]bool{}
	for len(done) < 6 {
		if len(running) == 0 || len(running) > 2 {
			t.Fatalf("%d jobs of the key running at once (%d done)", len(running), len(done))
		}
		d := running[0]
		running = running[1:]
		rec, _ := schema.NewRecord(e.topics.Lifecycle(schema.EventCompleted), "test/worker", schema.Completed{
			JobRef: d.JobRef, WorkerID: "hold", DispatchID: d.DispatchID, StartedAt: time.Now(), FinishedAt: time.Now()})
		if err := kafkax.ProduceAll(ctx, cl, rec); err != nil {
			t.Fatal(err)
		}
		done[d.JobID] = true
		if len(done) < 5 {
			select {
			case next := <-dispatches:
				running = append(running, next)
			case <-time.After(10 * time.Second):
				t.Fatalf("no job admitted after a completion (%d done)", len(done))
			}
		}
		running = append(running, drain(dispatches, 0, 300*time.Millisecond)...)
	}
	cancel()
	if err := sched.Wait(); err != nil {
		t.Fatalf("scheduler Run: %v", err)
	}
	wcancel()
	_ = workers.Wait()
}
