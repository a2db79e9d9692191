package qstore

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/ferryhq/ferry/events/schema"
)

const testLookahead = 250 * time.Millisecond

// dispatchAhead is dispatch with a look-ahead of testLookahead.
func (b *bundle) dispatchAhead(now time.Time, maxBatch int) DispatchResult {
	b.t.Helper()
	b.n++
	res, err := b.store.Dispatch(b.ctx, DispatchParams{Pool: schema.PoolShort, Now: now, MaxBatch: maxBatch,
		DispatchIDPrefix: fmt.Sprintf("d%d", b.n), Lookahead: testLookahead})
	if err != nil {
		b.t.Fatal(err)
	}
	return res
}

// TestLeaseAheadCarriesTheDueTime: a delayed job due within the look-ahead
// is dispatched before its due time with that time (rounded up to the ms,
// so never early) as NotBefore; one due later waits, and the step asks to
// be woken when it enters the look-ahead; a job dispatched once due has
// no NotBefore.
func TestLeaseAheadCarriesTheDueTime(t *testing.T) {
	b := setup(t)
	b.workerHold(t0, "w1", 10, 10)
	soon := t0.Add(100*time.Millisecond + 500*time.Microsecond)
	later := t0.Add(2 * time.Second)
	b.enqueue(t0, enq("soon", 1, "default", 5, soon), enq("later", 1, "default", 5, later), enq("now", 1, "default", 5, t0))
	res := b.dispatchAhead(t0, 512)
	if got := ids(res.Dispatched); !slices.Equal(got, []string{"now", "soon"}) {
		t.Fatalf("dispatched %v, want [now soon]", got)
	}
	if nb := byID(res.Dispatched, "now").NotBefore; !nb.IsZero() {
		t.Fatalf("a due job carries not-before %v", nb)
	}
	if nb, want := byID(res.Dispatched, "soon").NotBefore, t0.Add(101*time.Millisecond); !nb.Equal(want) {
		t.Fatalf("not-before %v, want %v (the due time rounded up)", nb, want)
	}
	if want := later.Add(-testLookahead); !res.NextDue.Equal(want) {
		t.Fatalf("next due %v, want %v (when the next job enters the look-ahead)", res.NextDue, want)
	}
	if got := ids(b.dispatchAhead(res.NextDue.Add(-time.Millisecond), 512).Dispatched); len(got) != 0 {
		t.Fatalf("dispatched %v before the look-ahead", got)
	}
	res = b.dispatchAhead(res.NextDue, 512)
	if got := ids(res.Dispatched); !slices.Equal(got, []string{"later"}) || !res.Dispatched[0].NotBefore.Equal(later) {
		t.Fatalf("dispatched %v (not-before %v), want [later] with %v", got, res.Dispatched, later)
	}
	if !res.NextDue.IsZero() {
		t.Fatalf("next due %v, want none", res.NextDue)
	}
}

// TestLeaseAheadLeavesGatedJobsUntilDue: flow control decides at the due
// time: a job with a concurrency key, or of a tenant with a rate limit,
// is not leased ahead; the step wakes at its due time, and it goes then,
// without a not-before.
func TestLeaseAheadLeavesGatedJobsUntilDue(t *testing.T) {
	b := setup(t)
	b.workerHold(t0, "w1", 10, 10)
	due := t0.Add(100 * time.Millisecond)
	keyed := enqK("keyed", "x", "cust-a", 1)
	keyed.RunAt = due
	b.enqueue(t0, keyed)
	res := b.dispatchAhead(t0, 512)
	if len(res.Dispatched) != 0 || !res.NextDue.Equal(due) {
		t.Fatalf("dispatched %v, next due %v; want none, and a wake at %v", ids(res.Dispatched), res.NextDue, due)
	}
	res = b.dispatchAhead(due, 512)
	if got := ids(res.Dispatched); !slices.Equal(got, []string{"keyed"}) || !res.Dispatched[0].NotBefore.IsZero() {
		t.Fatalf("at its due time: %v, want [keyed] without not-before", got)
	}

	b.flow(due, FlowSettings{RateLimits: map[string]RateLimit{"api.call": {PerSecond: 5, Burst: 5}}})
	limited := enqK("limited", "noop", "", 0) // the tenant has rate limits: gated whatever its type
	limited.RunAt = due.Add(100 * time.Millisecond)
	b.enqueue(due, limited)
	if res := b.dispatchAhead(due, 512); len(res.Dispatched) != 0 {
		t.Fatalf("leased %v ahead for a tenant with rate limits", ids(res.Dispatched))
	}
	if got := ids(b.dispatchAhead(limited.RunAt, 512).Dispatched); !slices.Equal(got, []string{"limited"}) {
		t.Fatalf("at its due time: %v, want [limited]", got)
	}
}

