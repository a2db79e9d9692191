package main

import (
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ferryhq/ferry/events/schema"
)

// TestFlowControl runs the whole stack (8 worker slots) and checks flow
// control from the outside (docs/flow-control.md):
//
//  1. concurrency keys: a customer capped at 2 never has more than 2 jobs
//     running as its handler observes them, while another key and unkeyed
//     jobs run beside it; every job completes;
//  2. a dispatch rate limit of 5 starts/s (burst 5) on a type: no window of
//     one second holds more than burst + rate starts, and another type of
//     the same tenant is not held up;
//  3. a circuit breaker: a failing dependency opens its type's breaker;
//     while open only probes reach it; once it recovers, the breaker closes
//     and every job completes, none dead-lettered; the state changes are
//     published and audited.
//
// Bounds are safety properties (upper bounds on concurrency and starts),
// never speed.
func TestFlowControl(t *testing.T) {
	e := startStack(t, map[string]string{"FERRY_WORKER_CONCURRENCY": "8"})
	topics := schema.Topics{}
	rec := e.record(topics.Dispatch(schema.PoolShort), topics.Lifecycle(schema.EventStarted),
		topics.Lifecycle(schema.EventDLQ), topics.Breakers())
	t.Run("concurrency", func(t *testing.T) { flowConcurrency(t, e) })
	t.Run("rate limit", func(t *testing.T) { flowRateLimit(t, e, rec) })
	t.Run("key rate limit", func(t *testing.T) { flowKeyRateLimit(t, e, rec) })
	t.Run("breaker", func(t *testing.T) { flowBreaker(t, e, rec) })
}

// inFlight counts the requests a test server is handling per label, and
// the most it ever saw at once.
type inFlight struct {
	mu       sync.Mutex
	now, max map[string]int
}

func (f *inFlight) enter(k string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now[k]++
	f.max[k] = max(f.max[k], f.now[k])
}

func (f *inFlight) leave(k string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now[k]--
}

func (f *inFlight) peak(k string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.max[k]
}

func flowConcurrency(t *testing.T, e *e2e) {
	c := e.fairTenant("conc", 1)
	seen := &inFlight{now: map[string]int{}, max: map[string]int{}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		k := r.URL.Query().Get("k")
		seen.enter(k)
		defer seen.leave(k)
		time.Sleep(100 * time.Millisecond)
	}))
	t.Cleanup(srv.Close)
	job := func(k string, limit int) map[string]any {
		j := map[string]any{"type": "http", "payload": map[string]any{"method": "GET", "url": srv.URL + "/?k=" + k}}
		if limit > 0 {
			j["concurrency"] = map[string]any{"key": k, "limit": limit}
		}
		return j
	}
	var jobs []map[string]any
	for range 16 {
		jobs = append(jobs, job("customer-42", 2))
	}
	for range 8 {
		jobs = append(jobs, job("customer-7", 2), job("none", 0))
	}
	if code, out := c.call("POST", "/v1/jobs/batch", map[string]any{"jobs": jobs}); code != http.StatusAccepted {
		t.Fatalf("batch: %d %v", code, out)
	}
	waiting, limits := int64(0), map[any]bool{}
	waitFor(t, 60*time.Second, "every keyed job done", func() bool {
		code, out := c.call("GET", "/v1/concurrency/customer-42", nil)
		if code != http.StatusOK || out["running"].(float64) > 2 {
			t.Fatalf("concurrency of customer-42: %d %v", code, out)
		}
		waiting = max(waiting, int64(out["waiting"].(float64)))
		if out["running"].(float64) > 0 {
			limits[out["limit"]] = true
		}
		_, list := c.call("GET", "/v1/jobs?status=succeeded&limit=100", nil)
		return len(list["jobs"].([]any)) == len(jobs)
	})
	t.Logf("handler-observed peaks: customer-42 %d, customer-7 %d, unkeyed %d; most customer-42 jobs seen waiting %d",
		seen.peak("customer-42"), seen.peak("customer-7"), seen.peak("none"), waiting)
	for k, limit := range map[string]int{"customer-42": 2, "customer-7": 2} {
		if p := seen.peak(k); p > limit || p < 1 {
			t.Errorf("%s: %d ran at once, want 1 to %d", k, p, limit)
		}
	}
	if len(limits) != 1 || !limits[2.0] {
		t.Errorf("limits shown while customer-42 ran: %v, want 2", limits)
	}
	if code, out := c.call("GET", "/v1/concurrency/customer-42", nil); code != http.StatusOK ||
		out["running"] != 0.0 || out["waiting"] != 0.0 || out["limit"] != nil {
		t.Errorf("customer-42 at the end: %d %v", code, out)
	}
	if code, out := c.call("POST", "/v1/jobs", map[string]any{"type": "noop", "concurrency": map[string]any{"key": "", "limit": 0}},
		"Idempotency-Key", "bad-concurrency"); code != http.StatusUnprocessableEntity {
		t.Errorf("bad concurrency: %d %v", code, out)
	}
}

