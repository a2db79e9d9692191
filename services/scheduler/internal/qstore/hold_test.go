package qstore

import (
	"slices"
	"testing"
	"time"

	"github.com/ferryhq/ferry/events/schema"
)

// TestHeldAttemptFreesItsSlot: an attempt held outside Ferry's workers (an
// async http job) stops counting against the pool's slots, keeps its own
// lease (not the scheduler's), is re-dispatched at the same attempt when
// that lease runs out, and a hold of an older dispatch changes nothing.
func TestHeldAttemptFreesItsSlot(t *testing.T) {
	b := setup(t)
	b.worker(t0, "w1", 1)
	b.enqueue(t0, enq("async", 1, "default", 5, t0), enq("next", 1, "default", 5, t0))
	first := b.dispatch(t0, 0).Dispatched
	if got := ids(first); !slices.Equal(got, []string{"async"}) {
		t.Fatalf("one slot dispatched %v", got)
	}
	if res := b.dispatch(t0.Add(time.Second), 0); len(res.Dispatched) != 0 {
		t.Fatalf("dispatched %v beyond the one slot", ids(res.Dispatched))
	}

	// The receiver took it for 60s: the slot is free for the next job.
	held := t0.Add(2 * time.Second)
	b.apply(held, func(batch *Batch) {
		batch.Hold("async", first[0].DispatchID, time.Minute)
		batch.Hold("next", "bogus", time.Minute) // not in flight: nothing
	})
	b.worker(held, "w1", 1)
	res := b.dispatch(held, 0)
	if got := ids(res.Dispatched); !slices.Equal(got, []string{"next"}) {
		t.Fatalf("after the hold dispatched %v, want next", got)
	}
	next := res.Dispatched[0]

	// The scheduler's own lease (10s) no longer applies to the held job;
	// the next lease deadline is next's.
	b.apply(t0.Add(20*time.Second), func(batch *Batch) { batch.Complete("next", "t1", next.DispatchID) })
	b.worker(t0.Add(20*time.Second), "w1", 1)
	res = b.dispatch(t0.Add(20*time.Second), 0)
	if len(res.Dispatched) != 0 || !res.NextLease.Equal(held.Add(time.Minute)) {
		t.Fatalf("held job: dispatched %v, next lease %v, want none and %v", ids(res.Dispatched), res.NextLease, held.Add(time.Minute))
	}
	// A heartbeat (a hold of the current dispatch) extends it.
	beat := t0.Add(50 * time.Second)
	b.apply(beat, func(batch *Batch) { batch.Hold("async", first[0].DispatchID, time.Minute) })
	b.worker(t0.Add(70*time.Second), "w1", 1)
	if res := b.dispatch(t0.Add(70*time.Second), 0); len(res.Dispatched) != 0 || !res.NextLease.Equal(beat.Add(time.Minute)) {
		t.Fatalf("after a heartbeat: dispatched %v, next lease %v", ids(res.Dispatched), res.NextLease)
	}

	// Missed: worker_lost, the same attempt again under a new dispatch.
	lost := beat.Add(time.Minute + time.Millisecond)
	b.worker(lost, "w1", 1)
	res = b.dispatch(lost, 0)
	if len(res.Dispatched) != 1 || res.Dispatched[0].JobID != "async" || res.Dispatched[0].Attempt != 1 ||
		res.Dispatched[0].DispatchID == first[0].DispatchID || res.LeaseExpiries != 1 {
		t.Fatalf("after the held lease ran out: %+v (expiries %d)", res.Dispatched, res.LeaseExpiries)
	}
	again := res.Dispatched[0]
	// The old dispatch's hold and failure change nothing; the new one's
	// failure is decided.
	r := b.apply(lost, func(batch *Batch) {
		batch.Hold("async", first[0].DispatchID, time.Hour)
		batch.Fail("async", first[0].DispatchID, schema.ClassAppError)
	})
	if len(r.Failed) != 0 {
		t.Fatal("the old dispatch's failure was decided")
	}
	b.apply(lost, func(batch *Batch) { batch.Hold("async", again.DispatchID, time.Hour) })
	r = b.apply(lost, func(batch *Batch) { batch.Fail("async", again.DispatchID, schema.ClassRetryable) })
	if len(r.Failed) != 1 {
		t.Fatalf("the held dispatch's failure: %+v", r.Failed)
	}
	if n, _ := b.rdb.ZCard(b.ctx, "ferry:sched:pool:short:held").Result(); n != 0 {
		t.Fatalf("%d jobs left in the held set", n)
	}
}

// TestHeldAttemptCompletes: a held attempt's completion (the receiver's
// callback) takes it out of the held set; a plain job's completion beside
// it leaves the held set alone.
func TestHeldAttemptCompletes(t *testing.T) {
	b := setup(t)
	b.worker(t0, "w1", 2)
	b.enqueue(t0, enq("async", 1, "default", 5, t0), enq("plain", 1, "default", 5, t0))
	d := b.dispatch(t0, 0).Dispatched
	if len(d) != 2 {
		t.Fatalf("dispatched %v", ids(d))
	}
	held := map[bool]Template{d[0].JobID == "async": d[0], d[1].JobID == "async": d[1]}
	b.apply(t0.Add(time.Second), func(batch *Batch) { batch.Hold("async", held[true].DispatchID, time.Minute) })
	b.apply(t0.Add(2*time.Second), func(batch *Batch) {
		batch.Complete("plain", "t1", held[false].DispatchID)
		batch.Complete("async", "t1", held[true].DispatchID)
	})
	p := b.store.Prefix()
	for _, k := range []string{"pool:short:held", "pool:short:inflight"} {
		if n := b.rdb.ZCard(b.ctx, p+k).Val(); n != 0 {
			t.Errorf("%s holds %d", k, n)
		}
	}
	for _, id := range []string{"async", "plain"} {
		if st := b.rdb.HGet(b.ctx, p+"job:"+id, "state").Val(); st != "done" {
			t.Errorf("%s state %q", id, st)
		}
	}
}
