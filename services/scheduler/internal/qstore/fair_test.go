package qstore

import (
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/ferryhq/ferry/events/schema"
)

func enqT(id, tenant, queue string, prio int) schema.Enqueued {
	e := enq(id, 1, queue, prio, time.Time{})
	e.TenantID = tenant
	return e
}

// flood enqueues n jobs "<tenant>-<i>" of tenant in queue default.
func (b *bundle) flood(now time.Time, tenant string, n int) {
	b.t.Helper()
	es := make([]schema.Enqueued, n)
	for i := range es {
		es[i] = enqT(fmt.Sprintf("%s-%03d", tenant, i), tenant, "default", 5)
	}
	b.enqueue(now, es...)
}

func tenantsOf(ts []Template) []string {
	var out []string
	for _, t := range ts {
		out = append(out, t.TenantID)
	}
	return out
}

func count(ts []Template, tenant string) int {
	n := 0
	for _, t := range ts {
		if t.TenantID == tenant {
			n++
		}
	}
	return n
}

// finish reports every dispatched job completed after run each.
func (b *bundle) finish(now time.Time, ts []Template, run func(Template) time.Duration) {
	b.t.Helper()
	b.apply(now, func(batch *Batch) {
		for _, t := range ts {
			batch.Usage(t.JobID, t.DispatchID, now.Add(-run(t)), now)
			batch.Complete(t.JobID, t.TenantID, t.DispatchID)
		}
	})
}

func (b *bundle) tenants(ts map[string]TenantSettings) {
	b.t.Helper()
	if err := b.store.SetTenants(b.ctx, ts); err != nil {
		b.t.Fatal(err)
	}
}

// TestFairEqualWeights: a tenant that arrives behind a flood gets every
// other slot, not the slots after the flood.
func TestFairEqualWeights(t *testing.T) {
	b := setup(t)
	b.worker(t0, "w1", 10)
	b.flood(t0, "a", 100)
	b.flood(t0, "b", 10)
	got := b.dispatch(t0, 0).Dispatched
	if na, nb := count(got, "a"), count(got, "b"); na != 5 || nb != 5 {
		t.Fatalf("dispatched a=%d b=%d, want 5/5: %v", na, nb, tenantsOf(got))
	}
}

// TestFairWeights: weights 3:1 share slots 3:1.
func TestFairWeights(t *testing.T) {
	b := setup(t)
	b.tenants(map[string]TenantSettings{"a": {Weight: 3}, "b": {Weight: 1}})
	b.worker(t0, "w1", 40)
	b.flood(t0, "a", 100)
	b.flood(t0, "b", 100)
	got := b.dispatch(t0, 0).Dispatched
	if na, nb := count(got, "a"), count(got, "b"); na != 30 || nb != 10 {
		t.Fatalf("dispatched a=%d b=%d, want 30/10", na, nb)
	}
}

// TestFairSlotTime: a tenant whose jobs run 10× longer gets a tenth of the
// dispatches once the estimates have learned the run times, so the same
// slot-time.
func TestFairSlotTime(t *testing.T) {
	b := setup(t)
	b.worker(t0, "w1", 20)
	b.flood(t0, "long", 400)
	b.flood(t0, "short", 400)
	run := func(t Template) time.Duration {
		if t.TenantID == "long" {
			return 500 * time.Millisecond
		}
		return 50 * time.Millisecond
	}
	now := t0
	var slot = map[string]time.Duration{}
	for round := range 20 {
		now = now.Add(time.Second)
		b.worker(now, "w1", 20)
		got := b.dispatch(now, 0).Dispatched
		if round >= 5 { // estimates have converged
			for _, d := range got {
				slot[d.TenantID] += run(d)
			}
		}
		b.finish(now, got, run)
	}
	share := slot["long"].Seconds() / (slot["long"] + slot["short"]).Seconds()
	t.Logf("slot-time: long %v, short %v (long's share %.2f)", slot["long"], slot["short"], share)
	if slot["long"] == 0 || slot["short"] == 0 || math.Abs(share-0.5) > 0.1 {
		t.Fatalf("long's slot-time share %.2f, want 0.5 ± 0.1", share)
	}
	est, err := b.store.Estimate(b.ctx, "long", "noop")
	if err != nil {
		t.Fatal(err)
	}
	if est < 450*time.Millisecond || est > 550*time.Millisecond {
		t.Fatalf("long's estimate %v, want ≈ 500ms", est)
	}
}

