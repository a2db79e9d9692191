package qstore

import (
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ferryhq/ferry/events/schema"
)

// TestEnqueueOpRoundTrip: every field of an enqueue op lands in the job
// hash field the rest of the scripts read it from.
func TestEnqueueOpRoundTrip(t *testing.T) {
	b := setup(t)
	na := t0.Add(time.Hour)
	e := enq("j1", 2, "mail", 7, time.Time{})
	e.Job.NotAfter = &na
	e.Job.Concurrency = &schema.Concurrency{Key: "k", Limit: 3}
	e.History = []schema.Attempt{{Attempt: 1, Class: schema.ClassAppError, Error: "boom"}}
	e.RedrivenFrom = "job_dead"
	b.apply(t0, func(batch *Batch) {
		if err := batch.Enqueue(e, t0); err != nil {
			t.Fatal(err)
		}
		batch.Trace(e.JobRef, "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
		if batch.Len() != 1 {
			t.Fatalf("the trace of the enqueue before it is not carried by the enqueue: %d ops", batch.Len())
		}
	})
	got, err := b.rdb.HGetAll(b.ctx, b.store.Prefix()+"job:j1").Result()
	if err != nil {
		t.Fatal(err)
	}
	spec, _ := json.Marshal(e.Job)
	hist, _ := json.Marshal(e.History)
	want := map[string]string{
		"tenant": "t1", "attempt": "2", "queue": "mail", "pool": "short", "prio": "7",
		"na": strconv.FormatInt(na.UnixMilli(), 10), "created": t0.Format(time.RFC3339Nano), "ready": t0.Format(time.RFC3339Nano),
		"spec": string(spec), "history": string(hist), "rf": "job_dead", "did": "", "type": "noop", "ck": "k", "cl": "3",
		"tp": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "state": "ready",
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("field %s = %q, want %q", k, got[k], v)
		}
	}
	if _, err := strconv.ParseInt(got["seq"], 10, 64); err != nil {
		t.Errorf("seq %q", got["seq"])
	}
	// The dispatched template decodes what was enqueued.
	b.worker(t0, "w1", 10)
	res := b.dispatch(t0, 0)
	if len(res.Dispatched) != 1 {
		t.Fatalf("dispatched %v", ids(res.Dispatched))
	}
	d := res.Dispatched[0]
	if d.JobID != "j1" || d.TenantID != "t1" || d.Attempt != 2 || d.Job.Queue != "mail" || d.Job.Priority != 7 ||
		!d.CreatedAt.Equal(t0) || !d.ReadyAt.Equal(t0) || d.TraceParent != want["tp"] || d.DispatchID == "" ||
		!d.LeaseUntil.Equal(t0.Add(10*time.Second)) || d.Partition != -1 {
		t.Errorf("dispatched template %+v", d)
	}
}

