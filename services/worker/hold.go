package worker

import (
	"container/heap"
	"sync"
	"time"

	"github.com/ferryhq/ferry/events/schema"
)

// hold keeps the dispatches the scheduler leased ahead of their due time
// (schema.Dispatch.NotBefore) until that time, outside the runners: a
// burst due at one instant is fetched, decoded and waiting before it, so
// at the instant a runner only has to start each one, and the runners
// stay free for jobs due now meanwhile. It holds at most Config.Hold
// dispatches, the number the worker announces, which bounds what the
// scheduler leases ahead; a dispatch that does not fit waits in its runner
// instead (awaitNotBefore). The checks that decide whether a dispatch runs
// (its partition still assigned, a cancellation, a duplicate: admit) are
// made when it is due, not when it is held.
type hold struct {
	max  int
	mu   sync.Mutex
	held heldHeap
	// wake (capacity 1) tells run that the earliest due time changed.
	wake chan struct{}
	// due hands each dispatch to a runner once due, earliest first.
	due chan heldDispatch
}

// heldDispatch is a dispatch waiting in the hold: its record and its
// decoded value, due at d.NotBefore.
type heldDispatch struct {
	q queued
	d schema.Dispatch
}

func newHold(max int) *hold {
	return &hold{max: max, wake: make(chan struct{}, 1), due: make(chan heldDispatch)}
}

// add keeps q, decoded as d, until d.NotBefore; false when the hold is
// full (or has no room at all) and the caller must wait itself.
func (h *hold) add(q queued, d schema.Dispatch) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.held) >= h.max {
		return false
	}
	heap.Push(&h.held, heldDispatch{q: q, d: d})
	if h.held[0].q.rec == q.rec {
		select {
		case h.wake <- struct{}{}:
		default:
		}
	}
	return true
}

// len is how many dispatches the hold keeps now (the worker's held gauge).
func (h *hold) len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.held)
}

// run hands the held dispatches to the runners as they come due, until
// stop is closed; what it has not handed over stays in the hold (drain).
func (h *hold) run(stop <-chan struct{}) {
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		next, wait, ok := h.next()
		if ok && wait <= 0 {
			select {
			case h.due <- next:
			case <-stop:
				h.mu.Lock()
				heap.Push(&h.held, next)
				h.mu.Unlock()
				return
			}
			continue
		}
		if ok {
			timer.Reset(wait)
		}
		select {
		case <-timer.C:
		case <-h.wake:
			timer.Stop()
		case <-stop:
			return
		}
	}
}

// next takes the earliest dispatch out of the hold if it is due; else it
// says how long until it is (ok false: the hold is empty).
func (h *hold) next() (next heldDispatch, wait time.Duration, ok bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.held) == 0 {
		return heldDispatch{}, 0, false
	}
	if wait = time.Until(*h.held[0].d.NotBefore); wait > 0 {
		return heldDispatch{}, wait, true
	}
	return heap.Pop(&h.held).(heldDispatch), 0, true
}

// drain empties the hold, once run has returned: the dispatches never
// started, to be handed back.
func (h *hold) drain() []heldDispatch {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := []heldDispatch(h.held)
	h.held = nil
	return out
}

// heldHeap orders held dispatches by due time (container/heap).
type heldHeap []heldDispatch

func (x heldHeap) Len() int           { return len(x) }
func (x heldHeap) Less(i, j int) bool { return x[i].d.NotBefore.Before(*x[j].d.NotBefore) }
func (x heldHeap) Swap(i, j int)      { x[i], x[j] = x[j], x[i] }
func (x *heldHeap) Push(v any)        { *x = append(*x, v.(heldDispatch)) }
func (x *heldHeap) Pop() any {
	old := *x
	v := old[len(old)-1]
	old[len(old)-1] = heldDispatch{}
	*x = old[:len(old)-1]
	return v
}
