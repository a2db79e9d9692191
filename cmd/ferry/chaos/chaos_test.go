// Package chaos_test runs Ferry's services as separate OS processes (built
// with the race detector) against the test Kafka, Postgres and Redis, kills,
// stops and starves them, and accounts for every job: each reaches the
// expected terminal status in the status projection and no job has more
// than one completed event on the topic.
package chaos_test

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/ferryhq/ferry/events/schema"
)

func sleepJobs(n int, ms int) []map[string]any {
	jobs := make([]map[string]any, n)
	for i := range jobs {
		jobs[i] = map[string]any{"type": "sleep", "payload": map[string]any{"ms": ms, "i": i}}
	}
	return jobs
}

// TestWorkerKilled: a worker SIGKILLed mid-job; its jobs finish on the
// other worker at the same attempt.
func TestWorkerKilled(t *testing.T) {
	c := newCluster(t, nil)
	c.startAPI()
	c.start("scheduler", "scheduler", nil)
	w := map[string]string{"FERRY_WORKER_CONCURRENCY": "4"}
	victim := c.start("worker", "victim", merge(w, "FERRY_WORKER_ID", "victim"))
	c.start("worker", "survivor", merge(w, "FERRY_WORKER_ID", "survivor"))
	waitFor(t, 30*time.Second, "both workers in the dispatch group", func() bool { return c.groupMembers("ferry-worker-short") == 2 })

	ids := c.submit(sleepJobs(16, 2500)...)
	waitFor(t, 30*time.Second, "the victim running jobs", func() bool { return len(startedBy(c.rec, "victim")) >= 2 })
	c.signal(victim, syscall.SIGKILL)
	c.wait(victim, 10*time.Second)
	killedAt := time.Now()

	c.account(ids, "succeeded", 120*time.Second)
	lost := 0
	for id := range startedBy(c.rec, "victim") {
		done := eventsOf[schema.Completed](c.rec, id)
		if len(done) != 1 {
			continue // reported above
		}
		if done[0].WorkerID == "victim" {
			continue // finished before the kill
		}
		lost++
		if done[0].Attempt != 1 {
			t.Errorf("job %s lost with the victim completed at attempt %d, want 1", id, done[0].Attempt)
		}
	}
	if lost == 0 {
		t.Fatal("no job was lost with the victim")
	}
	for _, id := range ids {
		if f := eventsOf[schema.Failed](c.rec, id); len(f) != 0 {
			t.Errorf("job %s has failed events: %+v", id, f)
		}
		if a := num(c.job(id)["attempt"]); a != 1 {
			t.Errorf("job %s: attempt %d, want 1", id, a)
		}
	}
	t.Logf("%d jobs of the killed worker finished elsewhere, the last %v after the kill", lost, time.Since(killedAt).Round(time.Second))
}

// TestSchedulerKilled: the scheduler SIGKILLed under load and restarted;
// no job lost or doubled.
func TestSchedulerKilled(t *testing.T) {
	c := newCluster(t, nil)
	c.startAPI()
	sched := c.start("scheduler", "scheduler-1", nil)
	c.start("worker", "worker-1", map[string]string{"FERRY_WORKER_CONCURRENCY": "16", "FERRY_WORKER_ID": "worker-1"})

	var ids []string
	for i := range 3 {
		ids = append(ids, c.submit(sleepJobs(100, 50+10*i)...)...)
	}
	waitFor(t, 30*time.Second, "some jobs completed", func() bool {
		return c.rec.Count(isCompleted) >= 20
	})
	c.signal(sched, syscall.SIGKILL)
	c.wait(sched, 10*time.Second)
	ids = append(ids, c.submit(sleepJobs(100, 20)...)...)
	c.start("scheduler", "scheduler-2", nil)
	ids = append(ids, c.submit(sleepJobs(100, 20)...)...)
	c.account(ids, "succeeded", 150*time.Second)
}

