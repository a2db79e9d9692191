package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ferryhq/ferry/cmd/ferry/internal/stack"
	"github.com/ferryhq/ferry/events/schema"
	"github.com/ferryhq/ferry/platform/auth"
	"github.com/ferryhq/ferry/platform/config"
	"github.com/ferryhq/ferry/platform/devstack"
	"github.com/ferryhq/ferry/platform/telemetry"
	"github.com/ferryhq/ferry/platform/testenv"
	"github.com/ferryhq/ferry/services/scheduler"
)

var setupTelemetry = sync.OnceValues(func() (*telemetry.Telemetry, error) {
	return telemetry.Setup(context.Background(), telemetry.Options{Service: "ferry-e2e", LogOutput: io.Discard, SpanExporter: spans})
})

// e2e is a whole Ferry stack in this process, on real infrastructure.
type e2e struct {
	t       *testing.T
	base    string
	key     string
	brokers string
	stack   *stack.Stack
	loader  *config.Loader
	// stop stops the stack and waits for it (also at the test's end).
	stop func()
}

// startStack runs every service against a fresh database, Redis database
// and Kafka broker. env overrides configuration.
func startStack(t *testing.T, env map[string]string) *e2e {
	t.Helper()
	vars := map[string]string{
		"FERRY_HTTP_ADDR":        "127.0.0.1:0",
		"FERRY_KAFKA_BROKERS":    testenv.Kafka(t),
		"FERRY_POSTGRES_URL":     testenv.Postgres(t),
		"FERRY_TOPIC_PARTITIONS": "4",
		"FERRY_OUTBOUND_ALLOW":   "127.0.0.0/8",
		"FERRY_ADMIN_KEY":        "admin-e2e",
		"FERRY_DATA_DIR":         t.TempDir(),
		"FERRY_SHUTDOWN_TIMEOUT": "10s",
	}
	// One embedded broker holds one copy (production defaults are 3 and 2).
	vars["FERRY_TOPIC_REPLICATION"], vars["FERRY_TOPIC_MIN_INSYNC"] = "1", "1"
	if _, ok := env["FERRY_REDIS_URL"]; !ok {
		vars["FERRY_REDIS_URL"] = testenv.Redis(t)
	}
	for k, v := range env {
		vars[k] = v
	}
	l := config.NewLoader(func(k string) (string, bool) { v, ok := vars[k]; return v, ok })
	common := config.LoadCommon(l)
	if err := l.Err(); err != nil {
		t.Fatal(err)
	}
	tel, err := setupTelemetry()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	st, err := stack.Start(ctx, common, l, tel)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			if err := st.Wait(); err != nil {
				t.Errorf("stack stopped with: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	key, _ := auth.NewKey()
	if err := auth.EnsureTenant(ctx, st.Deps.Postgres, "acme", "Acme", key); err != nil {
		t.Fatal(err)
	}
	return &e2e{t: t, base: "http://" + st.Addr, key: key, brokers: vars["FERRY_KAFKA_BROKERS"], stack: st, loader: l, stop: stop}
}

func (e *e2e) call(method, path string, body any, headers ...string) (int, map[string]any) {
	e.t.Helper()
	r := testenv.Call(e.t, e.base, e.key, method, path, body, headers...)
	if len(r.Raw) > 0 && r.Body == nil {
		e.t.Fatalf("%s %s: %d answered no JSON object: %s", method, path, r.Status, r.Raw)
	}
	return r.Status, r.Body
}

func (e *e2e) submit(job map[string]any, headers ...string) string {
	e.t.Helper()
	code, out := e.call("POST", "/v1/jobs", job, headers...)
	if code != http.StatusAccepted {
		e.t.Fatalf("submit %v: %d %v", job, code, out)
	}
	return out["id"].(string)
}

func (e *e2e) job(id string) map[string]any {
	e.t.Helper()
	code, out := e.call("GET", "/v1/jobs/"+id, nil)
	if code != http.StatusOK {
		e.t.Fatalf("get %s: %d %v", id, code, out)
	}
	return out
}

// waitStatus polls the job until it has status, failing after d.
func (e *e2e) waitStatus(id, status string, d time.Duration) map[string]any {
	e.t.Helper()
	var last map[string]any
	waitFor(e.t, d, id+" "+status, func() bool {
		last = e.job(id)
		return last["status"] == status
	})
	return last
}

// recorder is the shared Kafka event recorder (testenv.Recorder).
type recorder = testenv.Recorder

// record reads topics from the start, keeping every decoded event.
func (e *e2e) record(topics ...string) *recorder {
	e.t.Helper()
	return testenv.Record(e.t, []string{e.brokers}, topics...)
}

func parseTime(t *testing.T, v any) time.Time {
	t.Helper()
	s, _ := v.(string)
	ts, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatalf("not a time: %v", v)
	}
	return ts
}

// TestPipelineSleepJob: queued → running (with progress) → succeeded.
func TestPipelineSleepJob(t *testing.T) {
	e := startStack(t, nil)
	id := e.submit(map[string]any{"type": "sleep", "payload": map[string]any{"ms": 1500}, "tags": []string{"e2e"}})
	running := e.waitStatus(id, "running", 20*time.Second)
	if running["started_at"] == nil {
		t.Fatalf("running job has no started_at: %v", running)
	}
	waitFor(t, 10*time.Second, "progress reported", func() bool {
		p, _ := e.job(id)["progress"].(map[string]any)
		return p != nil && p["percent"].(float64) > 0
	})
	done := e.waitStatus(id, "succeeded", 20*time.Second)
	created, started, finished := parseTime(t, done["created_at"]), parseTime(t, done["started_at"]), parseTime(t, done["finished_at"])
	if !(created.Before(started) || created.Equal(started)) || !started.Before(finished) {
		t.Fatalf("timestamps out of order: %v", done)
	}
	if finished.Sub(started) < 1500*time.Millisecond {
		t.Fatalf("sleep of 1.5s finished after %v", finished.Sub(started))
	}
	if p := done["progress"].(map[string]any); p["percent"].(float64) != 100 {
		t.Fatalf("final progress = %v", p)
	}
}

// TestPipelineBatchExactlyOnce: 1,000 jobs through /v1/jobs/batch all
// succeed, each completed exactly once.
func TestPipelineBatchExactlyOnce(t *testing.T) {
	e := startStack(t, nil)
	completed := e.record((schema.Topics{}).Lifecycle(schema.EventCompleted))
	jobs := make([]map[string]any, 1000)
	for i := range jobs {
		jobs[i] = map[string]any{"type": "noop", "payload": map[string]any{"i": i}}
	}
	code, out := e.call("POST", "/v1/jobs/batch", map[string]any{"jobs": jobs}, "Idempotency-Key", "batch-1")
	if code != http.StatusAccepted {
		t.Fatalf("batch: %d %v", code, out)
	}
	ids := map[string]bool{}
	for _, it := range out["jobs"].([]any) {
		ids[it.(map[string]any)["id"].(string)] = true
	}
	if len(ids) != 1000 {
		t.Fatalf("batch answered %d distinct ids", len(ids))
	}
	waitFor(t, 60*time.Second, "1,000 completions", func() bool {
		return completed.Count(func(ev schema.Event) bool { return ids[ev.Subject] }) >= 1000
	})
	time.Sleep(500 * time.Millisecond) // let any duplicate show up
	per := map[string]int{}
	for _, ev := range completed.Events() {
		per[ev.Subject]++
	}
	for id := range ids {
		if per[id] != 1 {
			t.Errorf("job %s completed %d times", id, per[id])
		}
	}
	// The list reads the status projection, which follows the completed
	// records with its lag (only GET /v1/jobs/{id} reads its writes,
	// docs/guarantees.md): wait for it to hold a full page.
	var code2 int
	var list map[string]any
	waitFor(t, 30*time.Second, "the status projection's first page of 500 succeeded jobs", func() bool {
		code2, list = e.call("GET", "/v1/jobs?status=succeeded&limit=500", nil)
		jobs, _ := list["jobs"].([]any)
		return code2 == http.StatusOK && len(jobs) == 500
	})
	if list["next_cursor"] == "" {
		t.Fatalf("list succeeded: %d, %d jobs, cursor %v", code2, len(list["jobs"].([]any)), list["next_cursor"])
	}
}

// TestPipelinePriority: urgent jobs submitted behind a backlog of low
// priority jobs start before the backlog drains.
func TestPipelinePriority(t *testing.T) {
	e := startStack(t, map[string]string{"FERRY_WORKER_CONCURRENCY": "4", "FERRY_SCHEDULER_PREFETCH": "0"})
	started := e.record((schema.Topics{}).Lifecycle(schema.EventStarted))
	backlog := make([]map[string]any, 200)
	for i := range backlog {
		backlog[i] = map[string]any{"type": "sleep", "priority": 9, "payload": map[string]any{"ms": 50}}
	}
	code, out := e.call("POST", "/v1/jobs/batch", map[string]any{"jobs": backlog})
	if code != http.StatusAccepted {
		t.Fatalf("batch: %d %v", code, out)
	}
	low := map[string]bool{}
	for _, it := range out["jobs"].([]any) {
		low[it.(map[string]any)["id"].(string)] = true
	}
	waitFor(t, 20*time.Second, "backlog running", func() bool {
		return started.Count(func(ev schema.Event) bool { return low[ev.Subject] }) >= 8
	})
	urgent := map[string]bool{}
	for range 3 {
		urgent[e.submit(map[string]any{"type": "noop", "priority": 0})] = true
	}
	waitFor(t, 20*time.Second, "urgent jobs started", func() bool {
		return started.Count(func(ev schema.Event) bool { return urgent[ev.Subject] }) == 3
	})
	lowStarted := started.Count(func(ev schema.Event) bool { return low[ev.Subject] })
	if lowStarted >= 150 {
		t.Fatalf("urgent jobs started only after %d of 200 backlog jobs", lowStarted)
	}
	t.Logf("urgent jobs started after %d of 200 backlog jobs", lowStarted)
}

// TestPipelineDelay: a job with delay 2s does not start before its time.
func TestPipelineDelay(t *testing.T) {
	e := startStack(t, nil)
	id := e.submit(map[string]any{"type": "noop", "delay": "2s"})
	j := e.job(id)
	if j["status"] != "scheduled" {
		t.Fatalf("delayed job status = %v", j["status"])
	}
	runAt := parseTime(t, j["scheduled_for"])
	done := e.waitStatus(id, "succeeded", 20*time.Second)
	if started := parseTime(t, done["started_at"]); started.Before(runAt) {
		t.Fatalf("started %v before its run_at %v", started, runAt)
	}
	if d := parseTime(t, done["started_at"]).Sub(parseTime(t, done["created_at"])); d < 2*time.Second {
		t.Fatalf("started %v after submission, want ≥ 2s", d)
	}
}

// TestPipelineCancel: a delayed job and a running job end cancelled; the
// delayed one never runs.
func TestPipelineCancel(t *testing.T) {
	e := startStack(t, nil)
	started := e.record((schema.Topics{}).Lifecycle(schema.EventStarted))
	// The delayed job is submitted once the other runs, so its 3s start
	// after the stack is warm (workers joined and announced).
	running := e.submit(map[string]any{"type": "sleep", "payload": map[string]any{"ms": 30000}})
	e.waitStatus(running, "running", 20*time.Second)
	queued := e.submit(map[string]any{"type": "noop", "delay": "3s"})
	for _, id := range []string{queued, running} {
		if code, out := e.call("POST", "/v1/jobs/"+id+"/cancel", nil); code != http.StatusAccepted {
			t.Fatalf("cancel %s: %d %v", id, code, out)
		}
	}
	e.waitStatus(queued, "cancelled", 10*time.Second)
	j := e.waitStatus(running, "cancelled", 10*time.Second)
	if j["status"] != "cancelled" {
		t.Fatalf("running job: %v", j)
	}
	time.Sleep(4 * time.Second) // past the delayed job's run_at
	if n := started.Count(func(ev schema.Event) bool { return ev.Subject == queued }); n != 0 {
		t.Fatalf("cancelled delayed job started %d times", n)
	}
	if got := e.job(queued)["status"]; got != "cancelled" {
		t.Fatalf("cancelled job is now %v", got)
	}
	if code, _ := e.call("POST", "/v1/jobs/"+running+"/cancel", nil); code != http.StatusConflict {
		t.Fatalf("second cancel of a finished job: %d, want 409", code)
	}
}

// TestPipelineIdempotencyAcrossRedisRestart: a retried submission after
// Redis lost its data still returns the original job.
func TestPipelineIdempotencyAcrossRedisRestart(t *testing.T) {
	port, err := devstack.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	startRedis := func() *devstack.Process {
		p, _, err := devstack.StartRedis(context.Background(), devstack.RedisConfig{DataDir: t.TempDir(), Port: port})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	redis := startRedis()
	e := startStack(t, map[string]string{"FERRY_REDIS_URL": fmt.Sprintf("redis://127.0.0.1:%d/0", port)})
	t.Cleanup(func() { _ = redis.Stop(context.Background()) })
	body := map[string]any{"type": "noop", "payload": map[string]any{"order": 42}}
	id := e.submit(body, "Idempotency-Key", "order-42")
	if code, out := e.call("POST", "/v1/jobs", body, "Idempotency-Key", "order-42"); code != http.StatusOK || out["id"] != id || out["deduplicated"] != true {
		t.Fatalf("replay: %d %v", code, out)
	}
	if code, out := e.call("POST", "/v1/jobs", map[string]any{"type": "noop"}, "Idempotency-Key", "order-42"); code != http.StatusUnprocessableEntity || out["error"].(map[string]any)["code"] != "idempotency_key_reused" {
		t.Fatalf("other body: %d %v", code, out)
	}
	e.waitStatus(id, "succeeded", 20*time.Second)

	// Redis restarts empty: its data directory is gone.
	if err := redis.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	redis = startRedis()
	var code int
	var out map[string]any
	waitFor(t, 20*time.Second, "api answers again after the Redis restart", func() bool {
		code, out = e.call("POST", "/v1/jobs", body, "Idempotency-Key", "order-42")
		return code != http.StatusServiceUnavailable && code != http.StatusInternalServerError
	})
	if code != http.StatusOK || out["id"] != id || out["deduplicated"] != true {
		t.Fatalf("replay after Redis restart: %d %v (want 200, the original %s)", code, out, id)
	}
	// And the pipeline still runs jobs on the new Redis.
	e.waitStatus(e.submit(map[string]any{"type": "noop"}), "succeeded", 30*time.Second)
}

// TestPipelineTwoSchedulers: two scheduler instances at once dispatch every
// job exactly once.
func TestPipelineTwoSchedulers(t *testing.T) {
	e := startStack(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	second, err := scheduler.Build(ctx, e.stack.Deps, e.loader)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- second.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	topics := schema.Topics{}
	rec := e.record(topics.Dispatch(schema.PoolShort), topics.Dispatch(schema.PoolLong), topics.Lifecycle(schema.EventCompleted))
	jobs := make([]map[string]any, 500)
	for i := range jobs {
		jobs[i] = map[string]any{"type": "noop"}
	}
	ids := map[string]bool{}
	for range 2 {
		code, out := e.call("POST", "/v1/jobs/batch", map[string]any{"jobs": jobs})
		if code != http.StatusAccepted {
			t.Fatalf("batch: %d %v", code, out)
		}
		for _, it := range out["jobs"].([]any) {
			ids[it.(map[string]any)["id"].(string)] = true
		}
	}
	isCompleted := func(ev schema.Event) bool { _, ok := ev.Data.(schema.Completed); return ok && ids[ev.Subject] }
	waitFor(t, 60*time.Second, "1,000 completions", func() bool { return rec.Count(isCompleted) >= 1000 })
	time.Sleep(500 * time.Millisecond)
	dispatches := map[string]int{}
	for _, ev := range rec.Events() {
		if _, ok := ev.Data.(schema.Dispatch); ok && ids[ev.Subject] {
			dispatches[ev.Subject]++
		}
	}
	for id := range ids {
		if dispatches[id] != 1 {
			t.Errorf("job %s dispatched %d times", id, dispatches[id])
		}
	}
	if n := rec.Count(isCompleted); n != 1000 {
		t.Errorf("%d completions for 1,000 jobs", n)
	}
}

// TestPipelineHTTPJobs: http jobs against local servers, one of which fails
// with 503 before succeeding.
func TestPipelineHTTPJobs(t *testing.T) {
	var hits atomic.Int32
	var gotJobID atomic.Value
	ok := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotJobID.Store(r.Header.Get("Ferry-Job-Id"))
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"ok":true}`)
	}))
	defer ok.Close()
	flaky := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if hits.Add(1) == 1 {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		_, _ = io.WriteString(w, "finally")
	}))
	defer flaky.Close()

	e := startStack(t, nil)
	id := e.submit(map[string]any{"type": "http", "payload": map[string]any{"method": "POST", "url": ok.URL + "/hook", "body": map[string]any{"a": 1}}})
	j := e.waitStatus(id, "succeeded", 20*time.Second)
	if res := j["result"].(map[string]any); res["status"].(float64) != 200 {
		t.Fatalf("http result: %v", res)
	}
	if gotJobID.Load() != id {
		t.Fatalf("receiver saw Ferry-Job-Id %v, want %s", gotJobID.Load(), id)
	}
	id = e.submit(map[string]any{"type": "http", "payload": map[string]any{"method": "GET", "url": flaky.URL}})
	j = e.waitStatus(id, "succeeded", 30*time.Second)
	if j["attempt"].(float64) != 2 || hits.Load() != 2 {
		t.Fatalf("503-then-200 job: attempt %v, %d hits", j["attempt"], hits.Load())
	}
}
