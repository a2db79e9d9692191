package main

import (
	"fmt"
	"math"
	"net/http"
	"testing"
	"time"

	"github.com/ferryhq/ferry/events/schema"
)

// fairTenant creates a tenant with weight through the admin route and
// returns a client acting with its key.
func (e *e2e) fairTenant(id string, weight int) *e2e {
	e.t.Helper()
	code, out := e.as("admin-e2e").call("POST", "/v1/admin/tenants", map[string]any{"id": id, "name": id, "weight": weight})
	if code != http.StatusCreated {
		e.t.Fatalf("create tenant %s: %d %v", id, code, out)
	}
	return e.as(out["api_key"].(string))
}

// submitSleeps submits n sleep jobs of ms each, in batches of 1000.
func (e *e2e) submitSleeps(n, ms int) {
	e.t.Helper()
	for n > 0 {
		k := min(n, 1000)
		jobs := make([]map[string]any, k)
		for i := range jobs {
			jobs[i] = map[string]any{"type": "sleep", "payload": map[string]any{"ms": ms}}
		}
		if code, out := e.call("POST", "/v1/jobs/batch", map[string]any{"jobs": jobs}); code != http.StatusAccepted {
			e.t.Fatalf("batch: %d %v", code, out)
		}
		n -= k
	}
}

// jobRun is one finished attempt as its completed event says.
type jobRun struct {
	tenant          string
	start, finished time.Time
}

func runs(r *recorder) []jobRun {
	var out []jobRun
	for _, ev := range r.Events() {
		if c, ok := ev.Data.(schema.Completed); ok {
			out = append(out, jobRun{c.TenantID, c.StartedAt, c.FinishedAt})
		}
	}
	return out
}

// slotTime is each tenant's worker time inside [from, to).
func slotTime(rs []jobRun, from, to time.Time) map[string]time.Duration {
	out := map[string]time.Duration{}
	for _, r := range rs {
		s, f := r.start, r.finished
		if s.Before(from) {
			s = from
		}
		if f.After(to) {
			f = to
		}
		if f.After(s) {
			out[r.tenant] += f.Sub(s)
		}
	}
	return out
}

// starts are the start times of each tenant's attempts (completed ones).
func starts(rs []jobRun, tenant string) (first, last time.Time, n int) {
	for _, r := range rs {
		if r.tenant != tenant {
			continue
		}
		n++
		if first.IsZero() || r.start.Before(first) {
			first = r.start
		}
		if r.start.After(last) {
			last = r.start
		}
	}
	return first, last, n
}

// share is a's part of the slot-time of a and b in [from, to), logged with
// the shares of consecutive sub-windows.
func share(t *testing.T, name string, rs []jobRun, a, b string, from, to time.Time) float64 {
	t.Helper()
	st := slotTime(rs, from, to)
	total := st[a] + st[b]
	if total == 0 {
		t.Fatalf("%s: no slot-time of %s or %s in the window", name, a, b)
	}
	var parts []string
	step := to.Sub(from) / 4
	for w := from; step > 0 && w.Before(to); w = w.Add(step) {
		s := slotTime(rs, w, w.Add(step))
		if s[a]+s[b] > 0 {
			parts = append(parts, fmt.Sprintf("%.2f", s[a].Seconds()/(s[a]+s[b]).Seconds()))
		}
	}
	sh := st[a].Seconds() / total.Seconds()
	t.Logf("%s: window %v, slot-time %s %v, %s %v → %s's share %.3f (sub-windows %v)",
		name, to.Sub(from).Round(time.Millisecond), a, st[a].Round(time.Millisecond), b, st[b].Round(time.Millisecond), a, sh, parts)
	return sh
}