// TestLeaseAheadCancelAndLostLease: a job leased ahead and cancelled
// before it started is never dispatched again, even once its lease
// expires; one whose worker is lost is dispatched again, same attempt, once
// its lease expires, with no not-before once it is past due.
func TestLeaseAheadCancelAndLostLease(t *testing.T) {
	b := setup(t)
	b.workerHold(t0, "w1", 10, 10)
	due := t0.Add(200 * time.Millisecond)
	b.enqueue(t0, enq("gone", 1, "default", 5, due), enq("lost", 1, "default", 5, due))
	first := b.dispatchAhead(t0, 512).Dispatched
	if got := ids(first); !slices.Equal(got, []string{"gone", "lost"}) || !first[0].NotBefore.Equal(due) || !first[1].NotBefore.Equal(due) {
		t.Fatalf("leased ahead %+v, want gone and lost with not-before %v", first, due)
	}
	b.apply(t0, func(batch *Batch) { batch.Cancel("gone", "t1") })
	expiry := first[0].LeaseUntil
	b.workerHold(expiry, "w2", 10, 10) // w1 went silent
	again := b.dispatchAhead(expiry, 512).Dispatched
	if len(again) != 1 || again[0].JobID != "lost" || again[0].Attempt != 1 || again[0].DispatchID == byID(first, "lost").DispatchID ||
		!again[0].NotBefore.IsZero() {
		t.Fatalf("after the lost leases: %+v, want only lost again, attempt 1, a new dispatch id, no not-before", again)
	}
}

// TestLeaseAheadIntoTheHolds: jobs are leased ahead up to what the pool's
// workers hold, and take no slot until due: jobs ready now still get every
// slot. With the holds full nothing more goes ahead, and the step looks
// again when the first job held is due; once due, the held jobs count as
// in flight.
func TestLeaseAheadIntoTheHolds(t *testing.T) {
	b := setup(t)
	b.workerHold(t0, "w1", 10, 7)
	due := t0.Add(100 * time.Millisecond)
	es := []schema.Enqueued{enq("now1", 1, "default", 5, t0), enq("now2", 1, "default", 5, t0), enq("now3", 1, "default", 5, t0)}
	for i := range 20 {
		es = append(es, enq(fmt.Sprintf("soon%02d", i), 1, "default", 5, due))
	}
	b.enqueue(t0, es...)
	res := b.dispatchAhead(t0, 512)
	if len(res.Dispatched) != 10 || aheadOf(res) != 7 {
		t.Fatalf("dispatched %v (%d ahead), want the 3 ready and 7 ahead into the hold", ids(res.Dispatched), aheadOf(res))
	}
	var more []schema.Enqueued
	for i := range 7 {
		more = append(more, enq(fmt.Sprintf("late%d", i), 1, "default", 5, t0))
	}
	b.enqueue(t0, more...)
	res = b.dispatchAhead(t0, 512)
	if len(res.Dispatched) != 7 || aheadOf(res) != 0 || !res.NextDue.Equal(due) {
		t.Fatalf("dispatched %v (%d ahead), next due %v; want the 7 ready now in the free slots, none ahead, a look at %v",
			ids(res.Dispatched), aheadOf(res), res.NextDue, due)
	}
	b.enqueue(t0, enq("after", 1, "default", 5, t0))
	if res := b.dispatchAhead(due, 512); len(res.Dispatched) != 0 {
		t.Fatalf("once the held jobs are due (17 in flight on 10 slots): dispatched %v", ids(res.Dispatched))
	}
}