// TestEveryOpAcceptedByScript: each op's encoder sends the argument count
// apply.lua expects (the script refuses a call whose count differs), and a
// drifted count is refused, not read shifted.
func TestEveryOpAcceptedByScript(t *testing.T) {
	b := setup(t)
	fills := map[string]func(*Batch){
		"E":      func(x *Batch) { _ = x.Enqueue(enq("e1", 1, "default", 5, time.Time{}), t0) },
		"S":      func(x *Batch) { x.Extend("e1", "d") },
		"S hold": func(x *Batch) { x.Hold("e1", "d", time.Minute) },
		"U":      func(x *Batch) { x.Usage("e1", "d", t0, t0.Add(time.Second)) },
		"C":      func(x *Batch) { x.Complete("c1", "t1", "d") },
		"F":      func(x *Batch) { x.Fail("f1", "d", schema.ClassAppError) },
		"X":      func(x *Batch) { x.Cancel("x1", "t1") },
		"W": func(x *Batch) {
			x.Worker(schema.WorkerStatus{WorkerID: "w", Pool: schema.PoolShort, Slots: 2,
				Routing: &schema.WorkerRouting{Types: []string{"noop"}, Partitions: []int32{0}}}, t0.Add(time.Minute))
		},
		"H": func(x *Batch) { x.HandBack("h1", 1) },
		"R": func(x *Batch) { x.Release("r1", "d") },
		"D": func(x *Batch) { x.Dead("dd1", "t1") },
		"B": func(x *Batch) { x.Refail("b1", "d") },
		"A": func(x *Batch) { x.AckExpired(schema.PoolShort, "a1") },
		"T": func(x *Batch) { x.Trace(schema.JobRef{JobID: "e1", Attempt: 1}, "00-tp") },
	}
	for name, fill := range fills {
		var batch Batch
		fill(&batch)
		if batch.Len() != 1 {
			t.Fatalf("%s: %d ops", name, batch.Len())
		}
		if _, err := b.store.Apply(b.ctx, t0, &batch); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	args := append(b.store.applyHead(t0, true), "C", 3, "j", "t1", "d")
	err := applyScript.call(b.ctx, b.rdb, args...).Err()
	if err == nil || !strings.Contains(err.Error(), "takes 5 arguments") {
		t.Fatalf("a C op with 3 arguments: %v", err)
	}
}

// TestEndedDispatchDropsItsRenewal: a started (lease renewal) followed in
// the same batch by the completion of that dispatch is not sent, and the
// completion carries the run's usage; a renewal of another dispatch and a
// hold stay.
func TestEndedDispatchDropsItsRenewal(t *testing.T) {
	var batch Batch
	batch.Extend("j1", "d1")
	batch.Extend("j2", "other")
	batch.Hold("j1", "d1", time.Minute)
	batch.Usage("j1", "d1", t0, t0.Add(time.Second))
	batch.Complete("j1", "t1", "d1")
	batch.Extend("j3", "d3")
	batch.Fail("j3", "d3", schema.ClassAppError)
	var codes []string
	var c completeOp
	for _, o := range batch.ops {
		if o != nil {
			codes = append(codes, o.code())
		}
		if x, ok := o.(completeOp); ok {
			c = x
		}
	}
	if got := strings.Join(codes, ""); got != "SSCF" || batch.Len() != 4 {
		t.Fatalf("ops %s (len %d), want SSCF", got, batch.Len())
	}
	if c.StartedMs != t0.UnixMilli() || c.FinishedMs != t0.Add(time.Second).UnixMilli() {
		t.Fatalf("complete %+v", c)
	}
	chunks := batch.chunks([]any{"head"}, 2)
	if len(chunks) != 2 || chunks[0][0] != "head" || chunks[1][0] != "head" {
		t.Fatalf("chunks %v", chunks)
	}
}

// TestRenewalAfterItsEndIsDropped: a poll takes the started and completed
// topics in no set order, so a started can follow its dispatch's completion
// in one batch; its renewal is not added (the slot is freed anyway), while
// a renewal of another dispatch of the job still is.
func TestRenewalAfterItsEndIsDropped(t *testing.T) {
	var batch Batch
	batch.Complete("j1", "t1", "d1")
	batch.Fail("j2", "d2", schema.ClassAppError)
	batch.Extend("j1", "d1")
	batch.Extend("j2", "d2")
	batch.Extend("j1", "d9")
	var codes []string
	for _, o := range batch.ops {
		if o != nil {
			codes = append(codes, o.code())
		}
	}
	if got := strings.Join(codes, ""); got != "CFS" || batch.Len() != 3 {
		t.Fatalf("ops %s (len %d), want CFS", got, batch.Len())
	}
	if e, ok := batch.ops[2].(extendOp); !ok || e.DispatchID != "d9" {
		t.Fatalf("kept renewal %+v, want d9's", batch.ops[2])
	}
}

// TestJobLifecycleCost counts the Redis commands a plain job (no
// flow-control fields) costs in the scheduler's scripts from enqueue to
// completion, in batches of 100: the fast path of docs/performance.md's
// budget. A count, not a time: deterministic.
func TestJobLifecycleCost(t *testing.T) {
	b := setup(t)
	b.worker(t0, "w1", 1000)
	const n = 100
	applyCounted := func(batch *Batch) ([]any, int64) {
		chunks := batch.chunks(b.store.applyHead(t0, true), n*4)
		if len(chunks) != 1 {
			t.Fatalf("%d chunks", len(chunks))
		}
		return b.counted(applyScript.evalSource(), chunks[0])
	}
	var enqueue Batch
	for i := range n {
		e := enq("j"+strconv.Itoa(i), 1, "default", 5, time.Time{})
		if err := enqueue.Enqueue(e, t0); err != nil {
			t.Fatal(err)
		}
		enqueue.Trace(e.JobRef, "00-tp")
	}
	_, enqCalls := applyCounted(&enqueue)

	b.n++
	v, dispCalls := b.counted(dispatchScript.evalSource(), b.store.dispatchArgs(DispatchParams{Pool: schema.PoolShort, Now: t0,
		MaxBatch: 512, DispatchIDPrefix: "cost"}, true))
	res, err := decodeDispatchReply(v)
	if err != nil || len(res.Dispatched) != n {
		t.Fatalf("dispatched %d: %v", len(res.Dispatched), err)
	}

	var done Batch
	for _, d := range res.Dispatched {
		done.Extend(d.JobID, d.DispatchID)
		done.Usage(d.JobID, d.DispatchID, t0, t0.Add(5*time.Millisecond))
		done.Complete(d.JobID, d.TenantID, d.DispatchID)
	}
	_, doneCalls := applyCounted(&done)

	per := func(c int64) float64 { return float64(c) / n }
	total := per(enqCalls + dispCalls + doneCalls)
	t.Logf("Redis commands per job in batches of %d: enqueue %.2f, dispatch %.2f, started+completed %.2f, total %.2f",
		n, per(enqCalls), per(dispCalls), per(doneCalls), total)
	// 6.5 since a terminal marker is one COPY (apply.lua's terminal; was 7.5).
	if total > 7 {
		t.Errorf("a plain job costs %.2f Redis commands in the scheduler's scripts, want at most 7", total)
	}
	// The state is what the slow path would have left: done, out of every set.
	for _, k := range []string{"pool:short:inflight", "q:default:ready", "pool:short:q:default:t:t1"} {
		if c, _ := b.rdb.ZCard(b.ctx, b.store.Prefix()+k).Result(); c != 0 {
			t.Errorf("%s holds %d", k, c)
		}
	}
	if c, _ := b.rdb.SCard(b.ctx, b.store.Prefix()+"tenant:t1:running").Result(); c != 0 {
		t.Errorf("running holds %d", c)
	}
	if st, _ := b.rdb.HGetAll(b.ctx, b.store.Prefix()+"job:j7").Result(); st["state"] != "done" || st["spec"] != "" || st["est"] != "" {
		t.Errorf("job hash after completion %v", st)
	}
	if est, _ := b.rdb.HGet(b.ctx, b.store.Prefix()+"est", "t1|noop").Result(); est == "" {
		t.Error("the run time estimate was not learnt")
	}
}

// TestDelayedBurstCost counts what promoting and dispatching jobs due at
// the same instant costs per job: the step that drains a burst of delayed
// jobs (docs/performance.md, delayed workload).
func TestDelayedBurstCost(t *testing.T) {
	b := setup(t)
	const n = 200
	due := t0.Add(5 * time.Second)
	b.worker(due.Add(-time.Second), "w1", 1000)
	var es []schema.Enqueued
	for i := range n {
		es = append(es, enq("d"+strconv.Itoa(i), 1, "default", 5, due))
	}
	b.enqueue(t0, es...)
	if got := b.dispatch(due.Add(-time.Millisecond), 0); len(got.Dispatched) != 0 || !got.NextDue.Equal(due) {
		t.Fatalf("before the due time: dispatched %d, next due %v", len(got.Dispatched), got.NextDue)
	}
	dispatched, calls := b.countedDispatch(due)
	if dispatched != n {
		t.Fatalf("dispatched %d of %d at the due time", dispatched, n)
	}
	per := float64(calls) / n
	t.Logf("Redis commands per job to promote and dispatch %d jobs due at once: %.2f", n, per)
	if per > 8 {
		t.Errorf("promoting and dispatching a due job costs %.2f Redis commands, want at most 8", per)
	}
}

// TestExpiryInStepReleasesKeyedJob: a ready job holding its key's slot
// expires in a dispatch step; its slot goes to the next job of the key,
// which the fast path's pending set writes must not lose: it is
// dispatched (by the next step at the latest) exactly once, and every
// ready set is empty afterwards.
func TestExpiryInStepReleasesKeyedJob(t *testing.T) {
	b := setup(t)
	b.worker(t0, "w1", 10)
	na := t0.Add(2 * time.Second)
	bj := enqK("b", "x", "k", 1)
	bj.Job.NotAfter = &na
	b.enqueue(t0, enqK("a", "x", "k", 1), bj, enqK("c", "x", "k", 1))
	first := b.dispatch(t0, 0).Dispatched
	if !slices.Equal(ids(first), []string{"a"}) {
		t.Fatalf("first step %v, want [a]", ids(first))
	}
	b.complete(t0.Add(time.Second), first[0]) // b takes the key's slot, ready again
	later := t0.Add(3 * time.Second)
	b.worker(later, "w1", 10)
	res := b.dispatch(later, 0)
	if !slices.Equal(ids(res.Expired), []string{"b"}) {
		t.Fatalf("expired %v, want [b]", ids(res.Expired))
	}
	got := ids(res.Dispatched)
	if len(got) == 0 {
		got = ids(b.dispatch(later, 0).Dispatched)
	}
	if !slices.Equal(got, []string{"c"}) {
		t.Fatalf("dispatched %v after b expired, want [c]", got)
	}
	if again := ids(b.dispatch(later, 0).Dispatched); len(again) != 0 {
		t.Fatalf("dispatched again: %v", again)
	}
	for _, k := range []string{"q:default:ready", "pool:short:q:default:t:t1"} {
		if n, _ := b.rdb.ZCard(b.ctx, b.store.Prefix()+k).Result(); n != 0 {
			t.Errorf("%s holds %d jobs", k, n)
		}
	}
	if st, _ := b.rdb.HGet(b.ctx, b.store.Prefix()+"job:c", "state").Result(); st != "inflight" {
		t.Errorf("c is %q", st)
	}
}

// TestEnqueueThenOtherOpsInOneCall runs, in one script call, enqueues
// followed by ops that read or empty the sets those enqueues add to (which
// apply.lua writes once per set, later): a cancel, a newer attempt's
// enqueue, a delayed job's cancel. The state is what one call per op leaves.
func TestEnqueueThenOtherOpsInOneCall(t *testing.T) {
	b := setup(t)
	b.worker(t0, "w1", 10)
	b.apply(t0, func(batch *Batch) {
		for _, e := range []schema.Enqueued{
			enq("gone", 1, "default", 5, time.Time{}), enq("later", 1, "default", 5, t0.Add(time.Minute)),
			enq("retried", 1, "default", 5, time.Time{}), enq("kept", 1, "default", 5, time.Time{}),
		} {
			if err := batch.Enqueue(e, t0); err != nil {
				t.Fatal(err)
			}
		}
		batch.Cancel("gone", "t1")
		batch.Cancel("later", "t1")
		if err := batch.Enqueue(enq("retried", 2, "other", 5, time.Time{}), t0); err != nil {
			t.Fatal(err)
		}
	})
	p := b.store.Prefix()
	for key, want := range map[string][]string{
		"q:default:ready": {"kept"}, "q:other:ready": {"retried"}, "q:default:delayed": nil,
		"pool:short:q:default:t:t1": {"kept"}, "pool:short:q:other:t:t1": {"retried"}, "pool:short:q:default:t:t1:delayed": nil,
	} {
		if got := b.rdb.ZRange(b.ctx, p+key, 0, -1).Val(); !slices.Equal(got, want) {
			t.Errorf("%s holds %v, want %v", key, got, want)
		}
	}
	got := b.dispatch(t0, 0).Dispatched
	slices.SortFunc(got, func(x, y Template) int { return strings.Compare(x.JobID, y.JobID) })
	if len(got) != 2 || got[0].JobID != "kept" || got[1].JobID != "retried" || got[1].Attempt != 2 {
		t.Fatalf("dispatched %+v", got)
	}
	for id, want := range map[string]string{"gone": "cancelled", "later": "cancelled"} {
		if st := b.rdb.HGet(b.ctx, p+"job:"+id, "state").Val(); st != want {
			t.Errorf("%s state %q, want %q", id, st, want)
		}
	}
}
