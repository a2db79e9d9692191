package qstore

import (
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ferryhq/ferry/events/schema"
)

// enqK is a job of tenant t1, type typ, with concurrency key key (limit)
// when key is not empty.
func enqK(id, typ, key string, limit int) schema.Enqueued {
	e := enq(id, 1, "default", 5, time.Time{})
	e.Job.Type = typ
	if key != "" {
		e.Job.Concurrency = &schema.Concurrency{Key: key, Limit: limit}
	}
	return e
}

func (b *bundle) complete(now time.Time, ts ...Template) {
	b.t.Helper()
	b.apply(now, func(batch *Batch) {
		for _, t := range ts {
			batch.Complete(t.JobID, t.TenantID, t.DispatchID)
		}
	})
}

func (b *bundle) fail(now time.Time, class schema.ErrorClass, ts ...Template) ApplyResult {
	b.t.Helper()
	return b.apply(now, func(batch *Batch) {
		for _, t := range ts {
			batch.Fail(t.JobID, t.DispatchID, class)
		}
	})
}

func (b *bundle) flow(now time.Time, f FlowSettings) {
	b.t.Helper()
	if err := b.store.SetFlowControl(b.ctx, now, map[string]FlowSettings{"t1": f}); err != nil {
		b.t.Fatal(err)
	}
}

func byID(ts []Template, id string) Template {
	for _, t := range ts {
		if t.JobID == id {
			return t
		}
	}
	return Template{}
}

// TestConcurrencyKey: at most limit jobs of a key are dispatched at once;
// the others of the key wait in order while other keys and unkeyed jobs
// keep flowing (no head-of-line blocking); each completion admits the
// next one of the key.
func TestConcurrencyKey(t *testing.T) {
	b := setup(t)
	b.worker(t0, "w1", 100)
	b.enqueue(t0, enqK("a1", "x", "cust-a", 2), enqK("a2", "x", "cust-a", 2), enqK("a3", "x", "cust-a", 2),
		enqK("a4", "x", "cust-a", 2), enqK("b1", "x", "cust-b", 1), enqK("b2", "x", "cust-b", 1), enqK("n1", "x", "", 0))
	got := b.dispatch(t0, 0).Dispatched
	if want := []string{"a1", "a2", "b1", "n1"}; !slices.Equal(ids(got), want) {
		t.Fatalf("first step dispatched %v, want %v", ids(got), want)
	}
	st, err := b.store.Concurrency(b.ctx, "t1", "cust-a")
	if err != nil || st.Running != 2 || st.Waiting != 2 || st.Limit != 2 {
		t.Fatalf("cust-a state %+v %v, want 2 running, 2 waiting, limit 2", st, err)
	}
	if got := ids(b.dispatch(t0, 0).Dispatched); len(got) != 0 {
		t.Fatalf("dispatched %v while every key is at its limit", got)
	}
	// A later job of a key waits behind the parked ones.
	b.enqueue(t0, enqK("a5", "x", "cust-a", 2))
	b.complete(t0, byID(got0(got), "a2"))
	if got := ids(b.dispatch(t0, 0).Dispatched); !slices.Equal(got, []string{"a3"}) {
		t.Fatalf("after a2 completed: %v, want [a3]", got)
	}
	res := b.fail(t0, schema.ClassAppError, byID(got, "a1"))
	if len(res.Failed) != 1 {
		t.Fatalf("failed templates %v", res.Failed)
	}
	if got := ids(b.dispatch(t0, 0).Dispatched); !slices.Equal(got, []string{"a4"}) {
		t.Fatalf("after a1 failed: %v, want [a4]", got)
	}
	// Cancelling a parked job frees nothing and skips it.
	b.apply(t0, func(batch *Batch) { batch.Cancel("a5", "t1") })
	b.complete(t0, byID(got, "b1"))
	if got := ids(b.dispatch(t0, 0).Dispatched); !slices.Equal(got, []string{"b2"}) {
		t.Fatalf("after b1 completed: %v, want [b2]", got)
	}
	st, _ = b.store.Concurrency(b.ctx, "t1", "cust-a")
	if st.Running != 2 || st.Waiting != 0 {
		t.Fatalf("cust-a state %+v, want 2 running (a3, a4), none waiting", st)
	}
	if g, _ := b.store.Gates(b.ctx); g.Concurrency != 0 {
		t.Fatalf("gate stats %+v, want no parked job", g)
	}
}

func got0(ts []Template) []Template { return ts }

