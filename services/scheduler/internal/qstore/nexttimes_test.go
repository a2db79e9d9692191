package qstore

import (
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ferryhq/ferry/events/schema"
)

// TestStepNextTimesAreTheSetsFirst: a dispatch step reads the first due
// time of each set it sweeps before sweeping it, and reports the next
// lease deadline and the next due time from what it read and what it
// added, not from a second read at its end. After every step of a run
// that expires leases, holds an attempt outside the workers, promotes due
// jobs and leases others ahead, both must equal what the sets hold.
func TestStepNextTimesAreTheSetsFirst(t *testing.T) {
	b := setup(t)
	b.workerHold(t0, "w1", 2, 4)
	var es []schema.Enqueued
	for i, d := range []time.Duration{0, 0, 0, 100 * time.Millisecond, 3 * time.Second, 3 * time.Second, 40 * time.Second} {
		es = append(es, enq(fmt.Sprintf("j%d", i), 1, "default", 5, t0.Add(d)))
	}
	b.enqueue(t0, es...)
	steps := []struct {
		at   time.Duration
		hook func(res DispatchResult, now time.Time)
	}{
		{0, func(res DispatchResult, now time.Time) {
			// Hold the first dispatched attempt for a minute (async http).
			b.apply(now, func(batch *Batch) { batch.Hold(res.Dispatched[0].JobID, res.Dispatched[0].DispatchID, time.Minute) })
		}},
		{time.Second, nil},
		{3 * time.Second, nil},
		// The worker announces itself again; every lease of 10 s has run out.
		{15 * time.Second, nil},
		{16 * time.Second, nil},
		{45 * time.Second, nil},
		{90 * time.Second, nil},
	}
	for _, st := range steps {
		now := t0.Add(st.at)
		b.workerHold(now, "w1", 2, 4)
		res := b.dispatchAhead(now, 512)
		b.wantNextTimes(t, now, res)
		if st.hook != nil && len(res.Dispatched) > 0 {
			st.hook(res, now)
		}
	}
}

// wantNextTimes compares res's NextLease and NextDue with the first
// members of the pool's lease sets and delayed sets (no gates here).
func (b *bundle) wantNextTimes(t *testing.T, now time.Time, res DispatchResult) {
	t.Helper()
	pp := b.store.opts.Prefix + "pool:" + schema.PoolShort
	first := func(k string) (int64, bool) {
		r, err := b.rdb.ZRangeWithScores(b.ctx, k, 0, 0).Result()
		if err != nil && err != redis.Nil {
			t.Fatal(err)
		}
		if len(r) == 0 {
			return 0, false
		}
		return int64(r[0].Score), true
	}
	var lease int64 = -1
	for _, k := range []string{pp + ":inflight", pp + ":held"} {
		if s, ok := first(k); ok && (lease < 0 || s < lease) {
			lease = s
		}
	}
	var due int64 = -1
	if s, ok := first(b.store.opts.Prefix + "q:default:delayed"); ok {
		if ahead := testLookahead.Milliseconds(); s-ahead > now.UnixMilli() {
			s -= ahead
		}
		due = s
	}
	if got := ms(res.NextLease); got != lease {
		t.Errorf("at +%v: next lease %d, the lease sets' first %d", now.Sub(t0), got, lease)
	}
	if got := ms(res.NextDue); got != due {
		t.Errorf("at +%v: next due %d, the delayed set's first %d (less the look-ahead)", now.Sub(t0), got, due)
	}
}

// ms is t in Unix milliseconds, -1 for the zero time (none).
func ms(t time.Time) int64 {
	if t.IsZero() {
		return -1
	}
	return t.UnixMilli()
}
