package scheduler_test

import (
	"context"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/ferryhq/ferry/events/schema"
	"github.com/ferryhq/ferry/platform/kafkax"
	"github.com/ferryhq/ferry/platform/testenv"
	"github.com/ferryhq/ferry/services/scheduler"
)

// TestRebalanceHoldsLeases: when a second scheduler joins the group and
// partitions move, the lease of a job in flight is pushed out to one lease
// from then, so the records waiting in moving partitions (its worker's
// heartbeats or completion) are applied before the lease can end.
func TestRebalanceHoldsLeases(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var sched, bg errgroup.Group
	cfg := scheduler.Config{Lease: time.Minute}
	e.scheduler(ctx, &sched, cfg)
	wctx, wcancel := context.WithCancel(ctx)
	defer func() { wcancel(); _ = bg.Wait() }()
	cl := e.client(kafkax.Group("ferry-worker-short", e.topics.Dispatch(schema.PoolShort))...)
	dispatches := make(chan schema.Dispatch, 16)
	announceAndRead(wctx, t, &bg, cl, e.topics, "w1", dispatches)

	rec, err := schema.NewRecord(e.topics.Lifecycle(schema.EventEnqueued), "ferry/api", enqueued("leased", time.Time{}, false))
	if err != nil {
		t.Fatal(err)
	}
	if err := kafkax.ProduceAll(ctx, cl, rec); err != nil {
		t.Fatal(err)
	}
	select {
	case <-dispatches:
	case <-time.After(20 * time.Second):
		t.Fatal("the job was not dispatched")
	}
	rdb := e.rdb()
	const inflight = "ferry:sched:pool:short:inflight"
	first, err := rdb.ZScore(ctx, inflight, "leased").Result()
	if err != nil {
		t.Fatalf("the job's lease: %v", err)
	}
	// No heartbeat renews the lease in this test: only a hold moves it.
	time.Sleep(1100 * time.Millisecond) // so one lease from the rebalance ends later than the first lease
	e.scheduler(ctx, &sched, cfg)
	// Well inside the first lease: only the hold can have moved it.
	testenv.WaitFor(t, 30*time.Second, "the lease held by the rebalance", func() bool {
		s, _ := rdb.ZScore(ctx, inflight, "leased").Result()
		return s > first
	})
	select {
	case d := <-dispatches:
		t.Fatalf("%s dispatched again", d.DispatchID)
	default:
	}
	cancel()
	if err := sched.Wait(); err != nil {
		t.Fatalf("scheduler Run: %v", err)
	}
}
