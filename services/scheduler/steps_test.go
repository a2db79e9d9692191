package scheduler

import (
	"context"
	"testing"
	"time"
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