// TestLeaseAheadNeedsAHold: a pool whose workers hold nothing (they
// announce no hold) leases nothing ahead: the job goes once due.
func TestLeaseAheadNeedsAHold(t *testing.T) {
	b := setup(t)
	b.worker(t0, "w1", 10)
	due := t0.Add(100 * time.Millisecond)
	b.enqueue(t0, enq("soon", 1, "default", 5, due))
	if res := b.dispatchAhead(t0, 512); len(res.Dispatched) != 0 || !res.NextDue.Equal(due) {
		t.Fatalf("dispatched %v, next due %v; want none until %v", ids(res.Dispatched), res.NextDue, due)
	}
	if res := b.dispatchAhead(due, 512); len(res.Dispatched) != 1 || aheadOf(res) != 0 {
		t.Fatalf("at its due time: %v, want soon without not-before", ids(res.Dispatched))
	}
}

// aheadOf counts the dispatches of res with a not-before.
func aheadOf(res DispatchResult) int {
	n := 0
	for _, d := range res.Dispatched {
		if !d.NotBefore.IsZero() {
			n++
		}
	}
	return n
}

// TestLeaseAheadBurst: a burst due at one instant larger than a step's
// chunk is made ready over consecutive steps (More), each job leased ahead
// with the burst's due time, none twice.
func TestLeaseAheadBurst(t *testing.T) {
	b := setup(t)
	b.workerHold(t0, "w1", 10, 5000)
	due := t0.Add(200 * time.Millisecond)
	const n = 2500
	var es []schema.Enqueued
	for i := range n {
		es = append(es, enq(fmt.Sprintf("j%05d", i), 1, "default", 5, due))
	}
	b.enqueue(t0, es...)
	seen := map[string]bool{}
	for step := 0; ; step++ {
		if step > 20 {
			t.Fatalf("still stepping after %d steps: %d of %d leased", step, len(seen), n)
		}
		res := b.dispatchAhead(t0, 512)
		for _, d := range res.Dispatched {
			if seen[d.JobID] || !d.NotBefore.Equal(due) {
				t.Fatalf("%s: leased twice (%v) or not-before %v, want %v", d.JobID, seen[d.JobID], d.NotBefore, due)
			}
			seen[d.JobID] = true
		}
		if !res.More {
			break
		}
	}
	if len(seen) != n {
		t.Fatalf("leased %d of %d ahead", len(seen), n)
	}
}

// TestLeaseAheadReadyWorkFirst: while jobs ready now wait for a slot,
// nothing is leased ahead (whether the step dispatched some of them or
// had no capacity at all); once they are all dispatched, the delayed jobs
// go ahead.
func TestLeaseAheadReadyWorkFirst(t *testing.T) {
	b := setup(t)
	b.workerHold(t0, "w1", 2, 10)
	due := t0.Add(100 * time.Millisecond)
	var es []schema.Enqueued
	for i := range 5 {
		es = append(es, enq(fmt.Sprintf("now%d", i), 1, "default", 5, t0))
	}
	for i := range 3 {
		es = append(es, enq(fmt.Sprintf("soon%d", i), 1, "default", 5, due))
	}
	b.enqueue(t0, es...)
	if res := b.dispatchAhead(t0, 512); len(res.Dispatched) != 2 || aheadOf(res) != 0 {
		t.Fatalf("dispatched %v (%d ahead), want 2 ready now and none ahead", ids(res.Dispatched), aheadOf(res))
	}
	if res := b.dispatchAhead(t0, 512); len(res.Dispatched) != 0 {
		t.Fatalf("no free slot, jobs ready now waiting: dispatched %v", ids(res.Dispatched))
	}
	b.workerHold(t0, "w2", 8, 0)
	res := b.dispatchAhead(t0, 512)
	if len(res.Dispatched) != 6 || aheadOf(res) != 3 {
		t.Fatalf("dispatched %v (%d ahead), want the 3 left ready now and the 3 delayed ahead", ids(res.Dispatched), aheadOf(res))
	}
}

