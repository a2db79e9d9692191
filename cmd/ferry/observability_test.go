package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/ferryhq/ferry/events/schema"
	"github.com/ferryhq/ferry/platform/testenv"
)

// spans receives every span of this test process (see setupTelemetry).
var spans = tracetest.NewInMemoryExporter()

var updateGolden = flag.Bool("update", false, "rewrite compose/testdata/metrics.txt from the metrics Ferry registers")

// metricsGolden lists the metric names Ferry exposes on /metrics; the
// compose test checks the dashboard and alert rules against it.
const metricsGolden = "../../compose/testdata/metrics.txt"

// TestObservability submits jobs through the whole stack and finds one
// trace per job spanning api, scheduler, worker and projection, the job's
// trace id in its status, and Ferry's metrics on /metrics.
func TestObservability(t *testing.T) {
	e := startStack(t, nil)
	topics := schema.Topics{Prefix: "ferry."}

	// A first job runs through before the traced one, so the traced job
	// meets a settled stack; a job the scheduler's start-up rebuild takes in
	// keeps its trace too (scheduler TestRebuildKeepsTheTrace).
	e.waitStatus(e.submit(map[string]any{"type": "noop"}), "succeeded", 30*time.Second)

	// A client-side trace: the API's server span must join it, and the
	// job's status must carry its trace id.
	traceID := trace.TraceID{0xfe, 0x77, 0x01}
	copy(traceID[3:], fmt.Appendf(nil, "%013d", time.Now().UnixNano()%1e13))
	parent := "00-" + traceID.String() + "-00f067aa0ba902b7-01"
	id := e.submit(map[string]any{"type": "noop"}, "traceparent", parent)
	// A schedule that fires every second, so the fire-delay histogram (only
	// exported once something fired) is on /metrics whatever ran before.
	e.createSchedule(map[string]any{"name": "observed", "cron": "* * * * * *", "job": map[string]any{"type": "noop"}})
	done := e.waitStatus(id, "succeeded", 30*time.Second)
	if done["trace_id"] != traceID.String() {
		t.Fatalf("status trace_id = %v, want the request's trace %s", done["trace_id"], traceID)
	}

	// One trace: the HTTP server span, the scheduler's consumer and its
	// dispatch publish, the worker's handler span, the status projection.
	want := map[string]func(tracetest.SpanStub) bool{
		"api: POST /v1/jobs server span": func(s tracetest.SpanStub) bool {
			return s.SpanKind == trace.SpanKindServer && s.Name == "POST /v1/jobs"
		},
		"api: enqueued publish": func(s tracetest.SpanStub) bool {
			return s.Name == topics.Lifecycle(schema.EventEnqueued)+" publish"
		},
		"scheduler: enqueued receive": func(s tracetest.SpanStub) bool {
			return s.Name == topics.Lifecycle(schema.EventEnqueued)+" receive" && attr(s, "messaging.kafka.client_id") == "ferry-scheduler"
		},
		"scheduler: dispatch publish": func(s tracetest.SpanStub) bool {
			return s.Name == topics.Dispatch(schema.PoolShort)+" publish"
		},
		"worker: dispatch process": func(s tracetest.SpanStub) bool {
			return s.Name == topics.Dispatch(schema.PoolShort)+" process" && attr(s, "messaging.kafka.consumer.group") == "ferry-worker-short"
		},
		"worker: handler noop": func(s tracetest.SpanStub) bool { return s.Name == "handler noop" },
		"worker: completed publish": func(s tracetest.SpanStub) bool {
			return s.Name == topics.Lifecycle(schema.EventCompleted)+" publish"
		},
		"projection: status projection of completed": func(s tracetest.SpanStub) bool {
			return s.Name == topics.Lifecycle(schema.EventCompleted)+" process" && attr(s, "messaging.kafka.consumer.group") == "ferry-api-status"
		},
	}
	// A generous bound for a loaded machine; on failure it names the spans
	// still missing.
	testenv.Eventually(t, 30*time.Second, func() error {
		var missing []string
		got := spansOf(traceID)
		for what, match := range want {
			if !slices.ContainsFunc(got, match) {
				missing = append(missing, what)
			}
		}
		if len(missing) > 0 {
			return fmt.Errorf("trace %s lacks %v", traceID, missing)
		}
		return nil
	})
	// The handler span is a descendant of the dispatch, which descends from
	// the HTTP request: follow the parents up to the client's span.
	got := spansOf(traceID)
	byID := map[trace.SpanID]tracetest.SpanStub{}
	for _, s := range got {
		byID[s.SpanContext.SpanID()] = s
	}
	for _, s := range got {
		if s.Name != "handler noop" {
			continue
		}
		var chain []string
		for cur, ok := s, true; ok; cur, ok = byID[cur.Parent.SpanID()] {
			chain = append(chain, cur.Name)
		}
		if !slices.Contains(chain, "POST /v1/jobs") || !slices.Contains(chain, topics.Dispatch(schema.PoolShort)+" publish") {
			t.Fatalf("handler span's ancestry %v does not reach the dispatch and the HTTP request", chain)
		}
	}

	// Metrics: exercise what only shows once it happened: a retry, a dead
	// letter, a webhook delivery, an SSE stream, a job running at scrape.
	var hooks atomic.Int64
	hookSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		hooks.Add(1)
		w.WriteHeader(http.StatusNoContent)
	}))
	defer hookSrv.Close()
	if code, out := e.call("POST", "/v1/webhooks", map[string]any{"url": hookSrv.URL, "event_types": []string{"completed"}}); code != http.StatusCreated {
		t.Fatalf("create webhook: %d %v", code, out)
	}
	retried := e.submit(map[string]any{"type": "fail", "payload": map[string]any{"times": 1},
		"backoff": map[string]any{"base": "10ms", "max": "10ms"}})
	dead := e.submit(map[string]any{"type": "fail", "payload": map[string]any{"times": 9, "class": "permanent"}})
	e.waitStatus(retried, "succeeded", 30*time.Second)
	e.waitStatus(dead, "dead", 30*time.Second)
	waitFor(t, 20*time.Second, "a webhook delivery", func() bool { return hooks.Load() > 0 })

	sleeper := e.submit(map[string]any{"type": "sleep", "payload": map[string]any{"ms": 6000}})
	e.waitStatus(sleeper, "running", 20*time.Second)
	sseCtx, closeSSE := context.WithCancel(context.Background())
	defer closeSSE()
	req, _ := http.NewRequestWithContext(sseCtx, "GET", e.base+"/v1/jobs/"+sleeper+"/events", nil)
	req.Header.Set("Authorization", "Bearer "+e.key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()

	required := []string{
		"ferry_queue_ready", "ferry_queue_delayed", "ferry_queue_running", "ferry_queue_oldest_ready_age_seconds",
		"ferry_scheduler_dispatches_total", "ferry_scheduler_completions_total", "ferry_scheduler_retries_total",
		"ferry_scheduler_dead_letters_total", "ferry_scheduler_lease_expiries_total",
		"ferry_worker_handler_duration_seconds_bucket", "ferry_worker_attempts_bucket", "ferry_worker_start_latency_seconds_bucket",
		"ferry_worker_running", "ferry_worker_held",
		"ferry_kafka_consumer_lag", "ferry_sse_connections", "ferry_sse_log_events", "ferry_sse_log_horizon_seconds", "ferry_webhooks_deliveries_total",
		"http_server_request_duration_seconds_bucket", "ferry_schedule_fire_delay_seconds_bucket",
	}
	groups := []string{"ferry-scheduler", "ferry-worker-short", "ferry-worker-long", "ferry-api-status", "ferry-dlq-entries",
		"ferry-audit", "ferry-sse-log", "ferry-webhooks"}
	var names map[string]bool
	var lacking []string
	waitFor(t, 20*time.Second, "every metric on /metrics", func() bool {
		body := scrapeText(t, e.base+"/metrics")
		names = sampleNames(body)
		lacking = lacking[:0]
		for _, n := range required {
			if !names[n] {
				lacking = append(lacking, n)
			}
		}
		// Every consumer group Ferry runs reports its lag.
		for _, g := range groups {
			if !strings.Contains(body, `ferry_kafka_consumer_lag{group="`+g+`"`) {
				lacking = append(lacking, "ferry_kafka_consumer_lag{group="+g+"}")
			}
		}
		return len(lacking) == 0
	})
	if len(lacking) > 0 {
		t.Fatalf("/metrics lacks %v", lacking)
	}
	checkGolden(t, names)
}