// dispatchTimes are the dispatch times of tenant's jobs of type typ (each
// dispatch's lease deadline, less the constant lease: exact, from the
// scheduler's clock).
func dispatchTimes(r *recorder, tenant, typ string) []time.Time {
	return dispatchTimesOf(r, func(d schema.Dispatch) bool { return d.TenantID == tenant && d.Job.Type == typ })
}

// dispatchTimesOf are the dispatch times of the dispatches that match.
func dispatchTimesOf(r *recorder, match func(schema.Dispatch) bool) []time.Time {
	var out []time.Time
	for _, ev := range r.Events() {
		if d, ok := ev.Data.(schema.Dispatch); ok && match(d) {
			out = append(out, d.LeaseUntil)
		}
	}
	slices.SortFunc(out, func(a, b time.Time) int { return a.Compare(b) })
	return out
}

// mostInWindow is the largest number of times within any window of w.
func mostInWindow(ts []time.Time, w time.Duration) int {
	most, j := 0, 0
	for i := range ts {
		for ts[i].Sub(ts[j]) >= w {
			j++
		}
		most = max(most, i-j+1)
	}
	return most
}

func flowRateLimit(t *testing.T, e *e2e, rec *recorder) {
	r := e.fairTenant("rated", 1)
	code, out := e.as("admin-e2e").call("PATCH", "/v1/admin/tenants/rated", map[string]any{
		"flow_control": map[string]any{"rate_limits": map[string]any{"noop": map[string]any{"per_second": 5, "burst": 5}}}})
	if code != http.StatusOK || out["flow_control"] == nil {
		t.Fatalf("set rate limit: %d %v", code, out)
	}
	waitFor(t, 30*time.Second, "the rate limit in effect", func() bool {
		_, out := r.call("GET", "/v1/rate-limits", nil)
		rl, _ := out["rate_limits"].([]any)
		return len(rl) == 1 && rl[0].(map[string]any)["per_second"] == 5.0
	})
	const n = 40
	noops := make([]map[string]any, n)
	for i := range noops {
		noops[i] = map[string]any{"type": "noop"}
	}
	if code, out := r.call("POST", "/v1/jobs/batch", map[string]any{"jobs": noops}); code != http.StatusAccepted {
		t.Fatalf("batch: %d %v", code, out)
	}
	r.submitSleeps(20, 10) // another type: not held up
	waitFor(t, 60*time.Second, "the other type's jobs done", func() bool {
		return len(dispatchTimes(rec, "rated", "sleep")) == 20
	})
	if got := len(dispatchTimes(rec, "rated", "noop")); got >= n {
		t.Errorf("all %d rate-limited jobs started before 20 sleep jobs of the same tenant: the limit held nothing back", got)
	}
	waitFor(t, 60*time.Second, "the rate-limited jobs", func() bool {
		return len(dispatchTimes(rec, "rated", "noop")) == n
	})
	ts := dispatchTimes(rec, "rated", "noop")
	most := mostInWindow(ts, time.Second)
	span := ts[len(ts)-1].Sub(ts[0])
	t.Logf("%d starts at 5/s burst 5: at most %d in any 1 s window, over %v", n, most, span.Round(time.Millisecond))
	if most > 10 {
		t.Errorf("%d starts within one second, want at most burst + rate = 10", most)
	}
	// (n - burst) starts need (n - burst) / rate seconds of refill.
	if min := time.Duration(n-5) * time.Second / 5; span < min-100*time.Millisecond {
		t.Errorf("%d starts took %v, the bucket allows no less than %v", n, span, min)
	}
	if _, out := r.call("GET", "/v1/rate-limits", nil); out["rate_limits"].([]any)[0].(map[string]any)["waiting"] != 0.0 {
		t.Errorf("rate limits at the end: %v", out)
	}
}

