package qstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ferryhq/ferry/events/schema"
	"github.com/ferryhq/ferry/platform/redisx"
	"github.com/ferryhq/ferry/platform/testenv"
)

var t0 = time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)

type bundle struct {
	t     *testing.T
	ctx   context.Context
	rdb   *redis.Client
	store *Store
	n     int
}

func setup(t *testing.T) *bundle {
	t.Helper()
	t.Parallel()
	rdb, s := openStore(t, Options{Lease: 10 * time.Second})
	return &bundle{t: t, ctx: context.Background(), rdb: rdb, store: s}
}

// openStore connects to the test Redis and returns a Store with opts, its
// scripts loaded and its epoch set; the connection closes with tb.
func openStore(tb testing.TB, opts Options) (*redis.Client, *Store) {
	tb.Helper()
	ctx := context.Background()
	rdb, err := redisx.Open(ctx, testenv.Redis(tb))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { rdb.Close() })
	s := New(rdb, opts)
	if err := s.Load(ctx); err != nil {
		tb.Fatal(err)
	}
	if err := s.SetEpoch(ctx, "test"); err != nil {
		tb.Fatal(err)
	}
	return rdb, s
}

func (b *bundle) apply(now time.Time, fill func(*Batch)) ApplyResult {
	b.t.Helper()
	var batch Batch
	fill(&batch)
	res, err := b.store.Apply(b.ctx, now, &batch)
	if err != nil {
		b.t.Fatal(err)
	}
	return res
}

func enq(id string, attempt int, queue string, prio int, runAt time.Time) schema.Enqueued {
	return schema.Enqueued{
		JobRef:    schema.JobRef{JobID: id, TenantID: "t1", Attempt: attempt},
		Job:       schema.JobSpec{Type: "noop", Queue: queue, Priority: prio, MaxAttempts: 3, Pool: schema.PoolShort},
		CreatedAt: t0, RunAt: runAt, Reason: schema.ReasonSubmitted,
	}
}

func (b *bundle) enqueue(now time.Time, es ...schema.Enqueued) {
	b.t.Helper()
	b.apply(now, func(batch *Batch) {
		for _, e := range es {
			if err := batch.Enqueue(e, now); err != nil {
				b.t.Fatal(err)
			}
		}
	})
}

func (b *bundle) worker(now time.Time, id string, slots int) {
	b.t.Helper()
	b.workerHold(now, id, slots, 0)
}

// workerHold announces a worker that holds up to hold dispatches leased
// ahead of their due time.
func (b *bundle) workerHold(now time.Time, id string, slots, hold int) {
	b.t.Helper()
	b.apply(now, func(batch *Batch) {
		batch.Worker(schema.WorkerStatus{WorkerID: id, Pool: schema.PoolShort, Slots: slots, At: now, Hold: hold}, now.Add(5*time.Second))
	})
}

func (b *bundle) dispatch(now time.Time, prefetch int) DispatchResult {
	b.t.Helper()
	b.n++
	res, err := b.store.Dispatch(b.ctx, DispatchParams{Pool: schema.PoolShort, Now: now, Prefetch: prefetch, MaxBatch: 512,
		DispatchIDPrefix: fmt.Sprintf("d%d", b.n)})
	if err != nil {
		b.t.Fatal(err)
	}
	return res
}

func ids(ts []Template) []string {
	var out []string
	for _, t := range ts {
		out = append(out, t.JobID)
	}
	return out
}

func TestPriorityThenFIFOAcrossQueues(t *testing.T) {
	b := setup(t)
	b.worker(t0, "w1", 100)
	b.enqueue(t0,
		enq("a-p5", 1, "default", 5, t0),
		enq("b-p1", 1, "other", 1, t0),
		enq("c-p5", 1, "other", 5, t0),
		enq("d-p0", 1, "default", 0, t0),
		enq("e-p1", 1, "default", 1, t0),
		enq("f-p9", 1, "default", 9, t0),
	)
	b.enqueue(t0, enq("g-p5", 1, "default", 5, t0))
	got := ids(b.dispatch(t0, 0).Dispatched)
	want := []string{"d-p0", "b-p1", "e-p1", "a-p5", "c-p5", "g-p5", "f-p9"}
	if !slices.Equal(got, want) {
		t.Fatalf("order %v, want %v", got, want)
	}
}