// TestFairReconcile: the charge at dispatch (the default estimate) is
// corrected to the measured run time at completion.
func TestFairReconcile(t *testing.T) {
	b := setup(t)
	b.worker(t0, "w1", 1)
	b.flood(t0, "a", 2)
	got := b.dispatch(t0, 0).Dispatched
	st, _ := b.store.Fair(b.ctx, schema.PoolShort, "a")
	if st.VirtualTime != 1000 || st.Running != 1 {
		t.Fatalf("after dispatch: %+v, want vt 1000 (default estimate), 1 running", st)
	}
	b.finish(t0, got, func(Template) time.Duration { return 40 * time.Millisecond })
	b.finish(t0, got, func(Template) time.Duration { return 40 * time.Millisecond }) // a replay changes nothing
	st, _ = b.store.Fair(b.ctx, schema.PoolShort, "a")
	if st.VirtualTime != 40 || st.Running != 0 {
		t.Fatalf("after completion: %+v, want vt 40, 0 running", st)
	}
	b.dispatch(t0, 0)
	st, _ = b.store.Fair(b.ctx, schema.PoolShort, "a")
	if st.VirtualTime != 80 {
		t.Fatalf("second dispatch charged %v, want the learned 40ms", st.VirtualTime-40)
	}
}

// TestFairNewTenantChargedTheTypeEstimate: a tenant's first job of a type
// other tenants run is charged that type's estimate across tenants, not the
// 1 s default; once its own job reported, its own estimate is charged.
func TestFairNewTenantChargedTheTypeEstimate(t *testing.T) {
	b := setup(t)
	b.worker(t0, "w1", 1)
	b.flood(t0, "a", 1)
	b.finish(t0, b.dispatch(t0, 0).Dispatched, func(Template) time.Duration { return 40 * time.Millisecond })

	b.flood(t0, "b", 3)
	charge := func(when string) float64 {
		t.Helper()
		before, _ := b.store.Fair(b.ctx, schema.PoolShort, "b")
		got := b.dispatch(t0, 0).Dispatched
		after, _ := b.store.Fair(b.ctx, schema.PoolShort, "b")
		if len(got) != 1 || got[0].TenantID != "b" {
			t.Fatalf("%s: dispatched %v, want one job of b", when, tenantsOf(got))
		}
		b.finish(t0, got, func(Template) time.Duration { return 100 * time.Millisecond })
		return after.VirtualTime - before.VirtualTime
	}
	if c := charge("b's first job"); c != 40 {
		t.Errorf("b's first job charged %v ms, want 40 (the type's estimate from a's run)", c)
	}
	if c := charge("b's second job"); c != 100 {
		t.Errorf("b's second job charged %v ms, want 100 (b's own measured run)", c)
	}
	if est, _ := b.rdb.HGet(b.ctx, b.store.Prefix()+"est", "*|noop").Result(); est != "61.600" {
		t.Errorf("the type's estimate %q after runs of 40, 100 and 100 ms, want 61.600 (EWMA, α 0.2)", est)
	}
}

// TestFairMaxRunning: a tenant at its max_running waits; others do not.
func TestFairMaxRunning(t *testing.T) {
	b := setup(t)
	b.tenants(map[string]TenantSettings{"a": {MaxRunning: 2}})
	b.worker(t0, "w1", 10)
	b.flood(t0, "a", 20)
	b.flood(t0, "b", 3)
	got := b.dispatch(t0, 0).Dispatched
	if na, nb := count(got, "a"), count(got, "b"); na != 2 || nb != 3 {
		t.Fatalf("dispatched a=%d b=%d, want 2/3", na, nb)
	}
	if got := b.dispatch(t0, 0).Dispatched; len(got) != 0 {
		t.Fatalf("dispatched %v past max_running", ids(got))
	}
	var first []Template
	for _, d := range got {
		if d.TenantID == "a" {
			first = append(first, d)
			break
		}
	}
	b.finish(t0, first, func(Template) time.Duration { return time.Millisecond })
	if got := b.dispatch(t0, 0).Dispatched; count(got, "a") != 1 {
		t.Fatalf("after one completion dispatched %v, want one of a", ids(got))
	}
}