func flowBreaker(t *testing.T, e *e2e, rec *recorder) {
	b := e.fairTenant("brk", 1)
	var down atomic.Bool
	var calls atomic.Int64
	down.Store(true)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		if down.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	t.Cleanup(srv.Close)
	code, out := e.as("admin-e2e").call("PATCH", "/v1/admin/tenants/brk", map[string]any{
		"flow_control": map[string]any{"breakers": map[string]any{"http": map[string]any{"failures": 3, "window": "30s", "cooldown": "2s"}}}})
	if code != http.StatusOK {
		t.Fatalf("set breaker: %d %v", code, out)
	}
	waitFor(t, 30*time.Second, "the breaker configured", func() bool {
		_, out := b.call("GET", "/v1/breakers", nil)
		bs, _ := out["breakers"].([]any)
		return len(bs) == 1 && bs[0].(map[string]any)["state"] == schema.BreakerClosed
	})
	const n = 10
	jobs := make([]map[string]any, n)
	for i := range jobs {
		jobs[i] = map[string]any{"type": "http", "payload": map[string]any{"method": "GET", "url": srv.URL},
			"max_attempts": 8, "backoff": map[string]any{"base": "100ms", "max": "200ms"}}
	}
	if code, out := b.call("POST", "/v1/jobs/batch", map[string]any{"jobs": jobs}); code != http.StatusAccepted {
		t.Fatalf("batch: %d %v", code, out)
	}
	breaker := func() map[string]any {
		_, out := b.call("GET", "/v1/breakers", nil)
		return out["breakers"].([]any)[0].(map[string]any)
	}
	waitFor(t, 30*time.Second, "the breaker open", func() bool { return breaker()["state"] == schema.BreakerOpen })
	// While open, the dependency sees only probes: one per cool-down.
	before := calls.Load()
	time.Sleep(5 * time.Second)
	during := calls.Load() - before
	t.Logf("calls to the failing dependency in 5 s with the breaker open (2 s cool-down): %d; breaker %v", during, breaker())
	if during > 4 {
		t.Errorf("%d calls reached the dependency in 5 s while the breaker was open, want at most a probe per cool-down", during)
	}
	down.Store(false)
	waitFor(t, 60*time.Second, "every job succeeded", func() bool {
		_, list := b.call("GET", "/v1/jobs?status=succeeded&limit=100", nil)
		return len(list["jobs"].([]any)) == n
	})
	if st := breaker()["state"]; st != schema.BreakerClosed {
		t.Errorf("breaker %v after recovery, want closed", st)
	}
	if d := rec.Count(func(ev schema.Event) bool { _, ok := ev.Data.(schema.DeadLettered); return ok && ev.Tenant == "brk" }); d != 0 {
		t.Errorf("%d jobs dead-lettered", d)
	}
	var path []string
	waitFor(t, 30*time.Second, "the transitions published", func() bool {
		path = breakerPath(rec, "brk")
		return len(path) >= 3 && path[len(path)-1] == "half_open>closed"
	})
	t.Logf("transitions: %v", path)
	if path[0] != "closed>open" || path[1] != "open>half_open" {
		t.Errorf("transitions %v, want closed>open, open>half_open, …, half_open>closed", path)
	}
	waitFor(t, 30*time.Second, "the transitions audited", func() bool {
		_, out := b.call("GET", "/v1/audit/events?type=breaker.changed", nil)
		evs, _ := out["events"].([]any)
		return len(evs) >= len(path)
	})
	waitFor(t, 20*time.Second, "the flow-control metrics", func() bool {
		var transitions, parked, open bool
		for _, l := range strings.Split(scrapeText(t, e.base+"/metrics"), "\n") {
			transitions = transitions || strings.HasPrefix(l, "ferry_scheduler_breaker_transitions_total{") && strings.Contains(l, `to="open"`)
			parked = parked || strings.HasPrefix(l, "ferry_scheduler_gate_parked{") && strings.Contains(l, `gate="breaker"`)
			open = open || strings.HasPrefix(l, "ferry_scheduler_breakers_open")
		}
		return transitions && parked && open
	})
	if code, out := b.call("POST", "/v1/breakers/http/reset", nil); code != http.StatusOK || out["previous_state"] != schema.BreakerClosed {
		t.Errorf("reset of a closed breaker: %d %v", code, out)
	}
}

// breakerPath lists tenant's breaker transitions as "from>to".
func breakerPath(r *recorder, tenant string) []string {
	var out []string
	for _, ev := range r.Events() {
		if c, ok := ev.Data.(schema.BreakerChanged); ok && c.TenantID == tenant {
			out = append(out, c.From+">"+c.To)
		}
	}
	return out
}
