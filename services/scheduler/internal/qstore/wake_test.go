package qstore

import (
	"slices"
	"testing"

	"github.com/ferryhq/ferry/events/schema"
)

// TestApplyWakesOnlyPoolsWithWork: an apply names the dispatch loops that
// may have something to do, because a step that finds nothing still costs
// Redis ~100 µs: the pool of an enqueue or of a worker's announcement, the
// pool of a freed slot only when a job waits there, and every pool when a
// job gives up a concurrency slot (it may admit a job of any pool).
func TestApplyWakesOnlyPoolsWithWork(t *testing.T) {
	b := setup(t)
	wantWake := func(step string, r ApplyResult, want Wake) {
		t.Helper()
		if r.Wake.All != want.All || !slices.Equal(r.Wake.Pools, want.Pools) {
			t.Fatalf("%s: wake %+v, want %+v", step, r.Wake, want)
		}
	}
	short := Wake{Pools: []string{schema.PoolShort}}
	w := b.apply(t0, func(batch *Batch) {
		batch.Worker(schema.WorkerStatus{WorkerID: "w1", Pool: schema.PoolShort, Slots: 1, At: t0}, t0.Add(5e9))
	})
	wantWake("a worker's announcement", w, short)

	long := enq("long", 1, "default", 5, t0)
	long.Job.Pool = schema.PoolLong
	wantWake("an enqueue in the long pool", b.apply(t0, func(batch *Batch) { _ = batch.Enqueue(long, t0) }),
		Wake{Pools: []string{schema.PoolLong}})
	wantWake("an enqueue in the short pool", b.apply(t0, func(batch *Batch) { _ = batch.Enqueue(enq("a", 1, "default", 5, t0), t0) }), short)

	a := b.dispatch(t0, 0).Dispatched
	if len(a) != 1 {
		t.Fatalf("dispatched %v", ids(a))
	}
	// Only the long pool has a job waiting: the freed short slot wakes no one.
	wantWake("a completion with nothing waiting", b.apply(t0, func(batch *Batch) { batch.Complete("a", "t1", a[0].DispatchID) }), Wake{})

	b.enqueue(t0, enq("b", 1, "default", 5, t0), enq("c", 1, "default", 5, t0))
	bc := b.dispatch(t0, 0).Dispatched
	if got := ids(bc); !slices.Equal(got, []string{"b"}) {
		t.Fatalf("dispatched %v with one slot", got)
	}
	wantWake("a completion with c waiting", b.apply(t0, func(batch *Batch) { batch.Complete("b", "t1", bc[0].DispatchID) }), short)
	c := b.dispatch(t0, 0).Dispatched
	wantWake("a failure with nothing waiting", b.fail(t0, schema.ClassAppError, c...), Wake{})

	b.enqueue(t0, enqK("k", "noop", "key", 1))
	k := b.dispatch(t0, 0).Dispatched
	if got := ids(k); !slices.Equal(got, []string{"k"}) {
		t.Fatalf("dispatched %v", got)
	}
	wantWake("a completion that frees a concurrency slot", b.apply(t0, func(batch *Batch) { batch.Complete("k", "t1", k[0].DispatchID) }),
		Wake{All: true})
}
