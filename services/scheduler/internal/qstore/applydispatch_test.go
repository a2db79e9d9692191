package qstore

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/ferryhq/ferry/events/schema"
)

// offer is what the scheduler offers ApplyDispatch: a step of each pool.
func (b *bundle) offer(now time.Time) []DispatchParams {
	b.n++
	var out []DispatchParams
	for _, pool := range []string{schema.PoolShort, schema.PoolLong} {
		out = append(out, DispatchParams{Pool: pool, Now: now, Prefetch: 1, MaxBatch: 512, DispatchIDPrefix: fmt.Sprintf("f%d-%s", b.n, pool)})
	}
	return out
}

func (b *bundle) applyDispatch(now time.Time, fill func(*Batch)) (ApplyResult, []PoolStep) {
	b.t.Helper()
	var batch Batch
	fill(&batch)
	res, steps, err := b.store.ApplyDispatch(b.ctx, now, &batch, b.offer(now))
	if err != nil {
		b.t.Fatal(err)
	}
	return res, steps
}

// TestApplyDispatchStepsTheWokenPools: one call applies the batch and runs
// a step of each offered pool the apply woke, and of no other; its result
// still names the pools woken.
func TestApplyDispatchStepsTheWokenPools(t *testing.T) {
	b := setup(t)
	b.worker(t0, "w1", 2)
	res, steps := b.applyDispatch(t0, func(batch *Batch) { _ = batch.Enqueue(enq("a", 1, "default", 5, t0), t0) })
	if !res.Wake.Has(schema.PoolShort) || res.Wake.Has(schema.PoolLong) {
		t.Fatalf("wake %+v, want the short pool only", res.Wake)
	}
	if len(steps) != 1 || steps[0].Pool != schema.PoolShort || !slices.Equal(ids(steps[0].Dispatched), []string{"a"}) {
		t.Fatalf("steps %+v, want one step of the short pool dispatching a", steps)
	}
	a := steps[0].Dispatched[0]
	if a.DispatchID == "" || a.LeaseUntil.IsZero() || a.Job.Type != "noop" || steps[0].NextLease.IsZero() {
		t.Fatalf("dispatched %+v (next lease %v): want a leased template with its spec", a, steps[0].NextLease)
	}
	// The step leased a: a plain step finds nothing left.
	if again := b.dispatch(t0, 0); len(again.Dispatched) != 0 {
		t.Fatalf("a second step dispatched %v", ids(again.Dispatched))
	}
	// A completion with nothing waiting wakes no pool, so runs no step.
	res, steps = b.applyDispatch(t0, func(batch *Batch) { batch.Complete("a", "t1", a.DispatchID) })
	if res.Wake.Any() || len(steps) != 0 {
		t.Fatalf("wake %+v, steps %+v after a completion with nothing waiting: want none", res.Wake, steps)
	}
}

