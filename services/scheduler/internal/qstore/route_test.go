package qstore

import (
	"slices"
	"testing"
	"time"

	"github.com/ferryhq/ferry/events/schema"
)

// routed announces worker id of the short pool with its routing at now.
func (b *bundle) routed(now time.Time, id string, parts []int32, types ...string) {
	b.t.Helper()
	b.apply(now, func(batch *Batch) {
		batch.Worker(schema.WorkerStatus{WorkerID: id, Pool: schema.PoolShort, Slots: 10, At: now,
			Routing: &schema.WorkerRouting{Types: types, Partitions: parts}}, now.Add(5*time.Second))
	})
}

func typed(id, typ string, prio int) schema.Enqueued {
	e := enq(id, 1, "default", prio, time.Time{})
	e.Job.Type = typ
	return e
}

func (b *bundle) unroutable() (pool, tenantQueue int64) {
	b.t.Helper()
	n, err := b.store.Unroutable(b.ctx, []string{schema.PoolShort})
	if err != nil {
		b.t.Fatal(err)
	}
	qs, err := b.store.Queues(b.ctx, "t1", []string{schema.PoolShort})
	if err != nil {
		b.t.Fatal(err)
	}
	for _, q := range qs {
		if q.Name == "default" {
			tenantQueue = q.Unroutable
		}
	}
	return n[schema.PoolShort], tenantQueue
}

func partitions(ts []Template) []int32 {
	var out []int32
	for _, t := range ts {
		out = append(out, t.Partition)
	}
	return out
}

// Jobs of a type no live worker takes are parked, out of the way of the
// jobs behind them, counted, and released in their old order (before a
// newer job of the same priority) to the partition of the worker that
// takes them once it appears.
func TestRouteParksUnhandledTypeWithoutBlockingAndReleasesInOrder(t *testing.T) {
	b := setup(t)
	b.routed(t0, "builtin", []int32{0, 1}, "noop", "sleep")
	b.routed(t0, "reports", nil, "report.build") // in the group, no partition yet
	b.enqueue(t0, typed("a", "report.build", 5), typed("b", "noop", 5), typed("c", "report.build", 5), typed("d", "noop", 5))

	res := b.dispatch(t0, 0)
	if got := ids(res.Dispatched); !slices.Equal(got, []string{"b", "d"}) {
		t.Fatalf("dispatched %v, want the noop jobs past the parked ones", got)
	}
	for _, p := range partitions(res.Dispatched) {
		if p != 0 && p != 1 {
			t.Errorf("noop dispatched to partition %d, not one of builtin's", p)
		}
	}
	if pool, q := b.unroutable(); pool != 2 || q != 2 {
		t.Errorf("unroutable: pool %d, tenant queue %d; want 2 and 2", pool, q)
	}
	if qs, _ := b.store.Queues(b.ctx, "t1", []string{schema.PoolShort}); len(qs) != 1 || qs[0].Ready != 0 {
		t.Errorf("queues = %+v: parked jobs are not ready ones", qs)
	}
	if res := b.dispatch(t0.Add(time.Millisecond), 0); len(res.Dispatched) != 0 {
		t.Errorf("dispatched %v while no worker takes report.build", ids(res.Dispatched))
	}

	now := t0.Add(time.Second)
	b.routed(now, "reports", []int32{2}, "report.build")
	b.enqueue(now, typed("e", "report.build", 5))
	res = b.dispatch(now, 0)
	if got := ids(res.Dispatched); !slices.Equal(got, []string{"a", "c", "e"}) {
		t.Fatalf("after the worker appeared: dispatched %v, want a c e", got)
	}
	if got := partitions(res.Dispatched); !slices.Equal(got, []int32{2, 2, 2}) {
		t.Errorf("report.build dispatched to partitions %v, want reports' partition 2", got)
	}
	if pool, q := b.unroutable(); pool != 0 || q != 0 {
		t.Errorf("unroutable after release: pool %d, tenant queue %d", pool, q)
	}
}

// A parked job still expires by its not_after (dead-lettered as expired,
// like a ready one), and a cancelled parked job leaves the parked sets for
// good.
func TestRouteParkedJobExpiresAndCancels(t *testing.T) {
	b := setup(t)
	b.routed(t0, "builtin", []int32{0}, "noop")
	exp := typed("exp", "report.build", 5)
	na := t0.Add(time.Minute)
	exp.Job.NotAfter = &na
	b.enqueue(t0, exp, typed("gone", "report.build", 5))
	if res := b.dispatch(t0, 0); len(res.Dispatched) != 0 {
		t.Fatalf("dispatched %v", ids(res.Dispatched))
	}
	b.apply(t0, func(batch *Batch) { batch.Cancel("gone", "t1") })
	if pool, _ := b.unroutable(); pool != 1 {
		t.Errorf("unroutable after the cancel = %d, want 1", pool)
	}

	res := b.dispatch(na.Add(time.Millisecond), 0)
	if got := ids(res.Expired); !slices.Equal(got, []string{"exp"}) {
		t.Fatalf("expired %v, want the parked job past its not_after", got)
	}
	if pool, q := b.unroutable(); pool != 0 || q != 0 {
		t.Errorf("unroutable after expiry: pool %d, tenant queue %d", pool, q)
	}
	b.routed(na, "reports", []int32{1}, "report.build")
	if res := b.dispatch(na.Add(2*time.Millisecond), 0); len(res.Dispatched) != 0 {
		t.Errorf("dispatched %v: a cancelled or expired job came back", ids(res.Dispatched))
	}
}