// TestFairCatchUp: a tenant idle while another ran does not bank credit:
// it comes back at the virtual now, not at its old virtual time.
func TestFairCatchUp(t *testing.T) {
	b := setup(t)
	b.worker(t0, "w1", 20)
	b.flood(t0, "b", 1)
	got := b.dispatch(t0, 0).Dispatched // b runs once, then is idle
	b.finish(t0, got, func(Template) time.Duration { return time.Second })
	b.flood(t0, "a", 100)
	for range 3 {
		got := b.dispatch(t0, 0).Dispatched
		if count(got, "a") != 20 {
			t.Fatalf("a alone got %d of 20", count(got, "a"))
		}
		b.finish(t0, got, func(Template) time.Duration { return time.Second })
	}
	b.enqueue(t0, enqT("b-late-0", "b", "default", 5), enqT("b-late-1", "b", "default", 5),
		enqT("b-late-2", "b", "default", 5), enqT("b-late-3", "b", "default", 5), enqT("b-late-4", "b", "default", 5),
		enqT("b-late-5", "b", "default", 5), enqT("b-late-6", "b", "default", 5), enqT("b-late-7", "b", "default", 5),
		enqT("b-late-8", "b", "default", 5), enqT("b-late-9", "b", "default", 5), enqT("b-late-x", "b", "default", 5))
	got = b.dispatch(t0, 0).Dispatched
	// Without the catch-up b would hold 59 s of credit and take all 20.
	if nb := count(got, "b"); nb < 9 || nb > 11 {
		t.Fatalf("b got %d of 20 slots on return, want about half: %v", nb, tenantsOf(got))
	}
}

// TestFairNewTenantStartsLevelWithTheRunningOne: a tenant that arrives
// while another's jobs ran longer than they were charged starts level with
// that tenant's settled virtual time, not at the virtual now of the last
// pick: the overrun is the running tenant's use, not credit for a tenant
// that was idle meanwhile (TestFairCatchUp). The overrun may be settled in
// an earlier call or in the arriving tenant's own (a consumer catching up
// on a backlog applies both in one).
func TestFairNewTenantStartsLevelWithTheRunningOne(t *testing.T) {
	for _, sameCall := range []bool{false, true} {
		t.Run(fmt.Sprintf("settled in the same call %v", sameCall), func(t *testing.T) {
			b := setup(t)
			b.worker(t0, "w1", 10)
			b.flood(t0, "warm", 1) // teaches the type's estimate: 40 ms
			b.finish(t0, b.dispatch(t0, 0).Dispatched, func(Template) time.Duration { return 40 * time.Millisecond })
			b.flood(t0, "a", 100)
			got := b.dispatch(t0, 0).Dispatched // ten of a, charged 40 ms each
			if count(got, "a") != 10 {
				t.Fatalf("a alone got %d of 10", count(got, "a"))
			}
			overrun := func(batch *Batch) { // each ran 140 ms: a's virtual time +1 s after its last pick
				for _, d := range got {
					batch.Usage(d.JobID, d.DispatchID, t0.Add(-140*time.Millisecond), t0)
					batch.Complete(d.JobID, d.TenantID, d.DispatchID)
				}
			}
			arrive := func(batch *Batch) {
				for i := range 20 {
					if err := batch.Enqueue(enqT(fmt.Sprintf("b-%02d", i), "b", "default", 5), t0); err != nil {
						t.Fatal(err)
					}
				}
			}
			if sameCall {
				b.apply(t0, func(batch *Batch) { overrun(batch); arrive(batch) })
			} else {
				b.apply(t0, overrun)
				b.apply(t0, arrive)
			}
			a, _ := b.store.Fair(b.ctx, schema.PoolShort, "a")
			bt, _ := b.store.Fair(b.ctx, schema.PoolShort, "b")
			if bt.VirtualTime < a.VirtualTime {
				t.Errorf("b arrived at virtual time %v, behind a's settled %v", bt.VirtualTime, a.VirtualTime)
			}
			got = b.dispatch(t0, 0).Dispatched
			if nb := count(got, "b"); nb < 4 || nb > 6 {
				t.Fatalf("b got %d of 10 slots on arrival, want about half: %v", nb, tenantsOf(got))
			}
		})
	}
}