// TestApplyDispatchIsApplyThenDispatch: the same input gives the same
// templates and next times as an apply and then a step in two calls.
func TestApplyDispatchIsApplyThenDispatch(t *testing.T) {
	fused := setup(t)
	rdb, s := openStore(t, Options{Lease: 10 * time.Second})
	split := &bundle{t: t, ctx: t.Context(), rdb: rdb, store: s}
	jobs := []schema.Enqueued{enq("a", 1, "default", 5, t0), enq("b", 1, "default", 7, t0), enq("c", 1, "default", 5, t0.Add(time.Hour))}
	for _, bd := range []*bundle{fused, split} {
		bd.worker(t0, "w1", 1)
	}
	fill := func(batch *Batch) {
		for _, e := range jobs {
			_ = batch.Enqueue(e, t0)
		}
	}
	_, steps := fused.applyDispatch(t0, fill)
	split.apply(t0, fill)
	split.n = fused.n - 1 // the same dispatch id prefix
	params := split.offer(t0)[0]
	want, err := split.store.Dispatch(split.ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	if len(steps) != 1 {
		t.Fatalf("steps %+v, want one", steps)
	}
	got := steps[0].DispatchResult
	if fmt.Sprintf("%+v", got) != fmt.Sprintf("%+v", want) {
		t.Fatalf("apply and dispatch in one call:\n%+v\nin two:\n%+v", got, want)
	}
	if len(got.Dispatched) != 2 || got.NextDue.IsZero() {
		t.Fatalf("dispatched %v, next due %v: want a and b (one slot and a prefetch of one) and c's due time", ids(got.Dispatched), got.NextDue)
	}
}

// TestApplyDispatchBigBatchOnlyApplies: a batch of more than one call's
// operations is applied as Apply does, and its wake left to the loops.
func TestApplyDispatchBigBatchOnlyApplies(t *testing.T) {
	t.Parallel()
	_, s := openStore(t, Options{Lease: 10 * time.Second, MaxOpsPerCall: 2})
	b := &bundle{t: t, ctx: t.Context(), store: s}
	b.worker(t0, "w1", 5)
	res, steps := b.applyDispatch(t0, func(batch *Batch) {
		for _, id := range []string{"a", "b", "c"} {
			_ = batch.Enqueue(enq(id, 1, "default", 5, t0), t0)
		}
	})
	if len(steps) != 0 || !res.Wake.Has(schema.PoolShort) {
		t.Fatalf("steps %+v, wake %+v: want no step and the short pool woken", steps, res.Wake)
	}
	if got := ids(b.dispatch(t0, 0).Dispatched); len(got) != 3 {
		t.Fatalf("a step after the batch dispatched %v, want its three jobs", got)
	}
}

// TestApplyDispatchNeedsTheEpoch: without the epoch key the call changes
// nothing and says the state is lost.
func TestApplyDispatchNeedsTheEpoch(t *testing.T) {
	b := setup(t)
	b.worker(t0, "w1", 1)
	if err := b.rdb.Del(b.ctx, b.store.Prefix()+"epoch").Err(); err != nil {
		t.Fatal(err)
	}
	var batch Batch
	_ = batch.Enqueue(enq("a", 1, "default", 5, t0), t0)
	if _, _, err := b.store.ApplyDispatch(b.ctx, t0, &batch, b.offer(t0)); !errors.Is(err, ErrNoEpoch) {
		t.Fatalf("err %v, want ErrNoEpoch", err)
	}
	if n, err := b.rdb.Exists(b.ctx, b.store.Prefix()+"job:a").Result(); err != nil || n != 0 {
		t.Fatalf("job a exists (%d, %v) after a refused call", n, err)
	}
}

// TestApplyDispatchLeavesHousekeepingToTheLoop: a step run by an apply
// leases what is ready but leaves an expired lease to the loop's next step,
// which re-queues it.
func TestApplyDispatchLeavesHousekeepingToTheLoop(t *testing.T) {
	b := setup(t)
	b.worker(t0, "w1", 5)
	b.enqueue(t0, enq("a", 1, "default", 5, t0))
	if got := ids(b.dispatch(t0, 0).Dispatched); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("dispatched %v, want a", got)
	}
	later := t0.Add(11 * time.Second) // a's 10 s lease has expired
	b.worker(later, "w1", 5)
	_, steps := b.applyDispatch(later, func(batch *Batch) { _ = batch.Enqueue(enq("b", 1, "default", 5, later), later) })
	if len(steps) != 1 || !slices.Equal(ids(steps[0].Dispatched), []string{"b"}) || steps[0].LeaseExpiries != 0 {
		t.Fatalf("steps %+v: want b dispatched and a's expired lease left alone", steps)
	}
	if lease := steps[0].NextLease; !lease.Equal(steps[0].Dispatched[0].LeaseUntil.Truncate(time.Millisecond)) {
		t.Fatalf("next lease %v, want b's own (%v)", lease, steps[0].Dispatched[0].LeaseUntil)
	}
	loop := b.dispatch(later, 0)
	if loop.LeaseExpiries != 1 || !slices.Equal(ids(loop.Dispatched), []string{"a"}) {
		t.Fatalf("the loop's step: %d lease expiries, dispatched %v; want a re-queued and dispatched again", loop.LeaseExpiries, ids(loop.Dispatched))
	}
}
