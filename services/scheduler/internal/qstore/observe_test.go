package qstore

import (
	"testing"
	"time"

	"github.com/ferryhq/ferry/events/schema"
)

const tp1 = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"

// TestTraceTravelsToDispatch: the traceparent recorded with an enqueued
// attempt comes back with its dispatch; a stale attempt's is ignored.
func TestTraceTravelsToDispatch(t *testing.T) {
	b := setup(t)
	b.apply(t0, func(batch *Batch) {
		e := enq("j1", 2, "default", 5, time.Time{})
		if err := batch.Enqueue(e, t0); err != nil {
			t.Fatal(err)
		}
		batch.Trace(e.JobRef, tp1)
		batch.Trace(schema.JobRef{JobID: "j1", Attempt: 1}, "00-stale")
		batch.Trace(schema.JobRef{JobID: "j2", Attempt: 1}, "") // no trace: no op
	})
	b.enqueue(t0, enq("j2", 1, "default", 5, time.Time{}))
	b.worker(t0, "w1", 4)
	res := b.dispatch(t0, 0)
	if len(res.Dispatched) != 2 {
		t.Fatalf("dispatched %v", ids(res.Dispatched))
	}
	got := map[string]string{}
	for _, d := range res.Dispatched {
		got[d.JobID] = d.TraceParent
	}
	if got["j1"] != tp1 || got["j2"] != "" {
		t.Fatalf("traceparents = %v", got)
	}
}

// TestGaugesAndLeaseExpiries: depths per queue, the oldest ready time,
// running per tenant, and the lease expiries a dispatch step reports.
func TestGaugesAndLeaseExpiries(t *testing.T) {
	b := setup(t)
	older := enq("old", 1, "q1", 9, time.Time{}) // low priority, but waiting longest
	b.apply(t0.Add(-time.Minute), func(batch *Batch) {
		if err := batch.Enqueue(older, t0.Add(-time.Minute)); err != nil {
			t.Fatal(err)
		}
	})
	b.enqueue(t0, enq("a", 1, "q1", 0, time.Time{}), enq("b", 1, "q1", 5, time.Time{}),
		enq("c", 1, "q2", 5, t0.Add(time.Hour)))
	b.worker(t0, "w1", 1)
	if res := b.dispatch(t0, 0); len(res.Dispatched) != 1 || res.LeaseExpiries != 0 {
		t.Fatalf("dispatch: %v, %d lease expiries", ids(res.Dispatched), res.LeaseExpiries)
	}
	depths, running, err := b.store.Gauges(b.ctx, []string{schema.PoolShort}, 100)
	if err != nil {
		t.Fatal(err)
	}
	byQ := map[string]QueueDepth{}
	for _, d := range depths {
		byQ[d.Queue] = d
	}
	if q := byQ["q1"]; q.Ready != 2 || q.Delayed != 0 || !q.OldestReady.Equal(t0.Add(-time.Minute)) {
		t.Fatalf("q1 = %+v", q)
	}
	if q := byQ["q2"]; q.Ready != 0 || q.Delayed != 1 || !q.OldestReady.IsZero() {
		t.Fatalf("q2 = %+v", q)
	}
	if len(running) != 1 || running[0] != (Running{Pool: schema.PoolShort, Queue: "q1", Tenant: "t1", Jobs: 1}) {
		t.Fatalf("running = %+v", running)
	}
	// The lease (10s) runs out: the next step re-queues the job and says so.
	b.worker(t0.Add(11*time.Second), "w1", 1)
	if res := b.dispatch(t0.Add(11*time.Second), 0); res.LeaseExpiries != 1 {
		t.Fatalf("lease expiries = %d, want 1", res.LeaseExpiries)
	}
}
