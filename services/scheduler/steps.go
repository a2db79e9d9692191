package scheduler

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ferryhq/ferry/events/schema"
	"github.com/ferryhq/ferry/services/scheduler/internal/qstore"
)

// poolLoop is what a pool's dispatch loop shares with the consumer, which
// runs steps of the pool too: the apply of a small batch that enqueues
// runs the steps of the pools it wakes in the same Redis call
// (applyAndStep), instead of waking their loops for a call of their own.
// At 1,000 jobs a second that is a script call, a goroutine hop and ~6
// Redis commands fewer per submitted job (docs/performance.md, Round 22).
type poolLoop struct {
	// wake (capacity 1): a send (never blocking) makes the loop run a step
	// at once.
	wake chan struct{}
	// waiting is true while the loop waits for its next step (awaitStep):
	// only then does the consumer run a step of the pool. A loop that is
	// stepping already takes what an apply made ready in its next step,
	// with everything else waiting.
	waiting atomic.Bool
	// next carries the next due time of the consumer's steps to the loop,
	// which keeps the timer for it.
	next nextHint
	// rate is the pool's dispatch rate, both kinds of steps counted: it
	// sizes the dispatch window (prefetch).
	mu   sync.Mutex
	rate rateEstimate
}

func newPoolLoop() *poolLoop {
	return &poolLoop{wake: make(chan struct{}, 1), next: nextHint{ch: make(chan struct{}, 1)}}
}

// signal makes the loop run a step at once.
func (l *poolLoop) signal() {
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// dispatched counts n jobs a step of the pool handed out at now.
func (l *poolLoop) dispatched(now time.Time, n int) {
	l.mu.Lock()
	l.rate.add(now, n)
	l.mu.Unlock()
}

// rateAt is the pool's dispatch rate estimate at now.
func (l *poolLoop) rateAt(now time.Time) float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.rate.decayed(now)
}

// nextHint is the earliest next due time offered since the loop last took
// it, and a signal that one was offered.
type nextHint struct {
	mu sync.Mutex
	at time.Time
	ch chan struct{} // capacity 1
}

// offer keeps t if it is the earliest offered, and signals the loop.
func (h *nextHint) offer(t time.Time) {
	if t.IsZero() {
		return
	}
	h.mu.Lock()
	if h.at.IsZero() || t.Before(h.at) {
		h.at = t
	}
	h.mu.Unlock()
	select {
	case h.ch <- struct{}{}:
	default:
	}
}

// take returns the earliest time offered and forgets it (zero: none).
func (h *nextHint) take() time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	t := h.at
	h.at = time.Time{}
	return t
}

// earliest is the earlier of two times, zero meaning none.
func earliest(a, b time.Time) time.Time {
	if a.IsZero() || (!b.IsZero() && b.Before(a)) {
		return b
	}
	return a
}

// stepParams are the parameters of a step of pool now.
func (s *Service) stepParams(pool string) qstore.DispatchParams {
	return qstore.DispatchParams{
		Pool: pool, Now: s.cfg.Now(), Prefetch: s.prefetch(s.loops[pool]), MaxBatch: s.cfg.MaxBatch,
		DispatchIDPrefix: schema.NewEventID(), Lookahead: max(s.cfg.Lookahead, 0),
		WorkWindow: max(s.cfg.PrefetchWindow, 0), WorkMax: s.cfg.PrefetchMax,
	}
}

// applyAndStep applies b and, when b enqueues jobs, runs in the same Redis
// call a step of each pool it wakes whose loop is waiting
// (poolLoop.waiting): the step that hands out a job submitted alone. An
// apply of outcomes only frees slots, and leaves them to the loop, whose
// step a moment later takes all that were freed meanwhile (at full load,
// steps run by each apply of outcomes made more, smaller steps and ~5 %
// fewer jobs a second, Round 22). The steps' records are produced as a
// loop's step's are, and keep the gate (hold) until acknowledged. The
// loops of the pools woken but not stepped are woken, and so is a stepped
// pool's loop when its step stopped with more to do; the others only learn
// their step's next due time.
func (s *Service) applyAndStep(ctx context.Context, now time.Time, b *qstore.Batch, enqueues bool, hold *gateHold) (qstore.ApplyResult, error) {
	var offer []qstore.DispatchParams
	for _, pool := range s.cfg.Pools {
		if enqueues && s.loops[pool].waiting.Load() {
			offer = append(offer, s.stepParams(pool))
		}
	}
	res, steps, err := s.store.ApplyDispatch(ctx, now, b, offer)
	if err != nil {
		return res, err
	}
	stepped := make(map[string]bool, len(steps))
	for _, st := range steps {
		stepped[st.Pool] = true
		l := s.loops[st.Pool]
		l.dispatched(s.cfg.Now(), len(st.Dispatched))
		l.next.offer(earliest(st.NextDue, st.NextLease))
		if st.More {
			l.signal()
		}
		hold.add()
		s.handOut(ctx, st.Pool, st.DispatchResult, hold.release)
	}
	s.wakePools(res.Wake, stepped)
	return res, nil
}

// gateHold is a share of the gate (Service.gate) taken once and released
// when its last holder lets go: the consumer's batch and the produce of
// each step its apply ran. A second RLock by the same goroutine could wait
// forever behind a rebuild's Lock.
type gateHold struct {
	n      atomic.Int64
	unlock func()
}

// holdGate takes a share of the gate, held by the caller.
func (s *Service) holdGate() *gateHold {
	s.gate.RLock()
	h := &gateHold{unlock: s.gate.RUnlock}
	h.n.Store(1)
	return h
}

// add counts one more holder.
func (h *gateHold) add() { h.n.Add(1) }

// release lets one holder go; the last releases the gate.
func (h *gateHold) release() {
	if h.n.Add(-1) == 0 {
		h.unlock()
	}
}