// TestFairShare runs the whole stack with 8 worker slots:
//
//  1. equal weights: tenant A floods 20,000 sleep jobs, then B submits 50;
//     B's first job starts within a bounded delay and, while both have
//     ready work, each gets 50 % ± 15 % of the slot-time;
//  2. a paused queue dispatches nothing until resumed (A's flood, paused);
//  3. weights 3:1: the slot-time shares are 75 % / 25 % ± 10 %;
//  4. a tenant running 500 ms jobs against one running 50 ms jobs (equal
//     weights, once a few jobs have taught the scheduler their run times)
//     gets no more than 50 % + 10 % of the slot-time.
//
// Bounds are on shares and on a generous start delay, never on speed.
func TestFairShare(t *testing.T) {
	e := startStack(t, map[string]string{"FERRY_WORKER_CONCURRENCY": "8", "FERRY_SCHEDULER_PREFETCH": "4"})
	topics := schema.Topics{}
	rec := e.record(topics.Lifecycle(schema.EventCompleted), topics.Lifecycle(schema.EventStarted))
	a, b := e.fairTenant("flood-a", 1), e.fairTenant("late-b", 1)
	wa, wb := e.fairTenant("heavy-w3", 3), e.fairTenant("light-w1", 1)
	long, short := e.fairTenant("long-jobs", 1), e.fairTenant("short-jobs", 1)
	time.Sleep(2500 * time.Millisecond) // the scheduler reads tenant settings every 2 s

	// 1. Equal weights: a flood, then a late tenant.
	a.submitSleeps(20000, 40)
	waitFor(t, 30*time.Second, "the flood running", func() bool {
		_, _, n := starts(runs(rec), "flood-a")
		return n >= 200
	})
	submitted := time.Now()
	b.submitSleeps(50, 40)
	waitFor(t, 60*time.Second, "B's 50 jobs", func() bool {
		_, _, n := starts(runs(rec), "late-b")
		return n == 50
	})
	rs := runs(rec)
	bFirst, bLast, _ := starts(rs, "late-b")
	delay := bFirst.Sub(submitted)
	t.Logf("equal weights: B's first job started %v after its submission, behind %d queued jobs of A", delay.Round(time.Millisecond), 20000)
	if delay > 5*time.Second {
		t.Errorf("B's first job started %v after submission, want < 5s", delay)
	}
	if sh := share(t, "equal weights", rs, "late-b", "flood-a", bFirst, bLast); math.Abs(sh-0.5) > 0.15 {
		t.Errorf("B's share %.3f while both had work, want 0.50 ± 0.15", sh)
	}

	// 2. Pause A's queue: nothing of A starts until it is resumed.
	code, out := a.call("POST", "/v1/queues/default/pause", nil)
	if code != http.StatusOK || out["paused"] != true || out["name"] != "default" {
		t.Fatalf("pause: %d %v", code, out)
	}
	time.Sleep(time.Second) // jobs dispatched before the pause finish
	_, _, before := starts(runs(rec), "flood-a")
	time.Sleep(2 * time.Second)
	_, _, after := starts(runs(rec), "flood-a")
	if after != before {
		t.Errorf("%d jobs of the paused queue started", after-before)
	}
	code, out = a.call("GET", "/v1/queues", nil)
	qs, _ := out["queues"].([]any)
	if code != http.StatusOK || len(qs) != 1 || out["next_cursor"] != "" {
		t.Fatalf("list queues: %d %v", code, out)
	}
	q := qs[0].(map[string]any)
	if q["name"] != "default" || q["paused"] != true || q["depth"].(float64) < 10000 || q["running"].(float64) != 0 {
		t.Errorf("A's queue while paused: %v", q)
	}
	if d, err := time.ParseDuration(q["oldest_ready_age"].(string)); err != nil || d <= 0 {
		t.Errorf("oldest_ready_age %v", q["oldest_ready_age"])
	}
	t.Logf("A's paused queue: %v", q)
	if code, out := b.call("GET", "/v1/queues", nil); code != http.StatusOK || len(out["queues"].([]any)) != 1 ||
		out["queues"].([]any)[0].(map[string]any)["paused"] != false {
		t.Errorf("B's queues: %d %v", code, out)
	}

	// 3. Weights 3:1 (A paused, so only these two compete).
	wa.submitSleeps(600, 30)
	wb.submitSleeps(600, 30)
	waitFor(t, 60*time.Second, "the weight-3 tenant's jobs", func() bool {
		_, _, n := starts(runs(rec), "heavy-w3")
		return n == 600
	})
	rs = runs(rec)
	f1, l1, _ := starts(rs, "heavy-w3")
	f2, _, _ := starts(rs, "light-w1")
	from := f1
	if f2.After(from) {
		from = f2
	}
	if sh := share(t, "weights 3:1", rs, "heavy-w3", "light-w1", from, l1); math.Abs(sh-0.75) > 0.10 {
		t.Errorf("weight-3 tenant's share %.3f, want 0.75 ± 0.10", sh)
	}

	// 4. Long jobs against short jobs, equal weights.
	waitFor(t, 60*time.Second, "the weight-1 tenant's jobs", func() bool {
		_, _, n := starts(runs(rec), "light-w1")
		return n == 600
	})
	// A first few jobs teach the scheduler each tenant's run time (until
	// then a (tenant, type) is charged the 1 s default estimate).
	long.submitSleeps(4, 500)
	short.submitSleeps(8, 50)
	waitFor(t, 30*time.Second, "the warm-up jobs", func() bool {
		rs := runs(rec)
		_, _, nl := starts(rs, "long-jobs")
		_, _, ns := starts(rs, "short-jobs")
		return nl == 4 && ns == 8
	})
	warm := time.Now()
	long.submitSleeps(60, 500)
	short.submitSleeps(600, 50)
	waitFor(t, 90*time.Second, "one of them to run out", func() bool {
		rs := runs(rec)
		_, _, nl := starts(rs, "long-jobs")
		_, _, ns := starts(rs, "short-jobs")
		return nl == 64 || ns == 608
	})
	rs = runs(rec)
	from, to := time.Time{}, time.Time{}
	for _, tenant := range []string{"long-jobs", "short-jobs"} {
		var ts []jobRun
		for _, r := range rs {
			if r.tenant == tenant && r.start.After(warm) {
				ts = append(ts, r)
			}
		}
		f, l, _ := starts(ts, tenant)
		if from.IsZero() || f.After(from) {
			from = f
		}
		if to.IsZero() || l.Before(to) {
			to = l
		}
	}
	if sh := share(t, "500ms vs 50ms jobs", rs, "long-jobs", "short-jobs", from, to); sh > 0.60 {
		t.Errorf("the long-job tenant's share %.3f, want ≤ 0.50 + 0.10", sh)
	}

	// Resumed, A's queue dispatches again.
	if code, out := a.call("POST", "/v1/queues/default/resume", nil); code != http.StatusOK || out["paused"] != false {
		t.Fatalf("resume: %d %v", code, out)
	}
	waitFor(t, 20*time.Second, "A's jobs after resume", func() bool {
		_, _, n := starts(runs(rec), "flood-a")
		return n > after+50
	})
}