func TestDispatchTemplate(t *testing.T) {
	b := setup(t)
	b.worker(t0, "w1", 1)
	e := enq("j1", 2, "default", 3, time.Time{})
	e.History = []schema.Attempt{{Attempt: 1, Class: schema.ClassAppError, Error: "boom"}}
	e.Job.Payload = []byte(`{"x":1}`)
	b.enqueue(t0, e)
	res := b.dispatch(t0.Add(time.Millisecond), 0)
	if len(res.Dispatched) != 1 {
		t.Fatalf("dispatched %d", len(res.Dispatched))
	}
	d := res.Dispatched[0]
	if d.Attempt != 2 || d.TenantID != "t1" || d.Job.Priority != 3 || string(d.Job.Payload) != `{"x":1}` ||
		!d.CreatedAt.Equal(t0) || !d.ReadyAt.Equal(t0) || d.DispatchID == "" ||
		!d.LeaseUntil.Equal(t0.Add(time.Millisecond+10*time.Second)) {
		t.Fatalf("template %+v", d)
	}
}

func TestDelayedPromotionNeverEarly(t *testing.T) {
	b := setup(t)
	b.worker(t0, "w1", 10)
	due := t0.Add(100*time.Millisecond + 500*time.Microsecond) // sub-ms due time
	b.enqueue(t0, enq("late", 1, "default", 5, due), enq("now", 1, "default", 5, t0))
	res := b.dispatch(t0, 0)
	if got := ids(res.Dispatched); !slices.Equal(got, []string{"now"}) {
		t.Fatalf("dispatched %v", got)
	}
	if want := t0.Add(101 * time.Millisecond); !res.NextDue.Equal(want) {
		t.Fatalf("next due %v, want %v", res.NextDue, want)
	}
	if res := b.dispatch(t0.Add(100*time.Millisecond), 0); len(res.Dispatched) != 0 {
		t.Fatalf("dispatched early: %v", ids(res.Dispatched))
	}
	res = b.dispatch(t0.Add(101*time.Millisecond), 0)
	if got := ids(res.Dispatched); !slices.Equal(got, []string{"late"}) {
		t.Fatalf("dispatched %v", got)
	}
	if !res.NextDue.IsZero() {
		t.Fatalf("next due %v, want none", res.NextDue)
	}
}

func TestEnqueueIdempotent(t *testing.T) {
	b := setup(t)
	b.worker(t0, "w1", 10)
	b.enqueue(t0, enq("j", 1, "default", 5, t0), enq("j", 1, "default", 5, t0))
	b.enqueue(t0, enq("j", 1, "default", 5, t0))
	res := b.dispatch(t0, 0)
	if len(res.Dispatched) != 1 {
		t.Fatalf("dispatched %v", ids(res.Dispatched))
	}
	// A replay while in flight neither re-queues nor frees anything.
	b.enqueue(t0, enq("j", 1, "default", 5, t0))
	if res := b.dispatch(t0, 0); len(res.Dispatched) != 0 {
		t.Fatalf("re-dispatched %v", ids(res.Dispatched))
	}
	// Done: even a newer attempt is ignored.
	b.apply(t0, func(batch *Batch) { batch.Complete("j", "t1", "") })
	b.enqueue(t0, enq("j", 1, "default", 5, t0), enq("j", 2, "default", 5, t0))
	if res := b.dispatch(t0, 0); len(res.Dispatched) != 0 {
		t.Fatalf("done job dispatched %v", ids(res.Dispatched))
	}
	ttl, err := b.rdb.TTL(b.ctx, b.store.Prefix()+"job:j").Result()
	if err != nil || ttl < 6*24*time.Hour {
		t.Fatalf("done marker ttl %v %v", ttl, err)
	}
	// Stale attempt after a newer one.
	b.enqueue(t0, enq("k", 3, "default", 5, t0), enq("k", 2, "default", 5, t0))
	res = b.dispatch(t0, 0)
	if len(res.Dispatched) != 1 || res.Dispatched[0].Attempt != 3 {
		t.Fatalf("dispatched %+v", res.Dispatched)
	}
}