// TestConcurrencyReadWhileJobsEnd: a key read while its only job ends
// shows that job under its limit or shows nothing running, never a job
// running under no limit (the read used to find a holder in one round trip
// and its limit in the next, after the job's hash became a terminal marker).
func TestConcurrencyReadWhileJobsEnd(t *testing.T) {
	b := setup(t)
	b.worker(t0, "w1", 100)
	var bad atomic.Value
	for round := range 300 {
		id := fmt.Sprintf("r%d", round)
		b.enqueue(t0, enqK(id, "x", "cust-r", 3))
		got := b.dispatch(t0, 0).Dispatched
		if len(got) != 1 {
			t.Fatalf("round %d dispatched %v", round, ids(got))
		}
		done := make(chan struct{})
		read := make(chan struct{})
		go func() {
			defer close(read)
			for first := true; ; first = false {
				st, err := b.store.Concurrency(b.ctx, "t1", "cust-r")
				if err == nil && st.Running > 0 && st.Limit != 3 {
					bad.Store(fmt.Sprintf("round %d: %+v", round, st))
				}
				select {
				case <-done:
					if !first {
						return
					}
				default:
				}
			}
		}()
		b.complete(t0, got[0])
		close(done)
		<-read
		if v := bad.Load(); v != nil {
			t.Fatalf("read while the job ended: %v, want its limit 3 while it runs", v)
		}
	}
}

// TestConcurrencyLostLeaseKeepsSlot: a job whose lease expired is ready
// again at the front, still holding its slot: it goes before the parked
// jobs of its key, and the key never exceeds its limit.
func TestConcurrencyLostLeaseKeepsSlot(t *testing.T) {
	b := setup(t)
	b.worker(t0, "w1", 100)
	b.enqueue(t0, enqK("a1", "x", "k", 1), enqK("a2", "x", "k", 1))
	if got := ids(b.dispatch(t0, 0).Dispatched); !slices.Equal(got, []string{"a1"}) {
		t.Fatalf("dispatched %v, want [a1]", got)
	}
	later := t0.Add(11 * time.Second)
	b.worker(later, "w1", 100)
	if got := ids(b.dispatch(later, 0).Dispatched); !slices.Equal(got, []string{"a1"}) {
		t.Fatalf("after the lease expired: %v, want [a1] again", got)
	}
}

// TestRateLimit: a type capped at 5 starts/s with burst 5 starts 5 jobs at
// once, then one per 200 ms as the bucket refills; the wake time the step
// reports is the refill; other types are not held up.
func TestRateLimit(t *testing.T) {
	b := setup(t)
	b.worker(t0, "w1", 1000)
	b.flow(t0, FlowSettings{RateLimits: map[string]RateLimit{"api.call": {PerSecond: 5, Burst: 5}}})
	var es []schema.Enqueued
	for i := range 20 {
		es = append(es, enqK("r"+string(rune('a'+i)), "api.call", "", 0))
	}
	es = append(es, enqK("other", "noop", "", 0))
	b.enqueue(t0, es...)
	res := b.dispatch(t0, 0)
	if got := ids(res.Dispatched); !slices.Equal(got, []string{"ra", "rb", "rc", "rd", "re", "other"}) {
		t.Fatalf("burst: %v", got)
	}
	if want := t0.Add(200 * time.Millisecond); !res.NextDue.Equal(want) {
		t.Fatalf("next due %v, want the refill at %v", res.NextDue, want)
	}
	if got := ids(b.dispatch(t0.Add(199*time.Millisecond), 0).Dispatched); len(got) != 0 {
		t.Fatalf("dispatched %v before the refill", got)
	}
	if got := ids(b.dispatch(t0.Add(200*time.Millisecond), 0).Dispatched); !slices.Equal(got, []string{"rf"}) {
		t.Fatalf("at the refill: %v, want [rf]", got)
	}
	// A second later five more, in order.
	if got := ids(b.dispatch(t0.Add(1200*time.Millisecond), 0).Dispatched); !slices.Equal(got, []string{"rg", "rh", "ri", "rj", "rk"}) {
		t.Fatalf("a second later: %v", got)
	}
	// Removing the limit releases the rest.
	b.flow(t0.Add(1300*time.Millisecond), FlowSettings{})
	if got := b.dispatch(t0.Add(1300*time.Millisecond), 0).Dispatched; len(got) != 9 {
		t.Fatalf("after the limit was removed: %v, want the 9 left", ids(got))
	}
}