// TestRedisFlushed: the scheduler's Redis is flushed under load, with two
// scheduler replicas; the state is rebuilt from the log (once) and every job
// still completes exactly once.
func TestRedisFlushed(t *testing.T) {
	c := newCluster(t, nil)
	c.startAPI()
	s1 := c.start("scheduler", "scheduler-1", nil)
	s2 := c.start("scheduler", "scheduler-2", nil)
	c.start("worker", "worker-1", map[string]string{"FERRY_WORKER_CONCURRENCY": "8", "FERRY_WORKER_ID": "worker-1"})
	c.start("worker", "worker-2", map[string]string{"FERRY_WORKER_CONCURRENCY": "8", "FERRY_WORKER_ID": "worker-2"})

	var ids []string
	ids = append(ids, c.submit(sleepJobs(300, 100)...)...)
	delayed := sleepJobs(50, 10)
	for _, j := range delayed {
		j["delay"] = "3s"
	}
	ids = append(ids, c.submit(delayed...)...)
	retried := make([]map[string]any, 20)
	for i := range retried {
		retried[i] = map[string]any{"type": "fail", "payload": map[string]any{"times": 1, "i": i}, "backoff": map[string]any{"base": "1s"}}
	}
	ids = append(ids, c.submit(retried...)...)
	waitFor(t, 30*time.Second, "some jobs completed", func() bool {
		return c.rec.Count(isCompleted) >= 40
	})
	rebuiltBefore := logCount(s1, "scheduler state rebuilt") + logCount(s2, "scheduler state rebuilt")
	c.flushRedis()
	ids = append(ids, c.submit(sleepJobs(100, 20)...)...)
	c.account(ids, "succeeded", 150*time.Second)
	rebuilt := logCount(s1, "scheduler state rebuilt") + logCount(s2, "scheduler state rebuilt") - rebuiltBefore
	if rebuilt != 1 {
		t.Errorf("state rebuilt %d times after the flush, want 1", rebuilt)
	}
}

// TestRetries: app_error twice then success (three attempts, backoff gaps
// within jitter); a permanent failure (one attempt, dlq); max_attempts
// exhausted (dlq with the full history and the original submission).
func TestRetries(t *testing.T) {
	c := newCluster(t, nil)
	c.startAPI()
	c.start("scheduler", "scheduler", nil)
	c.start("worker", "worker", map[string]string{"FERRY_WORKER_ID": "w"})

	base := 200 * time.Millisecond
	flaky := c.submit(map[string]any{"type": "fail", "payload": map[string]any{"times": 2}, "backoff": map[string]any{"base": "200ms"}})[0]
	perm := c.submit(map[string]any{"type": "fail", "payload": map[string]any{"times": 9, "class": "permanent"}})[0]
	exhaustPayload := map[string]any{"times": 9, "message": "still broken"}
	exhaust := c.submit(map[string]any{"type": "fail", "payload": exhaustPayload, "max_attempts": 3, "backoff": map[string]any{"base": "100ms"}, "tags": []any{"chaos"}})[0]

	c.account([]string{flaky}, "succeeded", 60*time.Second)
	c.account([]string{perm, exhaust}, "dead", 60*time.Second)

	// flaky: three attempts, gaps following min(base·2^(n-1), max) ± 25 %.
	if a := num(c.job(flaky)["attempt"]); a != 3 {
		t.Errorf("flaky: attempt %d, want 3", a)
	}
	fails := eventsOf[schema.Failed](c.rec, flaky)
	starts := eventsOf[schema.Started](c.rec, flaky)
	enqs := eventsOf[schema.Enqueued](c.rec, flaky)
	if len(fails) != 2 || len(starts) != 3 || len(enqs) != 3 {
		t.Fatalf("flaky: %d failed, %d started, %d enqueued events; want 2, 3, 3", len(fails), len(starts), len(enqs))
	}
	for n := 1; n <= 2; n++ {
		f := byAttempt(fails, n)
		next := byAttempt(enqs, n+1)
		st := byAttempt(starts, n+1)
		if f == nil || next == nil || st == nil {
			t.Fatalf("flaky: attempt %d: missing failed/enqueued/started", n)
		}
		if f.Error.Class != schema.ClassAppError {
			t.Errorf("flaky: attempt %d failed as %s", n, f.Error.Class)
		}
		want := base << (n - 1)
		// run_at is decided after the failure: at least 75 % of the backoff
		// after it; the decision's own latency may add to the upper bound.
		gap := next.RunAt.Sub(f.FinishedAt)
		if gap < want*3/4 || gap > want*5/4+5*time.Second {
			t.Errorf("flaky: retry %d scheduled %v after the failure, want %v ± 25 %%", n+1, gap, want)
		}
		if st.StartedAt.Before(next.RunAt) {
			t.Errorf("flaky: attempt %d started at %v before its run_at %v", n+1, st.StartedAt, next.RunAt)
		}
		t.Logf("attempt %d → %d: backoff %v, scheduled after %v, started after %v", n, n+1, want, gap, st.StartedAt.Sub(f.FinishedAt))
	}

	// perm: one attempt, then the dlq.
	if f := eventsOf[schema.Failed](c.rec, perm); len(f) != 1 || f[0].Error.Class != schema.ClassPermanent {
		t.Errorf("permanent: failed events %+v", f)
	}
	dl := eventsOf[schema.DeadLettered](c.rec, perm)
	if len(dl) != 1 || dl[0].Attempt != 1 || dl[0].Error.Class != schema.ClassPermanent || len(dl[0].History) != 1 {
		t.Errorf("permanent: dlq events %+v", dl)
	}
	if n := len(eventsOf[schema.Started](c.rec, perm)); n != 1 {
		t.Errorf("permanent: started %d times", n)
	}

	// exhaust: three attempts, then the dlq with the full history.
	dl = eventsOf[schema.DeadLettered](c.rec, exhaust)
	if len(dl) != 1 {
		t.Fatalf("exhausted: %d dlq events", len(dl))
	}
	d := dl[0]
	if d.Attempt != 3 || d.Error.Class != schema.ClassAppError || d.Error.Message != "still broken" {
		t.Errorf("exhausted: dlq %+v", d)
	}
	if len(d.History) != 3 {
		t.Fatalf("exhausted: history %+v, want 3 attempts", d.History)
	}
	for i, h := range d.History {
		if h.Attempt != i+1 || h.Class != schema.ClassAppError || h.Error != "still broken" || h.WorkerID != "w" ||
			h.StartedAt == nil || h.FinishedAt == nil || h.FinishedAt.Before(*h.StartedAt) {
			t.Errorf("exhausted: history[%d] = %+v", i, h)
		}
	}
	sub := eventsOf[schema.Enqueued](c.rec, exhaust)
	orig := byAttempt(sub, 1)
	if orig == nil || orig.Reason != schema.ReasonSubmitted {
		t.Fatalf("exhausted: no submission event")
	}
	if d.Job.Type != "fail" || d.Job.MaxAttempts != 3 || string(d.Job.Payload) != string(orig.Job.Payload) ||
		fmt.Sprint(d.Job.Tags) != "[chaos]" || !d.CreatedAt.Equal(orig.CreatedAt) {
		t.Errorf("exhausted: dlq job %+v created %v; submitted %+v created %v", d.Job, d.CreatedAt, orig.Job, orig.CreatedAt)
	}
}