func TestCapacityAndPrefetch(t *testing.T) {
	b := setup(t)
	var es []schema.Enqueued
	for i := range 20 {
		es = append(es, enq(fmt.Sprintf("j%02d", i), 1, "default", 5, t0))
	}
	b.enqueue(t0, es...)
	if res := b.dispatch(t0, 2); len(res.Dispatched) != 0 {
		t.Fatalf("dispatched %d without workers", len(res.Dispatched))
	}
	b.worker(t0, "w1", 2)
	b.worker(t0, "w2", 1)
	res := b.dispatch(t0, 2)
	if len(res.Dispatched) != 5 {
		t.Fatalf("dispatched %d, want 3 slots + 2 prefetch", len(res.Dispatched))
	}
	if res := b.dispatch(t0, 2); len(res.Dispatched) != 0 {
		t.Fatalf("dispatched %d beyond capacity", len(res.Dispatched))
	}
	b.apply(t0, func(batch *Batch) {
		batch.Complete(res.Dispatched[0].JobID, "t1", "")
		batch.Fail(res.Dispatched[1].JobID, res.Dispatched[1].DispatchID, schema.ClassPermanent)
	})
	if res := b.dispatch(t0, 2); len(res.Dispatched) != 2 {
		t.Fatalf("dispatched %d after two slots freed", len(res.Dispatched))
	}
	// Worker w2 stops, w1 goes silent: no capacity at all.
	b.apply(t0, func(batch *Batch) {
		batch.Worker(schema.WorkerStatus{WorkerID: "w2", Pool: schema.PoolShort, Slots: 1, Stopping: true}, t0.Add(5*time.Second))
	})
	later := t0.Add(5 * time.Second)
	b.apply(later, func(batch *Batch) {
		for _, d := range res.Dispatched[2:] {
			batch.Complete(d.JobID, "t1", "")
		}
	})
	if res := b.dispatch(later, 2); len(res.Dispatched) != 0 {
		t.Fatalf("dispatched %d with no live worker", len(res.Dispatched))
	}
	// An old announcement replayed does not revive it.
	b.apply(later, func(batch *Batch) {
		batch.Worker(schema.WorkerStatus{WorkerID: "w1", Pool: schema.PoolShort, Slots: 2}, t0.Add(4*time.Second))
	})
	if res := b.dispatch(later, 2); len(res.Dispatched) != 0 {
		t.Fatalf("dispatched %d after a stale announcement", len(res.Dispatched))
	}
}

func TestLeaseExpiryRedispatchKeepsAttempt(t *testing.T) {
	b := setup(t)
	b.worker(t0, "w1", 1)
	b.enqueue(t0, enq("lost", 2, "default", 5, t0))
	first := b.dispatch(t0, 0).Dispatched[0]
	// Behind it, same priority, a later job; and a more urgent one.
	b.enqueue(t0, enq("next", 1, "default", 5, t0), enq("urgent", 1, "default", 4, t0))

	// started extends the lease (only for the current dispatch).
	at := t0.Add(8 * time.Second)
	b.apply(at, func(batch *Batch) { batch.Extend("lost", first.DispatchID); batch.Extend("lost", "bogus") })
	b.worker(at, "w1", 1)
	if res := b.dispatch(t0.Add(11*time.Second), 0); len(res.Dispatched) != 0 || !res.NextLease.Equal(at.Add(10*time.Second)) {
		t.Fatalf("lease not extended: %v next lease %v", ids(res.Dispatched), res.NextLease)
	}
	b.worker(t0.Add(17*time.Second), "w1", 2)
	res := b.dispatch(t0.Add(18*time.Second), 0)
	if got := ids(res.Dispatched); !slices.Equal(got, []string{"urgent", "lost"}) {
		t.Fatalf("after expiry dispatched %v", got)
	}
	again := res.Dispatched[1]
	if again.Attempt != 2 || again.DispatchID == first.DispatchID {
		t.Fatalf("re-dispatch %+v", again)
	}
	// A late report of the old dispatch changes nothing.
	b.apply(t0.Add(18*time.Second), func(batch *Batch) {
		batch.Fail("lost", first.DispatchID, schema.ClassAppError)
		batch.Extend("lost", first.DispatchID)
	})
	r := b.apply(t0.Add(18*time.Second), func(batch *Batch) {})
	if len(r.Failed) != 0 {
		t.Fatalf("stale failure decided")
	}
}

