package worker

import (
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
	held dueHeap
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
	hd := &heldDispatch{q: q, d: d}
	h.held.push(hd)
	if h.held[0].hd == hd {
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
				h.held.push(&next)
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
	if wait = time.Until(*h.held[0].hd.d.NotBefore); wait > 0 {
		return heldDispatch{}, wait, true
	}
	return *h.held.pop().hd, 0, true
}

// drain empties the hold, once run has returned: the dispatches never
// started, to be handed back.
func (h *hold) drain() []heldDispatch {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]heldDispatch, len(h.held))
	for i, e := range h.held {
		out[i] = *e.hd
	}
	h.held = nil
	return out
}

// dueHeap orders held dispatches by due time, a binary min-heap. Its
// entries are small, the due time inline and the dispatch behind a
// pointer, and it is typed (container/heap boxes each pushed and popped
// value): a burst leased ahead holds thousands, and each push and pop
// moves log2(n) entries. With heldDispatch values (~300 bytes) under
// container/heap it took 4 µs per dispatch at 10,000 held
// (BenchmarkHoldBurst).
type dueHeap []dueEntry

type dueEntry struct {
	due int64 // d.NotBefore in Unix nanoseconds
	hd  *heldDispatch
}

// push adds hd, keyed by its not-before.
func (x *dueHeap) push(hd *heldDispatch) {
	*x = append(*x, dueEntry{due: hd.d.NotBefore.UnixNano(), hd: hd})
	h := *x
	for i := len(h) - 1; i > 0; {
		parent := (i - 1) / 2
		if h[parent].due <= h[i].due {
			break
		}
		h[parent], h[i] = h[i], h[parent]
		i = parent
	}
}

// pop removes and returns the earliest entry; x must not be empty.
func (x *dueHeap) pop() dueEntry {
	h := *x
	top, n := h[0], len(h)-1
	h[0], h[n] = h[n], dueEntry{}
	h = h[:n]
	for i := 0; ; {
		least, l, r := i, 2*i+1, 2*i+2
		if l < n && h[l].due < h[least].due {
			least = l
		}
		if r < n && h[r].due < h[least].due {
			least = r
		}
		if least == i {
			break
		}
		h[i], h[least] = h[least], h[i]
		i = least
	}
	*x = h
	return top
}
