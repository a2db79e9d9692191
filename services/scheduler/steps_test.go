package scheduler

import (
	"context"
	"testing"
	"time"

	"github.com/ferryhq/ferry/events/schema"
	"github.com/ferryhq/ferry/platform/redisx"
	"github.com/ferryhq/ferry/platform/testenv"
	"github.com/ferryhq/ferry/services/scheduler/internal/qstore"
)

// TestNextHintKeepsTheEarliest: the loop takes the earliest time offered
// since it last took one, once.
func TestNextHintKeepsTheEarliest(t *testing.T) {
	l := newPoolLoop()
	t0 := time.Now()
	l.next.offer(t0.Add(3 * time.Second))
	l.next.offer(t0.Add(time.Second))
	l.next.offer(t0.Add(2 * time.Second))
	l.next.offer(time.Time{}) // none: ignored
	select {
	case <-l.next.ch:
	default:
		t.Fatal("an offer did not signal the loop")
	}
	if got := l.next.take(); !got.Equal(t0.Add(time.Second)) {
		t.Fatalf("took %v, want the earliest offered (%v)", got, t0.Add(time.Second))
	}
	if got := l.next.take(); !got.IsZero() {
		t.Fatalf("took %v again, want nothing", got)
	}
}

// TestAwaitStepWakesAtAnOfferedDueTime: a loop waiting for a step an hour
// away runs it once a step of the consumer offers a due time that has come.
func TestAwaitStepWakesAtAnOfferedDueTime(t *testing.T) {
	s := &Service{cfg: Config{Now: time.Now}}
	l := newPoolLoop()
	timer, tick := time.NewTimer(time.Hour), time.NewTimer(time.Hour)
	done := make(chan bool, 1)
	go func() {
		done <- s.awaitStep(context.Background(), l, time.Now().Add(time.Hour), time.Hour, timer, tick)
	}()
	l.next.offer(time.Now().Add(2 * time.Hour)) // later than the loop's own: no step
	l.next.offer(time.Now().Add(-time.Millisecond))
	select {
	case ok := <-done:
		if !ok {
			t.Fatal("awaitStep returned false with ctx alive")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the loop did not run a step at the due time the consumer's step offered")
	}
}

// TestGateHoldReleasesOnTheLastHolder: the gate's share taken for a batch
// is released when the batch and every step's produce let go, not before.
func TestGateHoldReleasesOnTheLastHolder(t *testing.T) {
	s := &Service{}
	h := s.holdGate()
	h.add()
	h.add()
	for range 2 {
		h.release()
		if s.gate.TryLock() {
			t.Fatal("the gate was free while holders remained")
		}
	}
	h.release()
	if !s.gate.TryLock() {
		t.Fatal("the gate stayed held after the last holder let go")
	}
}

// TestApplyWakesABusyLoopInsteadOfSteppingForIt: the consumer runs a step
// only for a pool whose loop is waiting, and only for an apply that
// enqueues; otherwise the loop is woken, and its next step takes what the
// apply made ready.
func TestApplyWakesABusyLoopInsteadOfSteppingForIt(t *testing.T) {
	ctx := context.Background()
	rdb, err := redisx.Open(ctx, testenv.Redis(t))
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	cfg := Config{Pools: []string{schema.PoolShort}}.WithDefaults()
	s := &Service{cfg: cfg, store: newStore(rdb, cfg), loops: map[string]*poolLoop{schema.PoolShort: newPoolLoop()}}
	if err := s.store.Load(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.store.SetEpoch(ctx, "test"); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	var b qstore.Batch
	b.Worker(schema.WorkerStatus{WorkerID: "w1", Pool: schema.PoolShort, Slots: 1, At: now}, now.Add(time.Minute))
	if err := b.Enqueue(schema.Enqueued{JobRef: schema.JobRef{JobID: "a", TenantID: "t1", Attempt: 1},
		Job: schema.JobSpec{Type: "noop", Queue: "default", Pool: schema.PoolShort, MaxAttempts: 1}, CreatedAt: now}, now); err != nil {
		t.Fatal(err)
	}
	hold := s.holdGate()
	defer hold.release()
	if _, err := s.applyAndStep(ctx, now, &b, true, hold); err != nil { // the loop is not waiting
		t.Fatal(err)
	}
	select {
	case <-s.loops[schema.PoolShort].wake:
	default:
		t.Fatal("the busy loop was not woken")
	}
	// An apply without enqueues (here a second worker's announcement) leaves
	// the job to the loop even while it waits.
	s.loops[schema.PoolShort].waiting.Store(true)
	var more qstore.Batch
	more.Worker(schema.WorkerStatus{WorkerID: "w2", Pool: schema.PoolShort, Slots: 1, At: now}, now.Add(time.Minute))
	if _, err := s.applyAndStep(ctx, now, &more, false, hold); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.loops[schema.PoolShort].wake:
	default:
		t.Fatal("the waiting loop was not woken for an apply without enqueues")
	}
	res, err := s.store.Dispatch(ctx, qstore.DispatchParams{Pool: schema.PoolShort, Now: now, MaxBatch: 10, DispatchIDPrefix: "d"})
	if err != nil || len(res.Dispatched) != 1 {
		t.Fatalf("the loop's step dispatched %d (%v), want the job the applies left to it", len(res.Dispatched), err)
	}
}