func TestDoneNeverRedispatched(t *testing.T) {
	b := setup(t)
	b.worker(t0, "w1", 1)
	b.enqueue(t0, enq("j", 1, "default", 5, t0))
	d := b.dispatch(t0, 0).Dispatched[0]
	// Lease expires, the job goes back to ready; then the (slow) first run completes.
	b.worker(t0.Add(10*time.Second), "w1", 0)
	b.dispatch(t0.Add(11*time.Second), 0)
	b.apply(t0.Add(11*time.Second), func(batch *Batch) { batch.Complete("j", "t1", "") })
	b.worker(t0.Add(11*time.Second), "w1", 5)
	if res := b.dispatch(t0.Add(12*time.Second), 0); len(res.Dispatched) != 0 {
		t.Fatalf("completed job re-dispatched")
	}
	// Replays of its enqueue and of its old failure are ignored.
	r := b.apply(t0.Add(12*time.Second), func(batch *Batch) {
		_ = batch.Enqueue(enq("j", 1, "default", 5, t0), t0)
		batch.Fail("j", d.DispatchID, schema.ClassAppError)
	})
	if len(r.Failed) != 0 {
		t.Fatal("failure of a done job decided")
	}
	if res := b.dispatch(t0.Add(12*time.Second), 0); len(res.Dispatched) != 0 {
		t.Fatalf("completed job re-dispatched")
	}
}

func TestCancel(t *testing.T) {
	b := setup(t)
	b.worker(t0, "w1", 1)
	b.enqueue(t0, enq("run", 1, "default", 0, t0), enq("ready", 1, "default", 5, t0), enq("later", 1, "default", 5, t0.Add(time.Second)))
	d := b.dispatch(t0, 0).Dispatched[0]
	b.apply(t0, func(batch *Batch) {
		batch.Cancel("run", "t1")
		batch.Cancel("ready", "t1")
		batch.Cancel("later", "t1")
		batch.Cancel("unknown", "t1") // cancel seen before its enqueue
	})
	b.enqueue(t0, enq("unknown", 1, "default", 5, t0))
	// The running job keeps its slot until its worker reports.
	if res := b.dispatch(t0.Add(2*time.Second), 0); len(res.Dispatched) != 0 || !res.NextDue.IsZero() {
		t.Fatalf("dispatched %v, next due %v", ids(res.Dispatched), res.NextDue)
	}
	// Its slot is freed (whom that wakes: TestApplyWakesOnlyPoolsWithWork).
	r := b.apply(t0.Add(2*time.Second), func(batch *Batch) { batch.Fail("run", d.DispatchID, schema.ClassCancelled) })
	if len(r.Failed) != 0 {
		t.Fatalf("apply %+v", r)
	}
	b.enqueue(t0, enq("other", 1, "default", 5, t0))
	if got := ids(b.dispatch(t0.Add(2*time.Second), 0).Dispatched); !slices.Equal(got, []string{"other"}) {
		t.Fatalf("dispatched %v", got)
	}
	for _, id := range []string{"run", "ready", "later", "unknown"} {
		if st := b.rdb.HGet(b.ctx, b.store.Prefix()+"job:"+id, "state").Val(); st != "cancelled" {
			t.Errorf("%s state %q", id, st)
		}
	}
}