// TestBreaker: failures of counted classes within the window open the
// type's breaker; its jobs wait (parked, no attempt used) while other types
// flow; after the cool-down one probe goes; its failure re-opens, its
// success closes and releases every waiting job in order.
func TestBreaker(t *testing.T) {
	b := setup(t)
	b.worker(t0, "w1", 1000)
	b.flow(t0, FlowSettings{Breakers: map[string]BreakerConfig{"*": {Failures: 3, Window: 10 * time.Second, Cooldown: 5 * time.Second}}})
	b.enqueue(t0, enqK("f1", "dep", "", 0), enqK("f2", "dep", "", 0), enqK("f3", "dep", "", 0))
	first := b.dispatch(t0, 0).Dispatched
	// A permanent failure does not count; three app errors do.
	b.fail(t0, schema.ClassPermanent, first[0])
	b.fail(t0, schema.ClassAppError, first[1])
	b.enqueue(t0, enqK("f4", "dep", "", 0))
	d := b.dispatch(t0, 0).Dispatched
	b.fail(t0, schema.ClassTimeout, first[2])
	b.fail(t0, schema.ClassRetryable, d[0])
	bs, err := b.store.Breakers(b.ctx, "t1", t0)
	if err != nil || len(bs) != 1 || bs[0].Type != "dep" || bs[0].State != schema.BreakerOpen || !bs[0].Until.Equal(t0.Add(5*time.Second)) {
		t.Fatalf("breakers %+v %v, want dep open until the cool-down", bs, err)
	}
	b.enqueue(t0, enqK("w1", "dep", "", 0), enqK("w2", "dep", "", 0), enqK("w3", "dep", "", 0), enqK("ok", "noop", "", 0))
	res := b.dispatch(t0, 0)
	if got := ids(res.Dispatched); !slices.Equal(got, []string{"ok"}) {
		t.Fatalf("while open: %v, want only the other type", got)
	}
	if want := t0.Add(5 * time.Second); !res.NextDue.Equal(want) {
		t.Fatalf("next due %v, want the end of the cool-down %v", res.NextDue, want)
	}
	b.complete(t0, res.Dispatched...)
	// Half-open: one probe; it fails: open again.
	t1 := t0.Add(5 * time.Second)
	b.worker(t1, "w1", 1000)
	probe := b.dispatch(t1, 0).Dispatched
	if got := ids(probe); !slices.Equal(got, []string{"w1"}) {
		t.Fatalf("half-open: %v, want the probe w1", got)
	}
	if got := ids(b.dispatch(t1, 0).Dispatched); len(got) != 0 {
		t.Fatalf("second job %v while the probe runs", got)
	}
	b.fail(t1, schema.ClassAppError, probe[0])
	if bs, _ := b.store.Breakers(b.ctx, "t1", t1); bs[0].State != schema.BreakerOpen {
		t.Fatalf("after the probe failed: %+v", bs)
	}
	// Next cool-down: the probe succeeds; every waiting job goes, in order.
	t2 := t1.Add(5 * time.Second)
	b.worker(t2, "w1", 1000)
	probe = b.dispatch(t2, 0).Dispatched
	if got := ids(probe); !slices.Equal(got, []string{"w2"}) {
		t.Fatalf("second half-open: %v, want w2", got)
	}
	b.complete(t2, probe[0])
	if got := ids(b.dispatch(t2, 0).Dispatched); !slices.Equal(got, []string{"w3"}) {
		t.Fatalf("after the breaker closed: %v, want [w3]", got)
	}
	evs, err := b.store.ClaimBreakerEvents(b.ctx, t2, time.Minute, 100)
	if err != nil {
		t.Fatal(err)
	}
	var path []string
	for _, e := range evs {
		path = append(path, e.From+">"+e.To+":"+e.Reason)
	}
	want := []string{"closed>open:failures", "open>half_open:cooldown_elapsed", "half_open>open:probe_failed",
		"open>half_open:cooldown_elapsed", "half_open>closed:probe_succeeded"}
	if !slices.Equal(path, want) {
		t.Fatalf("transitions %v, want %v", path, want)
	}
	if evs[0].Failures != 3 || evs[0].TenantID != "t1" || evs[0].JobType != "dep" || !evs[0].At.Equal(t0) {
		t.Fatalf("first transition %+v", evs[0])
	}
	if again, _ := b.store.ClaimBreakerEvents(b.ctx, t2, time.Minute, 100); len(again) != 0 {
		t.Fatalf("claimed twice: %v", again)
	}
	if err := b.store.AckBreakerEvents(b.ctx, evs); err != nil {
		t.Fatal(err)
	}
	if left, _ := b.store.ClaimBreakerEvents(b.ctx, t2.Add(2*time.Minute), time.Minute, 100); len(left) != 0 {
		t.Fatalf("acknowledged transitions claimed again: %v", left)
	}
}