// TestLeaseAheadLeavesPausedAndCappedUntilDue: a job in a queue its tenant
// paused, or of a tenant with max_running, is not leased ahead; a job of
// the same due time in another queue (or of another tenant) is.
func TestLeaseAheadLeavesPausedAndCappedUntilDue(t *testing.T) {
	b := setup(t)
	b.workerHold(t0, "w1", 10, 10)
	b.tenants(map[string]TenantSettings{"capped": {MaxRunning: 5}})
	if err := b.store.Pause(b.ctx, "t1", "held"); err != nil {
		t.Fatal(err)
	}
	due := t0.Add(100 * time.Millisecond)
	capped := enq("capped", 1, "default", 5, due)
	capped.TenantID = "capped"
	b.enqueue(t0, enq("paused", 1, "held", 5, due), capped, enq("free", 1, "default", 5, due))
	res := b.dispatchAhead(t0, 512)
	if got := ids(res.Dispatched); !slices.Equal(got, []string{"free"}) || !res.NextDue.Equal(due) {
		t.Fatalf("leased ahead %v (next due %v), want only free, and a wake at %v", got, res.NextDue, due)
	}
	if got := ids(b.dispatchAhead(due, 512).Dispatched); !slices.Equal(got, []string{"capped"}) {
		t.Fatalf("at their due time: %v, want capped (the paused queue still waits)", got)
	}
}

// TestLeasedAheadCountOnceDue: jobs leased ahead take no slot until their
// due time; from then on they count like every job in flight, so ready
// jobs behind them wait for a free slot.
func TestLeasedAheadCountOnceDue(t *testing.T) {
	b := setup(t)
	b.workerHold(t0, "w1", 2, 4)
	due := t0.Add(100 * time.Millisecond)
	b.enqueue(t0, enq("a1", 1, "default", 5, due), enq("a2", 1, "default", 5, due))
	if got := ids(b.dispatchAhead(t0, 512).Dispatched); !slices.Equal(got, []string{"a1", "a2"}) {
		t.Fatalf("leased ahead %v, want [a1 a2]", got)
	}
	b.enqueue(t0, enq("r1", 1, "default", 5, time.Time{}))
	if got := ids(b.dispatchAhead(t0.Add(time.Millisecond), 512).Dispatched); !slices.Equal(got, []string{"r1"}) {
		t.Fatalf("before a1 and a2 are due, dispatched %v, want [r1] (they hold no slot yet)", got)
	}
	later := due.Add(100 * time.Millisecond)
	b.enqueue(later, enq("r2", 1, "default", 5, time.Time{}))
	b.workerHold(later, "w1", 2, 4)
	if got := ids(b.dispatchAhead(later, 512).Dispatched); len(got) != 0 {
		t.Fatalf("with a1 and a2 due and in flight on 2 slots, dispatched %v", got)
	}
}

// TestFullHoldsWakeAtTheFirstHeldDue: with the workers' holds full, a job
// within the look-ahead waits, and the step asks to look again when the
// first job already leased ahead is due (its slot in the holds frees), not
// when the waiting one is.
func TestFullHoldsWakeAtTheFirstHeldDue(t *testing.T) {
	b := setup(t)
	b.workerHold(t0, "w1", 10, 1)
	first, second := t0.Add(100*time.Millisecond), t0.Add(150*time.Millisecond)
	b.enqueue(t0, enq("a1", 1, "default", 5, first), enq("a2", 1, "default", 5, second))
	res := b.dispatchAhead(t0, 512)
	if got := ids(res.Dispatched); !slices.Equal(got, []string{"a1"}) {
		t.Fatalf("leased ahead %v, want [a1] (one place in the holds)", got)
	}
	if !res.NextDue.Equal(first) {
		t.Fatalf("next due %v, want a1's due time %v (the holds are full until then)", res.NextDue, first)
	}
}
