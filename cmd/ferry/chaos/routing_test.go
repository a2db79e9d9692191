package chaos_test

import (
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ferryhq/ferry/events/schema"
	"github.com/ferryhq/ferry/platform/testenv"
)

// typedJobs are n jobs of type typ taking ms each.
func typedJobs(typ string, n, ms int) []map[string]any {
	jobs := sleepJobs(n, ms)
	for _, j := range jobs {
		j["type"] = typ
	}
	return jobs
}

// TestTypeRouting runs two worker processes with different registries in
// one pool: ferry-worker (built-in handlers: sleep, noop, …) and
// reportworker (report.build only). Jobs of report.build wait, saying why,
// while no worker handles the type, and run once one starts; under load
// and through a rolling restart of both workers, no job is started or
// failed by a worker lacking its type, and nothing is lost or
// dead-lettered.
func TestTypeRouting(t *testing.T) {
	c := newCluster(t, nil)
	c.startAPI()
	sched, schedBase := c.spawn("scheduler", "scheduler", nil)
	c.waitReady(sched, schedBase)
	w := map[string]string{"FERRY_WORKER_CONCURRENCY": "4", "FERRY_WORKER_GRACE": "10s"}
	c.start("worker", "builtin-1", merge(w, "FERRY_WORKER_ID", "builtin-1"))

	// No worker handles report.build yet: those jobs wait, visibly, while
	// the sleep jobs behind them run.
	reports := c.submit(typedJobs("report.build", 6, 50)...)
	sleeps := c.submit(sleepJobs(6, 50)...)
	c.account(sleeps, "succeeded", 60*time.Second)
	waitFor(t, 30*time.Second, "report.build jobs saying why they wait", func() bool {
		for _, id := range reports {
			j := c.job(id)
			if j["status"] != "queued" || j["waiting"] != "no worker handles type report.build" {
				return false
			}
		}
		return true
	})
	waitFor(t, 30*time.Second, "the queue and the metric counting them", func() bool {
		r := testenv.Call(t, schedBase, c.key, "GET", "/v1/queues", nil)
		qs, _ := r.Body["queues"].([]any)
		return len(qs) == 1 && num(qs[0].(map[string]any)["unroutable"]) == len(reports) &&
			scrape(t, schedBase, `ferry_jobs_unroutable\{[^}]*pool="short"[^}]*\} (\d+)`) == len(reports)
	})

	c.start("reportworker", "reports-1", merge(w, "FERRY_WORKER_ID", "reports-1"))
	c.account(reports, "succeeded", 60*time.Second)

	// Under load, a rolling restart of both workers: jobs keep coming
	// while each worker stops and its successor starts.
	var ids []string
	load := func() {
		ids = append(ids, c.submit(append(typedJobs("report.build", 3, 200), sleepJobs(3, 200)...)...)...)
	}
	for range 10 {
		load()
		time.Sleep(150 * time.Millisecond)
	}
	c.rollWorker("worker", "builtin-1", "builtin-2", w, load)
	c.rollWorker("reportworker", "reports-1", "reports-2", w, load)
	for range 10 {
		load()
		time.Sleep(150 * time.Millisecond)
	}
	c.account(append(append(ids, reports...), sleeps...), "succeeded", 120*time.Second)
	checkRouting(t, c.rec.Events())
	t.Logf("%d jobs under load through the rolling restart; %d dispatches rejected and re-routed", len(ids), rejected(c.rec.Events()))
}

// rollWorker stops the worker old (SIGTERM, graceful) and starts its successor
// of binary bin, calling load every 150ms until old has exited.
func (c *cluster) rollWorker(bin, old, successor string, env map[string]string, load func()) {
	c.t.Helper()
	var p *proc
	c.mu.Lock()
	for _, x := range c.procs {
		if x.name == old {
			p = x
		}
	}
	c.mu.Unlock()
	c.signal(p, syscall.SIGTERM)
	for stopping := true; stopping; {
		load()
		select {
		case <-p.done:
			stopping = false
		case <-time.After(150 * time.Millisecond):
		}
	}
	if code := c.wait(p, time.Second); code != 0 {
		c.t.Fatalf("%s exited %d after SIGTERM", old, code)
	}
	c.start(bin, successor, merge(env, "FERRY_WORKER_ID", successor))
}

// checkRouting fails on any job started or failed by a worker lacking its
// type, and on any failure or dead letter at all.
func checkRouting(t *testing.T, evs []schema.Event) {
	t.Helper()
	types := map[string]string{}
	for _, ev := range evs {
		if e, ok := ev.Data.(schema.Enqueued); ok {
			types[e.JobID] = e.Job.Type
		}
	}
	handles := func(worker, typ string) bool {
		if strings.HasPrefix(worker, "reports-") {
			return typ == "report.build"
		}
		return typ != "report.build"
	}
	for _, ev := range evs {
		switch d := ev.Data.(type) {
		case schema.Started:
			if !handles(d.WorkerID, types[d.JobID]) {
				t.Errorf("job %s of type %s started by %s", d.JobID, types[d.JobID], d.WorkerID)
			}
		case schema.Failed:
			t.Errorf("job %s of type %s failed on %s: %+v", d.JobID, types[d.JobID], d.WorkerID, d.Error)
		case schema.DeadLettered:
			t.Errorf("job %s dead-lettered: %+v", d.JobID, d.Error)
		}
	}
}

// rejected counts the dispatches workers rejected (not their type).
func rejected(evs []schema.Event) int {
	n := 0
	for _, ev := range evs {
		if ws, ok := ev.Data.(schema.WorkerStatus); ok {
			n += len(ws.Rejected)
		}
	}
	return n
}

// scrape reads the first number matched by pattern's group in base's
// /metrics, -1 when absent.
func scrape(t *testing.T, base, pattern string) int {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	m := regexp.MustCompile(pattern).FindSubmatch(b)
	if m == nil {
		return -1
	}
	var n int
	fmt.Sscan(string(m[1]), &n)
	return n
}
