package qstore

import (
	"strconv"
	"testing"
	"time"

	"github.com/ferryhq/ferry/events/schema"
)

// TestRetryLifecycleCost counts the Redis commands a job that fails once
// and is retried (the bench's retry workload) costs in the scheduler's
// scripts, in batches of 100, after its first dispatch: the failure (with
// its started and its measured run), the enqueue of attempt 2 the retry
// decision brings back, the step that promotes and dispatches it when due,
// and its completion. A count, not a time: deterministic. It also checks
// that the failure's fast path leaves what the slow path left: the job out
// of every lease, slot and queue set, its fair-share charge settled once.
func TestRetryLifecycleCost(t *testing.T) {
	b := setup(t)
	const n = 100
	b.worker(t0, "w1", 1000)
	applyCounted := func(now time.Time, batch *Batch) (ApplyResult, int64) {
		t.Helper()
		chunks := batch.chunks(b.store.applyHead(now, true), n*4)
		if len(chunks) != 1 {
			t.Fatalf("%d chunks", len(chunks))
		}
		v, calls := b.counted(applyScript.evalSource(), chunks[0])
		var res ApplyResult
		if err := decodeApplyReply(v, &res); err != nil {
			t.Fatal(err)
		}
		return res, calls
	}
	dispatchCounted := func(now time.Time) ([]Template, int64) {
		t.Helper()
		b.n++
		v, calls := b.counted(dispatchScript.evalSource(), b.store.dispatchArgs(DispatchParams{Pool: schema.PoolShort, Now: now,
			MaxBatch: 512, DispatchIDPrefix: "cost" + strconv.Itoa(b.n)}, true))
		res, err := decodeDispatchReply(v)
		if err != nil || len(res.Dispatched) != n {
			t.Fatalf("dispatched %d: %v", len(res.Dispatched), err)
		}
		return res.Dispatched, calls
	}
	var es []schema.Enqueued
	for i := range n {
		es = append(es, enq("r"+strconv.Itoa(i), 1, "default", 5, time.Time{}))
	}
	b.enqueue(t0, es...)
	first, _ := dispatchCounted(t0)

	// Attempt 1 fails: its started, its measured run and its failure, as the
	// consumer batches them.
	failAt := t0.Add(10 * time.Millisecond)
	var fail Batch
	for _, d := range first {
		fail.Extend(d.JobID, d.DispatchID)
		fail.Usage(d.JobID, d.DispatchID, t0, t0.Add(5*time.Millisecond))
		fail.Fail(d.JobID, d.DispatchID, schema.ClassAppError)
	}
	failed, failCalls := applyCounted(failAt, &fail)
	if len(failed.Failed) != n || failed.Wake.Any() { // no job waits for the freed slots
		t.Fatalf("failed templates %d (wake %+v), want %d and no wake", len(failed.Failed), failed.Wake, n)
	}
	b.wantEmpty(t, "after the failures", "pool:short:inflight", "pool:short:held", "q:default:ready", "pool:short:q:default:t:t1")
	if c, _ := b.rdb.SCard(b.ctx, b.store.Prefix()+"tenant:t1:running").Result(); c != 0 {
		t.Errorf("running holds %d after the failures", c)
	}
	h, _ := b.rdb.HGetAll(b.ctx, b.store.Prefix()+"job:r7").Result()
	if h["state"] != "failed" || h["est"] != "" || h["cw"] != "" || h["spec"] == "" {
		t.Errorf("job hash after its failure %v", h)
	}
	if ttl, _ := b.rdb.TTL(b.ctx, b.store.Prefix()+"job:r7").Result(); ttl <= 0 {
		t.Errorf("a failed job's hash has no TTL (%v): a job never decided on would stay", ttl)
	}
	if est, _ := b.rdb.HGet(b.ctx, b.store.Prefix()+"est", "t1|noop").Result(); est != "5.000" {
		t.Errorf("run time estimate %q after 100 runs of 5 ms, want 5.000 (each run settled once)", est)
	}

	// The retry decisions come back as enqueues of attempt 2, due in 1 s.
	due := failAt.Add(time.Second)
	var retry Batch
	for _, f := range failed.Failed {
		e := enq(f.JobID, 2, "default", 5, due)
		e.Reason = schema.ReasonRetry
		e.History = []schema.Attempt{{Attempt: 1, Class: schema.ClassAppError, Error: "boom"}}
		if err := retry.Enqueue(e, failAt); err != nil {
			t.Fatal(err)
		}
	}
	_, retryCalls := applyCounted(failAt.Add(5*time.Millisecond), &retry)
	if c, _ := b.rdb.ZCard(b.ctx, b.store.Prefix()+"q:default:delayed").Result(); c != n {
		t.Fatalf("delayed set holds %d retries, want %d", c, n)
	}
	if ttl, _ := b.rdb.TTL(b.ctx, b.store.Prefix()+"job:r7").Result(); ttl != -1 {
		t.Errorf("a retried job's hash keeps the failure's TTL (%v)", ttl)
	}

	second, dispCalls := dispatchCounted(due)
	for _, d := range second {
		if d.Attempt != 2 {
			t.Fatalf("dispatched %s attempt %d, want 2", d.JobID, d.Attempt)
		}
	}
	var done Batch
	for _, d := range second {
		done.Extend(d.JobID, d.DispatchID)
		done.Usage(d.JobID, d.DispatchID, due, due.Add(5*time.Millisecond))
		done.Complete(d.JobID, d.TenantID, d.DispatchID)
	}
	_, doneCalls := applyCounted(due.Add(10*time.Millisecond), &done)
	b.wantEmpty(t, "after the completions", "pool:short:inflight", "pool:short:held", "q:default:ready", "q:default:delayed",
		"pool:short:q:default:t:t1", "pool:short:q:default:t:t1:delayed")
	b.wantMarker(t, "r7", "done", "t1")

	per := func(c int64) float64 { return float64(c) / n }
	total := per(failCalls + retryCalls + dispCalls + doneCalls)
	t.Logf("Redis commands per retried job in batches of %d after its first dispatch: failure %.2f, retry enqueue %.2f, "+
		"promote+dispatch %.2f, started+completed %.2f, total %.2f", n, per(failCalls), per(retryCalls), per(dispCalls),
		per(doneCalls), total)
	// Was 6.02 + 15.01 (the failure's U op and lease removals per job; the
	// retry's enqueue unindexing a job F had taken out of every set).
	if per(failCalls) > 4.1 || per(retryCalls) > 3.1 {
		t.Errorf("a failure costs %.2f and its retry's enqueue %.2f Redis commands, want at most 4.1 and 3.1",
			per(failCalls), per(retryCalls))
	}
}

// wantEmpty fails t when any of the sorted sets keys (without the prefix)
// holds a member.
func (b *bundle) wantEmpty(t *testing.T, when string, keys ...string) {
	t.Helper()
	for _, k := range keys {
		if c, _ := b.rdb.ZCard(b.ctx, b.store.Prefix()+k).Result(); c != 0 {
			t.Errorf("%s: %s holds %d", when, k, c)
		}
	}
}