// TestWorkerSIGTERM: a worker stopped with SIGTERM while running jobs
// exits 0 within its grace period (plus shutdown overhead); jobs it could
// not finish are handed back and finish elsewhere at the same attempt.
func TestWorkerSIGTERM(t *testing.T) {
	c := newCluster(t, nil)
	c.startAPI()
	c.start("scheduler", "scheduler", nil)
	grace := 2 * time.Second
	victim := c.start("worker", "victim", map[string]string{"FERRY_WORKER_CONCURRENCY": "4", "FERRY_WORKER_ID": "victim", "FERRY_WORKER_GRACE": grace.String()})
	c.start("worker", "other", map[string]string{"FERRY_WORKER_CONCURRENCY": "4", "FERRY_WORKER_ID": "other"})
	waitFor(t, 30*time.Second, "both workers in the dispatch group", func() bool { return c.groupMembers("ferry-worker-short") == 2 })

	ids := c.submit(sleepJobs(8, 8000)...)               // handed back
	ids = append(ids, c.submit(sleepJobs(8, 500)...)...) // finish within the grace
	waitFor(t, 30*time.Second, "the victim running jobs", func() bool { return len(startedBy(c.rec, "victim")) >= 4 })
	termAt := time.Now()
	c.signal(victim, syscall.SIGTERM)
	if code := c.wait(victim, grace+30*time.Second); code != 0 {
		t.Fatalf("worker exited %d after SIGTERM", code)
	}
	took := victim.exitAt.Sub(termAt)
	t.Logf("worker exited 0 %v after SIGTERM (grace %v)", took.Round(time.Millisecond), grace)

	c.account(ids, "succeeded", 120*time.Second)
	var handedBack []schema.JobRef
	for _, ev := range c.rec.Events() {
		if ws, ok := ev.Data.(schema.WorkerStatus); ok && ws.WorkerID == "victim" && ws.Stopping {
			handedBack = append(handedBack, ws.HandedBack...)
		}
	}
	if len(handedBack) == 0 {
		t.Fatal("the stopping worker handed nothing back")
	}
	for _, ref := range handedBack {
		done := eventsOf[schema.Completed](c.rec, ref.JobID)
		if len(done) == 1 && (done[0].WorkerID == "victim" || done[0].Attempt != ref.Attempt) {
			t.Errorf("handed back job %s completed by %s at attempt %d", ref.JobID, done[0].WorkerID, done[0].Attempt)
		}
	}
	t.Logf("%d jobs handed back", len(handedBack))
}

func isCompleted(ev schema.Event) bool { _, ok := ev.Data.(schema.Completed); return ok }

func byAttempt[T schema.Lifecycle](evs []T, attempt int) *T {
	for i := range evs {
		if evs[i].Ref().Attempt == attempt {
			return &evs[i]
		}
	}
	return nil
}

func merge(m map[string]string, kv ...string) map[string]string {
	out := map[string]string{}
	for k, v := range m {
		out[k] = v
	}
	for i := 0; i+1 < len(kv); i += 2 {
		out[kv[i]] = kv[i+1]
	}
	return out
}