func TestFailedTemplateAndRetry(t *testing.T) {
	b := setup(t)
	b.worker(t0, "w1", 1)
	e := enq("j", 1, "default", 5, t0)
	e.History = nil
	b.enqueue(t0, e)
	d := b.dispatch(t0, 0).Dispatched[0]
	for range 2 { // a replay gives the same template again
		r := b.apply(t0, func(batch *Batch) { batch.Fail("j", d.DispatchID, schema.ClassAppError) })
		if len(r.Failed) != 1 || r.Failed[0].JobID != "j" || r.Failed[0].Attempt != 1 || r.Failed[0].Job.MaxAttempts != 3 {
			t.Fatalf("failed %+v", r.Failed)
		}
	}
	retry := enq("j", 2, "default", 5, t0.Add(time.Second))
	retry.History = []schema.Attempt{{Attempt: 1, Class: schema.ClassAppError}}
	b.enqueue(t0, retry)
	if res := b.dispatch(t0, 0); len(res.Dispatched) != 0 {
		t.Fatal("retry dispatched before its run_at")
	}
	res := b.dispatch(t0.Add(time.Second), 0)
	if len(res.Dispatched) != 1 || res.Dispatched[0].Attempt != 2 {
		t.Fatalf("retry %+v", res.Dispatched)
	}
	// worker_lost re-queues the same attempt without a decision.
	r := b.apply(t0.Add(time.Second), func(batch *Batch) {
		batch.Fail("j", res.Dispatched[0].DispatchID, schema.ClassWorkerLost)
	})
	if len(r.Failed) != 0 {
		t.Fatal("worker_lost needs no decision")
	}
	res = b.dispatch(t0.Add(time.Second), 0)
	if len(res.Dispatched) != 1 || res.Dispatched[0].Attempt != 2 {
		t.Fatalf("worker_lost re-dispatch %+v", res.Dispatched)
	}
	// Handed back by a stopping worker: again at once.
	b.apply(t0.Add(time.Second), func(batch *Batch) { batch.HandBack("j", 2) })
	if res := b.dispatch(t0.Add(time.Second), 0); len(res.Dispatched) != 1 {
		t.Fatal("handed-back job not re-dispatched")
	}
}

func TestNotAfterExpired(t *testing.T) {
	b := setup(t)
	b.worker(t0, "w1", 5)
	e := enq("exp", 1, "default", 5, t0)
	na := t0.Add(-time.Second)
	e.Job.NotAfter = &na
	b.enqueue(t0, e, enq("ok", 1, "default", 5, t0))
	res := b.dispatch(t0, 0)
	if got := ids(res.Dispatched); !slices.Equal(got, []string{"ok"}) {
		t.Fatalf("dispatched %v", got)
	}
	if got := ids(res.Expired); !slices.Equal(got, []string{"exp"}) || res.Expired[0].Job.NotAfter == nil {
		t.Fatalf("expired %+v", res.Expired)
	}
	// Not acknowledged: handed out again after the outbox retry.
	if res := b.dispatch(t0.Add(31*time.Second), 0); !slices.Equal(ids(res.Expired), []string{"exp"}) {
		t.Fatalf("expired not re-emitted: %v", ids(res.Expired))
	}
	b.apply(t0, func(batch *Batch) { batch.AckExpired(schema.PoolShort, "exp") })
	if res := b.dispatch(t0.Add(time.Hour), 0); len(res.Expired) != 0 {
		t.Fatalf("acknowledged expiry re-emitted")
	}
	if st := b.rdb.HGet(b.ctx, b.store.Prefix()+"job:exp", "state").Val(); st != "dead" {
		t.Fatalf("state %q", st)
	}
}

