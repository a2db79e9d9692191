package qstore

import (
	"fmt"
	"testing"
	"time"

	"github.com/ferryhq/ferry/events/schema"
)

// dispatchWork is a dispatch step with a prefetch and a work window.
func (b *bundle) dispatchWork(now time.Time, prefetch int, window time.Duration, max int) []Template {
	b.t.Helper()
	b.n++
	res, err := b.store.Dispatch(b.ctx, DispatchParams{Pool: schema.PoolShort, Now: now, MaxBatch: 512, Prefetch: prefetch,
		DispatchIDPrefix: fmt.Sprintf("w%d", b.n), WorkWindow: window, WorkMax: max})
	if err != nil {
		b.t.Fatal(err)
	}
	return res.Dispatched
}

// TestWorkWindow: beyond the live slots, a step dispatches as many jobs as
// leave about the window's worth of expected work per slot (or the prefetch,
// if more): many short jobs, few long ones, none beyond the prefetch without
// a window; the rest stay ready, in order.
func TestWorkWindow(t *testing.T) {
	b := setup(t)
	b.worker(t0, "w1", 10)
	b.flood(t0, "a", 10)
	b.finish(t0, b.dispatchWork(t0, 0, 0, 0), func(Template) time.Duration { return 2 * time.Millisecond })

	b.flood(t0, "b", 600) // b's noop jobs are charged the type's 2 ms
	short := b.dispatchWork(t0, 0, 100*time.Millisecond, 1000)
	if len(short) != 10+500 {
		t.Fatalf("2 ms jobs: dispatched %d, want 10 slots + 10 × 100ms / 2ms = 510", len(short))
	}
	for i, d := range short {
		if want := fmt.Sprintf("b-%03d", i); d.JobID != want {
			t.Fatalf("dispatch %d is %s, want %s (FIFO)", i, d.JobID, want)
		}
	}
	if more := b.dispatchWork(t0, 0, 100*time.Millisecond, 1000); len(more) != 0 {
		t.Fatalf("with the window full: dispatched %d more", len(more))
	}
	b.finish(t0, short, func(Template) time.Duration { return 50 * time.Millisecond }) // b's estimate learns 50 ms
	long := b.dispatchWork(t0, 0, 100*time.Millisecond, 1000)
	if len(long) != 10+20 || long[0].JobID != "b-510" {
		t.Fatalf("50 ms jobs: dispatched %d from %v, want 10 slots + 10 × 100ms / 50ms = 30 from b-510", len(long), ids(long[:1]))
	}
	b.finish(t0, long, func(Template) time.Duration { return 50 * time.Millisecond })
	capped := b.dispatchWork(t0, 0, 100*time.Millisecond, 5)
	if len(capped) != 10+5 {
		t.Fatalf("work max 5: dispatched %d, want 15", len(capped))
	}
	b.flood(t0, "c", 50)
	if none := b.dispatchWork(t0, 0, 0, 1000); len(none) != 0 {
		t.Fatalf("no window, 15 in flight on 10 slots: dispatched %d", len(none))
	}
	b.finish(t0, capped, func(Template) time.Duration { return 50 * time.Millisecond })
	// The work window does not add to a larger prefetch: beyond the 10
	// slots, max(prefetch 40, 10 × 100ms / 50ms).
	if pre := b.dispatchWork(t0, 40, 100*time.Millisecond, 1000); len(pre) != 10+40 {
		t.Fatalf("prefetch 40, 50 ms jobs: dispatched %d, want 50", len(pre))
	}
}