// A partition claimed by two workers (mid-rebalance) belongs to the later
// announcement; a worker without routing (from before it) takes every type
// on the job id's hash; a worker that leaves stops taking its types.
func TestRoutePartitionOwnershipLegacyAndLeaving(t *testing.T) {
	b := setup(t)
	b.routed(t0, "old-owner", []int32{0}, "noop")
	b.routed(t0.Add(time.Second), "new-owner", []int32{0}, "report.build")
	b.enqueue(t0, typed("n", "noop", 5), typed("r", "report.build", 5))
	res := b.dispatch(t0.Add(time.Second), 0)
	if got := ids(res.Dispatched); !slices.Equal(got, []string{"r"}) || res.Dispatched[0].Partition != 0 {
		t.Fatalf("dispatched %v to %v, want r to partition 0 (its new owner's); noop parked", got, partitions(res.Dispatched))
	}

	now := t0.Add(2 * time.Second)
	b.worker(now, "legacy", 4) // announces no routing
	res = b.dispatch(now, 0)
	if got := ids(res.Dispatched); !slices.Equal(got, []string{"n"}) || res.Dispatched[0].Partition != -1 {
		t.Fatalf("with a legacy worker: dispatched %v to %v, want n to the hash partition (-1)", got, partitions(res.Dispatched))
	}

	b.apply(now, func(batch *Batch) {
		batch.Worker(schema.WorkerStatus{WorkerID: "legacy", Pool: schema.PoolShort, Stopping: true}, now.Add(5*time.Second))
		batch.Worker(schema.WorkerStatus{WorkerID: "new-owner", Pool: schema.PoolShort, Stopping: true}, now.Add(5*time.Second))
	})
	b.enqueue(now, typed("r2", "report.build", 5))
	if res := b.dispatch(now.Add(time.Millisecond), 0); len(res.Dispatched) != 0 {
		t.Errorf("dispatched %v after report.build's only worker stopped", ids(res.Dispatched))
	}
	if pool, _ := b.unroutable(); pool != 1 {
		t.Errorf("unroutable = %d, want r2", pool)
	}
}

// A dispatch a worker rejected (not its type) goes back to the front of the
// same attempt, and only the current dispatch can be rejected.
func TestRouteRejectedDispatchRequeuesAtFront(t *testing.T) {
	b := setup(t)
	b.routed(t0, "w", []int32{0}, "noop")
	b.enqueue(t0, typed("first", "noop", 5))
	b.enqueue(t0, typed("second", "noop", 5))
	res := b.dispatch(t0, -9) // capacity for one
	if got := ids(res.Dispatched); !slices.Equal(got, []string{"first"}) {
		t.Fatalf("dispatched %v", got)
	}
	did := res.Dispatched[0].DispatchID
	b.apply(t0, func(batch *Batch) { batch.Release("first", "stale-"+did) })
	if res := b.dispatch(t0, -9); len(res.Dispatched) != 0 {
		t.Fatalf("a stale rejection re-queued the job: %v", ids(res.Dispatched))
	}
	b.apply(t0, func(batch *Batch) { batch.Release("first", did) })
	res = b.dispatch(t0, -9)
	if got := ids(res.Dispatched); !slices.Equal(got, []string{"first"}) || res.Dispatched[0].Attempt != 1 {
		t.Fatalf("after the rejection: dispatched %v (attempt %d), want first again, same attempt", got, res.Dispatched[0].Attempt)
	}
}

// The route table a dispatch step makes is kept for the next steps while
// the workers and their routing stay the same, dropped when a worker
// comes, goes or announces other routing, and not kept while two workers
// claim one partition (the later announcement owns it, so it can change
// with every announcement).
func TestRouteTableKeptUntilRoutingChanges(t *testing.T) {
	b := setup(t)
	key := b.store.Prefix() + "pool:" + schema.PoolShort + ":rtable"
	kept := func(step string, want bool) {
		t.Helper()
		n, err := b.rdb.Exists(b.ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		if (n == 1) != want {
			t.Fatalf("%s: route table kept = %v, want %v", step, n == 1, want)
		}
	}
	b.routed(t0, "builtin", []int32{0, 1}, "noop")
	b.dispatch(t0, 0)
	kept("after a step", true)
	b.routed(t0.Add(time.Second), "builtin", []int32{0, 1}, "noop")
	kept("after the same routing again", true)

	b.routed(t0.Add(time.Second), "builtin", []int32{0, 1}, "noop", "report.build")
	kept("after a routing change", false)
	b.enqueue(t0, typed("r", "report.build", 5))
	if res := b.dispatch(t0.Add(time.Second), 0); !slices.Equal(ids(res.Dispatched), []string{"r"}) {
		t.Fatalf("dispatched %v, want the job of the newly routed type", ids(res.Dispatched))
	}
	kept("after the next step", true)

	b.routed(t0.Add(2*time.Second), "reports", []int32{1}, "report.build")
	kept("after a new worker", false)
	b.dispatch(t0.Add(2*time.Second), 0)
	kept("while two workers claim partition 1", false)

	b.apply(t0.Add(3*time.Second), func(batch *Batch) {
		batch.Worker(schema.WorkerStatus{WorkerID: "reports", Pool: schema.PoolShort, Stopping: true, At: t0.Add(3 * time.Second)}, t0.Add(3*time.Second))
	})
	b.dispatch(t0.Add(3*time.Second), 0)
	kept("after the second worker left", true)
	b.enqueue(t0, typed("r2", "report.build", 5))
	res := b.dispatch(t0.Add(3*time.Second), 0)
	if !slices.Equal(ids(res.Dispatched), []string{"r2"}) || !slices.Contains([]int32{0, 1}, res.Dispatched[0].Partition) {
		t.Fatalf("dispatched %v to %v, want r2 on builtin's partitions", ids(res.Dispatched), partitions(res.Dispatched))
	}
}