func TestLargeBatchPipelined(t *testing.T) {
	b := setup(t)
	b.worker(t0, "w1", 5000)
	var es []schema.Enqueued
	for i := range 1500 {
		es = append(es, enq(fmt.Sprintf("j%04d", i), 1, "default", 5, t0))
	}
	b.enqueue(t0, es...)
	total := 0
	for {
		res := b.dispatch(t0, 0)
		total += len(res.Dispatched)
		if !res.More {
			break
		}
	}
	if total != 1500 {
		t.Fatalf("dispatched %d", total)
	}
}

func TestNoEpochRefused(t *testing.T) {
	b := setup(t)
	if err := b.rdb.FlushDB(b.ctx).Err(); err != nil {
		t.Fatal(err)
	}
	var batch Batch
	_ = batch.Enqueue(enq("j", 1, "default", 5, t0), t0)
	if _, err := b.store.Apply(b.ctx, t0, &batch); !errors.Is(err, ErrNoEpoch) {
		t.Fatalf("apply without epoch: %v", err)
	}
	if _, err := b.store.Dispatch(b.ctx, DispatchParams{Pool: schema.PoolShort, Now: t0, MaxBatch: 10, DispatchIDPrefix: "x"}); !errors.Is(err, ErrNoEpoch) {
		t.Fatalf("dispatch without epoch: %v", err)
	}
	// The rebuild writes regardless.
	if _, err := b.store.ApplyRebuild(b.ctx, t0, &batch); err != nil {
		t.Fatal(err)
	}
	if err := b.store.SetEpoch(b.ctx, "e2"); err != nil {
		t.Fatal(err)
	}
	b.worker(t0, "w1", 1)
	if got := ids(b.dispatch(t0, 0).Dispatched); !slices.Equal(got, []string{"j"}) {
		t.Fatalf("dispatched %v after rebuild", got)
	}
}