// TestBreakerReset: an operator's reset closes an open breaker at once and
// its waiting jobs go.
func TestBreakerReset(t *testing.T) {
	b := setup(t)
	b.worker(t0, "w1", 1000)
	b.flow(t0, FlowSettings{Breakers: map[string]BreakerConfig{"dep": {Failures: 1, Window: time.Minute, Cooldown: time.Hour}}})
	b.enqueue(t0, enqK("f1", "dep", "", 0))
	b.fail(t0, schema.ClassAppError, b.dispatch(t0, 0).Dispatched...)
	b.enqueue(t0, enqK("w1", "dep", "", 0), enqK("w2", "dep", "", 0))
	if got := b.dispatch(t0, 0).Dispatched; len(got) != 0 {
		t.Fatalf("dispatched %v while open", ids(got))
	}
	bs, _ := b.store.Breakers(b.ctx, "t1", t0)
	if len(bs) != 1 || bs[0].Waiting != 2 {
		t.Fatalf("breakers %+v, want 2 waiting", bs)
	}
	from, err := b.store.ResetBreaker(b.ctx, t0, "t1", "dep", "key_ops")
	if err != nil || from != schema.BreakerOpen {
		t.Fatalf("reset: %q %v", from, err)
	}
	if got := ids(b.dispatch(t0, 0).Dispatched); !slices.Equal(got, []string{"w1", "w2"}) {
		t.Fatalf("after reset: %v", got)
	}
	evs, _ := b.store.ClaimBreakerEvents(b.ctx, t0, time.Minute, 100)
	if n := len(evs); n != 2 || evs[1].Reason != schema.BreakerReasonReset || evs[1].Actor != "key_ops" {
		t.Fatalf("transitions %+v", evs)
	}
}

// counted runs script src (a Lua body ending in a return) with args
// through a copy whose redis.call counts its calls, and returns its reply
// and the Redis commands it ran.
func (b *bundle) counted(src string, args []any) ([]any, int64) {
	b.t.Helper()
	wrapped := "local __R = redis\nlocal __n = 0\n" +
		"local redis = setmetatable({call = function(...) __n = __n + 1 return __R.call(...) end}, {__index = __R})\n" +
		"local function __body()\n" + src + "\nend\nlocal res = __body()\nreturn {__n, res}\n"
	v, err := redis.NewScript(wrapped).Run(b.ctx, b.rdb, nil, args...).Slice()
	if err != nil {
		b.t.Fatal(err)
	}
	res, _ := v[1].([]any)
	return res, v[0].(int64)
}

// countedDispatch runs one dispatch step through counted and returns the
// jobs it dispatched and the Redis commands it ran.
func (b *bundle) countedDispatch(now time.Time) (int64, int64) {
	b.t.Helper()
	b.n++
	args := b.store.dispatchArgs(DispatchParams{Pool: schema.PoolShort, Now: now, Prefetch: 0, MaxBatch: 512,
		DispatchIDPrefix: fmt.Sprintf("c%d", b.n)}, true)
	res, calls := b.counted(dispatchScript.evalSource(), args)
	return res[2].(int64), calls
}

// TestGatesCost measures the Redis commands one dispatch step runs per job:
// jobs without flow-control fields of a tenant without settings cost what
// they cost before the gates (the gates add no command on their path: the
// count below is the same as with the gates' lines removed), and the cost
// of each gate is logged for docs/flow-control.md.
func TestGatesCost(t *testing.T) {
	b := setup(t)
	b.worker(t0, "w1", 1000)
	step := func(es []schema.Enqueued) float64 {
		b.enqueue(t0, es...)
		n, calls := b.countedDispatch(t0)
		if n != int64(len(es)) {
			t.Fatalf("dispatched %d of %d", n, len(es))
		}
		return float64(calls) / float64(n)
	}
	jobs := func(prefix, typ string, keyed bool) []schema.Enqueued {
		var out []schema.Enqueued
		for i := range 100 {
			id := fmt.Sprintf("%s%03d", prefix, i)
			key := ""
			if keyed {
				key = id
			}
			out = append(out, enqK(id, typ, key, 1))
		}
		return out
	}
	plain := step(jobs("p", "x", false))
	keyed := step(jobs("k", "x", true))
	b.flow(t0, FlowSettings{RateLimits: map[string]RateLimit{"limited": {PerSecond: 1e6, Burst: 1000}}})
	plainBeside := step(jobs("q", "x", false))
	rated := step(jobs("r", "limited", false))
	t.Logf("Redis commands per dispatched job in a step of 100: %.2f plain, %.2f plain beside a rate-limited type, "+
		"%.2f with a concurrency key, %.2f of a rate-limited type", plain, plainBeside, keyed, rated)
	if plainBeside-plain > 0.02 {
		t.Errorf("a rate limit on another type costs plain jobs %.2f commands more per job", plainBeside-plain)
	}
	if keyed <= plain || rated <= plain {
		t.Errorf("gated jobs cost no more than plain ones (%.2f, %.2f vs %.2f): the count is broken", keyed, rated, plain)
	}
}