// TestFairPriorityWithinTenant: priority orders a tenant's jobs; fairness
// orders tenants, so another tenant's urgent job does not jump a tenant
// whose turn it is.
func TestFairPriorityWithinTenant(t *testing.T) {
	b := setup(t)
	b.worker(t0, "w1", 100)
	b.enqueue(t0, enqT("a-p5", "a", "default", 5), enqT("a-p1", "a", "other", 1), enqT("a-p5b", "a", "default", 5))
	b.enqueue(t0, enqT("b-p0", "b", "default", 0), enqT("b-p9", "b", "default", 9))
	got := ids(b.dispatch(t0, 0).Dispatched)
	want := []string{"a-p1", "b-p0", "a-p5", "b-p9", "a-p5b"}
	if !slices.Equal(got, want) {
		t.Fatalf("order %v, want %v", got, want)
	}
}

// TestPauseResume: a paused queue of a tenant dispatches nothing, the same
// queue of another tenant and the tenant's other queues still do; resumed,
// it dispatches again.
func TestPauseResume(t *testing.T) {
	b := setup(t)
	b.worker(t0, "w1", 100)
	if err := b.store.Pause(b.ctx, "a", "default"); err != nil {
		t.Fatal(err)
	}
	b.enqueue(t0, enqT("a-1", "a", "default", 5), enqT("a-2", "a", "other", 5), enqT("b-1", "b", "default", 5))
	got := ids(b.dispatch(t0, 0).Dispatched)
	slices.Sort(got)
	if !slices.Equal(got, []string{"a-2", "b-1"}) {
		t.Fatalf("dispatched %v while a/default paused", got)
	}
	if got := b.dispatch(t0, 0).Dispatched; len(got) != 0 {
		t.Fatalf("dispatched %v while paused", ids(got))
	}
	qs, err := b.store.Queues(b.ctx, "a", []string{schema.PoolShort, schema.PoolLong})
	if err != nil {
		t.Fatal(err)
	}
	if len(qs) != 2 || qs[0].Name != "default" || !qs[0].Paused || qs[0].Ready != 1 || qs[0].OldestReady.IsZero() ||
		qs[1].Name != "other" || qs[1].Paused || qs[1].Running != 1 {
		t.Fatalf("queues of a: %+v", qs)
	}
	if err := b.store.Resume(b.ctx, "a", "default", []string{schema.PoolShort, schema.PoolLong}); err != nil {
		t.Fatal(err)
	}
	if got := ids(b.dispatch(t0, 0).Dispatched); !slices.Equal(got, []string{"a-1"}) {
		t.Fatalf("after resume dispatched %v", got)
	}
}

// TestSetPausedDoesNotUndoAResume: the settings sync reads the generation,
// then its snapshot of pauses; a resume between that snapshot and its copy
// into Redis makes the copy a no-op, where it used to pause the queue again
// for good (TestFairShare's resume answered paused:true once in CI). A copy
// with a current generation still restores lost pauses.
func TestSetPausedDoesNotUndoAResume(t *testing.T) {
	b := setup(t)
	pools := []string{schema.PoolShort, schema.PoolLong}
	if err := b.store.Pause(b.ctx, "a", "default"); err != nil {
		t.Fatal(err)
	}
	gen, err := b.store.PauseGeneration(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	snapshot := map[string][]string{"a": {"default"}} // read before the resume
	if err := b.store.Resume(b.ctx, "a", "default", pools); err != nil {
		t.Fatal(err)
	}
	if applied, err := b.store.SetPaused(b.ctx, gen, snapshot); err != nil || applied {
		t.Fatalf("stale copy: applied %v, err %v", applied, err)
	}
	b.worker(t0, "w1", 100)
	b.enqueue(t0, enqT("a-1", "a", "default", 5))
	if got := ids(b.dispatch(t0, 0).Dispatched); !slices.Equal(got, []string{"a-1"}) {
		t.Fatalf("after resume and a stale copy dispatched %v", got)
	}

	// A current copy applies: a Redis that lost its pauses gets them back.
	gen, err = b.store.PauseGeneration(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if applied, err := b.store.SetPaused(b.ctx, gen, map[string][]string{"a": {"default"}}); err != nil || !applied {
		t.Fatalf("current copy: applied %v, err %v", applied, err)
	}
	qs, err := b.store.Queues(b.ctx, "a", pools)
	if err != nil || len(qs) != 1 || !qs[0].Paused {
		t.Fatalf("queues of a after a current copy: %+v, %v", qs, err)
	}
}