func TestRebuildLock(t *testing.T) {
	b := setup(t)
	if ok, err := b.store.TryLock(b.ctx, "a", time.Minute); err != nil || !ok {
		t.Fatalf("a: %v %v", ok, err)
	}
	if ok, _ := b.store.TryLock(b.ctx, "b", time.Minute); ok {
		t.Fatal("b took a held lock")
	}
	if ok, _ := b.store.TryLock(b.ctx, "a", time.Minute); !ok {
		t.Fatal("a could not renew")
	}
	if err := b.store.Unlock(b.ctx, "b"); err != nil {
		t.Fatal(err)
	}
	if ok, _ := b.store.TryLock(b.ctx, "b", time.Minute); ok {
		t.Fatal("b unlocked a's lock")
	}
	if err := b.store.Unlock(b.ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if ok, _ := b.store.TryLock(b.ctx, "b", time.Minute); !ok {
		t.Fatal("b after unlock")
	}
}

// TestFlushDuringRebuildLosesTheLock: a flush while a rebuild runs takes
// the lock with it, so the rebuild can neither renew it nor write the
// epoch over a state that lost what it wrote so far.
func TestFlushDuringRebuildLosesTheLock(t *testing.T) {
	b := setup(t)
	if ok, err := b.store.TryLock(b.ctx, "a", time.Minute); err != nil || !ok {
		t.Fatalf("a: %v %v", ok, err)
	}
	if err := b.store.RenewLock(b.ctx, "a", time.Minute); err != nil {
		t.Fatalf("renewing a held lock: %v", err)
	}
	if err := b.store.RenewLock(b.ctx, "b", time.Minute); !errors.Is(err, ErrLockLost) {
		t.Fatalf("b renewed a's lock: %v", err)
	}
	if err := b.rdb.FlushDB(b.ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if err := b.store.RenewLock(b.ctx, "a", time.Minute); !errors.Is(err, ErrLockLost) {
		t.Fatalf("renew after a flush: %v, want ErrLockLost", err)
	}
	if err := b.store.SetEpochLocked(b.ctx, "a", "e1"); !errors.Is(err, ErrLockLost) {
		t.Fatalf("epoch after a flush: %v, want ErrLockLost", err)
	}
	if ep, _ := b.store.Epoch(b.ctx); ep != "" {
		t.Fatalf("epoch %q written without the lock", ep)
	}
	if ok, _ := b.store.TryLock(b.ctx, "a", time.Minute); !ok {
		t.Fatal("a could not take the lock again")
	}
	if err := b.store.SetEpochLocked(b.ctx, "a", "e2"); err != nil {
		t.Fatal(err)
	}
	if ep, _ := b.store.Epoch(b.ctx); ep != "e2" {
		t.Fatalf("epoch = %q, want e2", ep)
	}
}

func TestLateCompletionSupersedes(t *testing.T) {
	b := setup(t)
	b.worker(t0, "w1", 1)
	b.enqueue(t0, enq("j", 1, "default", 5, t0))
	first := b.dispatch(t0, 0).Dispatched[0]
	// The lease expires and the job is dispatched again.
	b.worker(t0.Add(11*time.Second), "w1", 1)
	second := b.dispatch(t0.Add(11*time.Second), 0).Dispatched[0]
	if second.DispatchID == first.DispatchID {
		t.Fatal("same dispatch id")
	}
	// The first run's late completion is accepted; the second copy is superseded.
	r := b.apply(t0.Add(12*time.Second), func(batch *Batch) { batch.Complete("j", "t1", first.DispatchID) })
	if len(r.Superseded) != 1 || r.Superseded[0].DispatchID != second.DispatchID || r.Superseded[0].Attempt != 1 || r.Superseded[0].TenantID != "t1" {
		t.Fatalf("superseded %+v", r.Superseded)
	}
	// The second copy's completion is a repeat: nothing more.
	r = b.apply(t0.Add(12*time.Second), func(batch *Batch) { batch.Complete("j", "t1", second.DispatchID) })
	if len(r.Superseded) != 0 {
		t.Fatalf("superseded twice %+v", r.Superseded)
	}
}

func TestRebuildOps(t *testing.T) {
	b := setup(t)
	e := enq("f", 2, "default", 5, t0)
	e.RedrivenFrom = "old"
	e.History = []schema.Attempt{{Attempt: 1, Class: schema.ClassAppError}}
	r := b.apply(t0, func(batch *Batch) {
		_ = batch.Enqueue(e, t0)
		batch.Refail("f", "d-1")
		batch.Dead("dead", "t1")
		batch.Complete("done", "t1", "")
	})
	if len(r.Failed) != 1 || r.Failed[0].DispatchID != "d-1" || r.Failed[0].Attempt != 2 || r.Failed[0].RedrivenFrom != "old" || len(r.Failed[0].History) != 1 {
		t.Fatalf("failed %+v", r.Failed)
	}
	b.worker(t0, "w1", 5)
	if res := b.dispatch(t0, 0); len(res.Dispatched) != 0 {
		t.Fatalf("dispatched %v", ids(res.Dispatched))
	}
	// Replayed enqueues of terminal jobs are ignored.
	b.apply(t0, func(batch *Batch) {
		_ = batch.Enqueue(enq("dead", 1, "default", 5, t0), t0)
		_ = batch.Enqueue(enq("done", 1, "default", 5, t0), t0)
	})
	if res := b.dispatch(t0, 0); len(res.Dispatched) != 0 {
		t.Fatalf("dispatched %v", ids(res.Dispatched))
	}
}

// TestEmptyQueuesLeaveTheIndex: queues without ready or delayed jobs leave
// the pool's and the tenant's index on the second sweep that finds them
// empty (Prune), so the loops over them follow the live queues, not every
// name ever used; a drained queue stays listed until then, and a job that
// becomes ready again (lease expiry, new job) puts its queue back.
func TestEmptyQueuesLeaveTheIndex(t *testing.T) {
	b := setup(t)
	b.worker(t0, "w1", 1000)
	var es []schema.Enqueued
	for i := range 300 {
		es = append(es, enq(fmt.Sprintf("j%03d", i), 1, fmt.Sprintf("q%03d", i), 5, t0))
	}
	es = append(es, enq("later", 1, "kept", 5, t0.Add(time.Hour)))
	b.enqueue(t0, es...)
	poolQ, tenantQ := b.store.Prefix()+"pool:short:queues", b.store.Prefix()+"pool:short:tq:t1"
	card := func(k string) int64 {
		n, err := b.rdb.SCard(b.ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	sweep := func(at time.Time) {
		if _, _, err := b.store.Prune(b.ctx, "short", at, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	if card(poolQ) != 301 || card(tenantQ) != 301 {
		t.Fatalf("indexed %d/%d queues, want 301", card(poolQ), card(tenantQ))
	}
	res := b.dispatch(t0, 0)
	if len(res.Dispatched) != 300 {
		t.Fatalf("dispatched %d", len(res.Dispatched))
	}
	sweep(t0) // marks the drained queues idle
	sweep(t0.Add(30 * time.Second))
	if card(poolQ) != 301 || card(tenantQ) != 301 {
		t.Fatalf("within the idle time: %d/%d queues indexed, want all 301 still listed", card(poolQ), card(tenantQ))
	}
	sweep(t0.Add(time.Minute))
	if card(poolQ) != 1 || card(tenantQ) != 1 {
		t.Fatalf("after draining: %d/%d queues indexed, want only the delayed one", card(poolQ), card(tenantQ))
	}
	// Lease expiries make the jobs ready again: their queues come back.
	b.worker(t0.Add(61*time.Second), "w1", 1000)
	if res := b.dispatch(t0.Add(61*time.Second), 0); len(res.Dispatched) == 0 {
		t.Fatal("expired leases not re-dispatched")
	}
	if card(poolQ) != 301 {
		t.Fatalf("re-queued jobs' queues: %d indexed, want 301", card(poolQ))
	}
	b.apply(t0.Add(61*time.Second), func(batch *Batch) {
		for i := range 300 {
			batch.Complete(fmt.Sprintf("j%03d", i), "t1", "")
		}
	})
	sweep(t0.Add(2 * time.Minute))
	sweep(t0.Add(3 * time.Minute))
	if card(poolQ) != 1 || card(tenantQ) != 1 {
		t.Fatalf("after completing: %d/%d queues indexed, want only the delayed one", card(poolQ), card(tenantQ))
	}
	b.enqueue(t0, enq("new", 1, "q007", 5, t0))
	if ok, _ := b.rdb.SIsMember(b.ctx, tenantQ, "q007").Result(); !ok {
		t.Fatal("a new job's queue is not indexed again")
	}
	b.worker(t0.Add(3*time.Minute), "w1", 1000)
	if got := ids(b.dispatch(t0.Add(3*time.Minute), 0).Dispatched); !slices.Contains(got, "new") {
		t.Fatalf("new job in a re-indexed queue not dispatched: %v", got)
	}
}

// TestHoldLeases: a hold moves the leases that would end sooner out to
// until, and leaves a longer one (an async job's hold) as it is.
func TestHoldLeases(t *testing.T) {
	b := setup(t)
	short, long := b.store.opts.Prefix+"pool:short:inflight", b.store.opts.Prefix+"pool:short:held"
	b.rdb.ZAdd(b.ctx, short, redis.Z{Score: float64(t0.Add(time.Second).UnixMilli()), Member: "soon"})
	b.rdb.ZAdd(b.ctx, long, redis.Z{Score: float64(t0.Add(time.Hour).UnixMilli()), Member: "later"})
	n, err := b.store.HoldLeases(b.ctx, []string{"short", "long"}, t0, time.Minute)
	if err != nil || n != 1 {
		t.Fatalf("HoldLeases = %d, %v; want 1 lease moved", n, err)
	}
	if s := b.rdb.ZScore(b.ctx, short, "soon").Val(); s != float64(t0.Add(time.Minute).UnixMilli()) {
		t.Errorf("held lease ends at %v, want now + one lease", s)
	}
	if s := b.rdb.ZScore(b.ctx, long, "later").Val(); s != float64(t0.Add(time.Hour).UnixMilli()) {
		t.Errorf("a longer lease moved to %v", s)
	}
}