// checkGolden keeps compose/testdata/metrics.txt equal to the Ferry metrics
// just scraped (go test -run TestObservability -update rewrites it).
func checkGolden(t *testing.T, names map[string]bool) {
	t.Helper()
	var list []string
	for n := range names {
		if ferryMetric(n) {
			list = append(list, n)
		}
	}
	slices.Sort(list)
	text := "# Metric names Ferry exposes on /metrics (Prometheus form), scraped by\n" +
		"# cmd/ferry TestObservability; regenerate with: go test ./cmd/ferry -run TestObservability -update\n" +
		strings.Join(list, "\n") + "\n"
	if *updateGolden {
		if err := os.MkdirAll(filepath.Dir(metricsGolden), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(metricsGolden, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	old, err := os.ReadFile(metricsGolden)
	if err != nil {
		t.Fatalf("%v (create it with -update)", err)
	}
	var stale []string
	for _, n := range strings.Split(string(old), "\n") {
		if n != "" && !strings.HasPrefix(n, "#") && !names[n] {
			stale = append(stale, n)
		}
		delete(names, n)
	}
	var added []string
	for _, n := range list {
		if names[n] {
			added = append(added, n)
		}
	}
	if len(stale) > 0 || len(added) > 0 {
		t.Errorf("%s is out of date (run go test ./cmd/ferry -run TestObservability -update): gone %v, new %v", metricsGolden, stale, added)
	}
}

// ferryMetric says which scraped names the golden keeps: Ferry's own, the
// HTTP server metrics (platform/httpx) and the few runtime metrics dashboards
// use; not the per-scope OTel bookkeeping nor every Go collector series.
func ferryMetric(n string) bool {
	switch n {
	case "go_goroutines", "process_resident_memory_bytes", "process_cpu_seconds_total":
		return true
	}
	return strings.HasPrefix(n, "ferry_") || strings.HasPrefix(n, "http_server_")
}

func spansOf(id trace.TraceID) []tracetest.SpanStub {
	var out []tracetest.SpanStub
	for _, s := range spans.GetSpans() {
		if s.SpanContext.TraceID() == id {
			out = append(out, s)
		}
	}
	return out
}

func attr(s tracetest.SpanStub, key attribute.Key) string {
	for _, a := range s.Attributes {
		if a.Key == key {
			return a.Value.Emit()
		}
	}
	return ""
}

func scrapeText(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b strings.Builder
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		b.WriteString(sc.Text())
		b.WriteByte('\n')
	}
	return b.String()
}

// sampleNames returns the sample names of a Prometheus text exposition.
func sampleNames(body string) map[string]bool {
	names := map[string]bool{}
	for _, line := range strings.Split(body, "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		if i := strings.IndexAny(line, "{ "); i > 0 {
			names[line[:i]] = true
		}
	}
	return names
}
