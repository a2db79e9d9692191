package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferryhq/ferry/events/schema"
	"github.com/ferryhq/ferry/platform/auth"
	"github.com/ferryhq/ferry/platform/config"
	"github.com/ferryhq/ferry/platform/httpx"
	"github.com/ferryhq/ferry/platform/service"
	"github.com/ferryhq/ferry/platform/testenv"
	"github.com/ferryhq/ferry/services/api"
	"github.com/ferryhq/ferry/services/api/internal/submit"
)

// adminKey is the operator key of the test services.
const adminKey = "admin-test-key"

type bundle struct {
	srv     *httptest.Server
	deps    *service.Deps
	rdb     *redis.Client
	brokers string
	keyA    string // tenant acme
	keyB    string // tenant globex
}

func setup(t *testing.T, cfg api.Config) *bundle {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	b := &bundle{brokers: testenv.Kafka(t), keyA: "fry_test_acme_" + t.Name(), keyB: "fry_test_globex_" + t.Name()}
	common := config.Common{
		KafkaBrokers: []string{b.brokers}, TopicPrefix: "ferry.", TopicPartitions: 3,
		PostgresURL: testenv.Postgres(t), PostgresMaxConns: 8, RedisURL: testenv.Redis(t),
		ShutdownTimeout: 5 * time.Second, AdminKey: adminKey,
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	deps, err := service.Open(ctx, common, log, api.Needs)
	if err != nil {
		t.Fatal(err)
	}
	b.deps, b.rdb = deps, deps.Redis
	for tenant, key := range map[string]string{"acme": b.keyA, "globex": b.keyB} {
		if err := auth.EnsureTenant(ctx, deps.Postgres, tenant, tenant, key); err != nil {
			t.Fatal(err)
		}
	}
	svc, err := api.New(deps, cfg)
	if err != nil {
		t.Fatal(err)
	}
	router := httpx.NewRouter("api", deps.Checks(), nil)
	svc.Routes(router)
	b.srv = httptest.NewServer(router)
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	t.Cleanup(func() {
		b.srv.Close()
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
		deps.Close()
	})
	return b
}

type resp struct {
	status int
	body   map[string]any
	raw    []byte
}

func (b *bundle) do(t *testing.T, key, method, path string, body any, hdr ...string) resp {
	t.Helper()
	var rd io.Reader
	switch v := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(v)
	default:
		j, _ := json.Marshal(v)
		rd = bytes.NewReader(j)
	}
	req, _ := http.NewRequest(method, b.srv.URL+path, rd)
	req.Header.Set("Authorization", "Bearer "+key)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	r := resp{status: res.StatusCode, raw: raw}
	_ = json.Unmarshal(raw, &r.body)
	return r
}

func errCode(r resp) string {
	e, _ := r.body["error"].(map[string]any)
	c, _ := e["code"].(string)
	return c
}

// records reads topic from the start until want records match or the time is up.
func (b *bundle) records(t *testing.T, topic string, want int, match func(*kgo.Record) bool) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.brokers), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out []*kgo.Record
	for len(out) < want {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("found %d of %d records on %s", len(out), want, topic)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if match(r) {
				out = append(out, r)
			}
		})
	}
	return out
}

func byKey(id string) func(*kgo.Record) bool {
	return func(r *kgo.Record) bool { return string(r.Key) == id }
}

// eventually polls f until it returns nil.
func eventually(t *testing.T, f func() error) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// projected waits until the projection lists n jobs of the key's tenant.
func (b *bundle) projected(t *testing.T, key string, n int) {
	t.Helper()
	eventually(t, func() error {
		r := b.do(t, key, "GET", "/v1/jobs?limit=500", nil)
		if got := len(r.body["jobs"].([]any)); got != n {
			return fmt.Errorf("projection lists %d jobs, want %d", got, n)
		}
		return nil
	})
}

func TestSubmitProducesEnqueued(t *testing.T) {
	b := setup(t, api.Config{})
	r := b.do(t, b.keyA, "POST", "/v1/jobs", `{"type":"email.send","payload":{"to":"a@example.com"},"priority":2,
		"tags":["welcome"],"delay":"1h","max_attempts":3,"timeout":"30s","pool":"long","backoff":{"base":"1s","max":"1m"}}`)
	if r.status != http.StatusAccepted {
		t.Fatalf("%d %s", r.status, r.raw)
	}
	id := r.body["id"].(string)
	if !strings.HasPrefix(id, "job_") || r.body["status"] != "scheduled" || r.body["deduplicated"] != false ||
		r.body["tenant_id"] != "acme" || r.body["queue"] != "default" || r.body["attempt"] != 1.0 {
		t.Fatalf("resource: %s", r.raw)
	}
	rec := b.records(t, "ferry.jobs.enqueued", 1, byKey(id))[0]
	for k, want := range map[string]string{schema.HeaderType: "ferry.job.enqueued.v1", schema.HeaderTenant: "acme",
		schema.HeaderSubject: id, schema.HeaderSource: "ferry/api", schema.HeaderContentType: "application/json"} {
		if got, _ := schema.Header(rec, k); got != want {
			t.Errorf("header %s = %q, want %q", k, got, want)
		}
	}
	ev, err := schema.Decode(rec)
	if err != nil {
		t.Fatal(err)
	}
	enq := ev.Data.(schema.Enqueued)
	if enq.Attempt != 1 || enq.Reason != schema.ReasonSubmitted || !strings.HasPrefix(enq.Actor, "key_") ||
		enq.Job.Priority != 2 || enq.Job.Pool != "long" || enq.Job.Timeout.D() != 30*time.Second ||
		enq.Job.Backoff.Max.D() != time.Minute || enq.RunAt.Sub(enq.CreatedAt) != time.Hour || string(enq.Job.Payload) != `{"to":"a@example.com"}` {
		t.Fatalf("enqueued: %+v", enq)
	}
	// Readable at once (submitted cache), then from the projection.
	if g := b.do(t, b.keyA, "GET", "/v1/jobs/"+id, nil); g.status != 200 || g.body["type"] != "email.send" {
		t.Fatalf("get: %d %s", g.status, g.raw)
	}
	b.projected(t, b.keyA, 1)
	g := b.do(t, b.keyA, "GET", "/v1/jobs/"+id, nil)
	if g.status != 200 || g.body["status"] != "scheduled" || g.body["payload"].(map[string]any)["to"] != "a@example.com" {
		t.Fatalf("get: %d %s", g.status, g.raw)
	}
	if _, ok := g.body["deduplicated"]; ok {
		t.Fatalf("GET carries deduplicated: %s", g.raw)
	}
}

func TestValidation(t *testing.T) {
	b := setup(t, api.Config{MaxPayloadBytes: 1024})
	big := `{"type":"x","payload":"` + strings.Repeat("a", 2000) + `"}`
	cases := []struct {
		body   string
		status int
		code   string
		field  string
	}{
		{`{"type":"x","colour":"red"}`, 400, "unknown_field", "colour"},
		{`{"type":`, 400, "invalid_json", ""},
		{`{"type":"x","priority":"high"}`, 400, "invalid_json", "priority"},
		{`{"type":"x","priority":10}`, 422, "validation_failed", "priority"},
		{`{"priority":1}`, 422, "validation_failed", "type"},
		{`{"type":"x","queue":"Not Valid"}`, 422, "validation_failed", "queue"},
		{`{"type":"x","delay":"1s","run_at":"2030-01-01T00:00:00Z"}`, 422, "validation_failed", "run_at"},
		{`{"type":"x","run_at":"2000-01-01T00:00:00Z"}`, 422, "validation_failed", "run_at"},
		{`{"type":"x","delay":"9000h"}`, 422, "validation_failed", "delay"},
		{`{"type":"x","timeout":"0s"}`, 422, "validation_failed", "timeout"},
		{`{"type":"x","pool":"huge"}`, 422, "validation_failed", "pool"},
		{`{"type":"x","max_attempts":101}`, 422, "validation_failed", "max_attempts"},
		{big, 413, "payload_too_large", "payload"},
		{`{"type":"x","payload":"` + strings.Repeat("a", 200<<10) + `"}`, 413, "payload_too_large", ""},
	}
	for _, c := range cases {
		r := b.do(t, b.keyA, "POST", "/v1/jobs", c.body)
		if r.status != c.status || errCode(r) != c.code {
			t.Errorf("%.60s: %d %s, want %d %s", c.body, r.status, r.raw, c.status, c.code)
			continue
		}
		if c.field != "" {
			fields, _ := r.body["error"].(map[string]any)["fields"].(map[string]any)
			if _, ok := fields[c.field]; !ok {
				t.Errorf("%.60s: fields %v lack %s", c.body, fields, c.field)
			}
		}
		if r.body["error"].(map[string]any)["request_id"] == "" {
			t.Errorf("no request id: %s", r.raw)
		}
	}
	if r := b.do(t, "nope", "POST", "/v1/jobs", `{"type":"x"}`); r.status != 401 {
		t.Fatalf("bad key: %d", r.status)
	}
}

func TestBatch(t *testing.T) {
	b := setup(t, api.Config{MaxBatchJobs: 5})
	runAt := time.Now().Add(48 * time.Hour).UTC().Format(time.RFC3339)
	body := `{"jobs":[{"type":"a"},{"type":"b","priority":42},{"type":"c","run_at":"` + runAt + `"},{"type":"d","bogus":1}]}`
	r := b.do(t, b.keyA, "POST", "/v1/jobs/batch", body, api.IdempotencyKeyHeader, "batch-1")
	if r.status != http.StatusAccepted {
		t.Fatalf("%d %s", r.status, r.raw)
	}
	jobs := r.body["jobs"].([]any)
	if len(jobs) != 4 {
		t.Fatalf("%s", r.raw)
	}
	item := func(i int) map[string]any { return jobs[i].(map[string]any) }
	if item(0)["type"] != "a" || item(0)["status"] != "queued" {
		t.Fatalf("item 0: %v", item(0))
	}
	if e := item(1)["error"].(map[string]any); e["code"] != "validation_failed" || e["status"] != 422.0 {
		t.Fatalf("item 1: %v", item(1))
	}
	if item(2)["type"] != "c" || item(2)["status"] != "scheduled" {
		t.Fatalf("item 2: %v", item(2))
	}
	if e := item(3)["error"].(map[string]any); e["code"] != "unknown_field" {
		t.Fatalf("item 3: %v", item(3))
	}
	id0, id2 := item(0)["id"].(string), item(2)["id"].(string)
	recs := b.records(t, "ferry.jobs.enqueued", 2, func(r *kgo.Record) bool { return string(r.Key) == id0 || string(r.Key) == id2 })
	for _, rec := range recs {
		ev, _ := schema.Decode(rec)
		enq := ev.Data.(schema.Enqueued)
		if enq.IdempotencyKey != "batch-1#0" && enq.IdempotencyKey != "batch-1#2" {
			t.Fatalf("item key %q", enq.IdempotencyKey)
		}
	}
	// The retry answers the same jobs, deduplicated.
	r = b.do(t, b.keyA, "POST", "/v1/jobs/batch", body, api.IdempotencyKeyHeader, "batch-1")
	if r.status != http.StatusOK {
		t.Fatalf("retry: %d %s", r.status, r.raw)
	}
	jobs = r.body["jobs"].([]any)
	if item(0)["id"] != id0 || item(0)["deduplicated"] != true || item(2)["id"] != id2 {
		t.Fatalf("retry: %s", r.raw)
	}
	// Whole-request errors.
	if r := b.do(t, b.keyA, "POST", "/v1/jobs/batch", `{"jobs":[]}`); r.status != 422 {
		t.Fatalf("empty: %d", r.status)
	}
	if r := b.do(t, b.keyA, "POST", "/v1/jobs/batch", `{"jobs":[{},{},{},{},{},{}]}`); r.status != 413 || errCode(r) != "batch_too_large" {
		t.Fatalf("too many: %d %s", r.status, r.raw)
	}
	if r := b.do(t, b.keyA, "POST", "/v1/jobs/batch", `{"jobs":[{"priority":1}]}`); r.status != 422 || errCode(r) != "batch_rejected" {
		t.Fatalf("all bad: %d %s", r.status, r.raw)
	}
	if r := b.do(t, b.keyA, "POST", "/v1/jobs/batch", `{"items":[]}`); r.status != 400 || errCode(r) != "unknown_field" {
		t.Fatalf("unknown: %d %s", r.status, r.raw)
	}
}

func TestIdempotency(t *testing.T) {
	b := setup(t, api.Config{})
	body := `{"type":"report.build","payload":{"month":"2026-04"}}`
	hdr := []string{api.IdempotencyKeyHeader, "k-1"}
	first := b.do(t, b.keyA, "POST", "/v1/jobs", body, hdr...)
	if first.status != 202 {
		t.Fatalf("%d %s", first.status, first.raw)
	}
	id := first.body["id"]
	// Same body (formatted differently): the original job.
	again := b.do(t, b.keyA, "POST", "/v1/jobs", `{"payload": {"month": "2026-04"}, "type": "report.build"}`, hdr...)
	if again.status != 200 || again.body["id"] != id || again.body["deduplicated"] != true {
		t.Fatalf("dedup: %d %s", again.status, again.raw)
	}
	// Another body: 422.
	if r := b.do(t, b.keyA, "POST", "/v1/jobs", `{"type":"report.build"}`, hdr...); r.status != 422 || errCode(r) != "idempotency_key_reused" {
		t.Fatalf("reuse: %d %s", r.status, r.raw)
	}
	// Another tenant's identical key is its own.
	if r := b.do(t, b.keyB, "POST", "/v1/jobs", body, hdr...); r.status != 202 || r.body["id"] == id {
		t.Fatalf("other tenant: %d %s", r.status, r.raw)
	}
	// In flight: a request holding the key that has not finished.
	var req submit.Request
	_ = json.Unmarshal([]byte(body), &req)
	ctx := context.Background()
	if err := b.rdb.Set(ctx, "ferry:idem:acme:k-2", "p:"+submit.Hash(req), time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if r := b.do(t, b.keyA, "POST", "/v1/jobs", body, api.IdempotencyKeyHeader, "k-2"); r.status != 409 || errCode(r) != "idempotency_request_in_flight" {
		t.Fatalf("in flight: %d %s", r.status, r.raw)
	}
	// Concurrent duplicates: one job, the others deduplicated or told to wait.
	var wg sync.WaitGroup
	statuses := make([]int, 16)
	ids := make([]any, 16)
	for i := range statuses {
		wg.Go(func() {
			r := b.do(t, b.keyA, "POST", "/v1/jobs", body, api.IdempotencyKeyHeader, "k-3")
			statuses[i], ids[i] = r.status, r.body["id"]
		})
	}
	wg.Wait()
	created, var3 := 0, any(nil)
	for i, s := range statuses {
		switch s {
		case 202:
			created++
			var3 = ids[i]
		case 200, 409:
		default:
			t.Fatalf("concurrent: status %d", s)
		}
	}
	if created != 1 {
		t.Fatalf("concurrent: %d jobs created (%v)", created, statuses)
	}
	for i, s := range statuses {
		if s == 200 && ids[i] != var3 {
			t.Fatalf("concurrent: deduplicated to %v, want %v", ids[i], var3)
		}
	}
	// Survives losing Redis once the projection has the job.
	b.projected(t, b.keyA, 2)
	if err := b.rdb.FlushDB(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	r := b.do(t, b.keyA, "POST", "/v1/jobs", body, hdr...)
	if r.status != 200 || r.body["id"] != id || r.body["deduplicated"] != true || r.body["type"] != "report.build" {
		t.Fatalf("after flush: %d %s", r.status, r.raw)
	}
	if r := b.do(t, b.keyA, "POST", "/v1/jobs", `{"type":"other"}`, hdr...); r.status != 422 || errCode(r) != "idempotency_key_reused" {
		t.Fatalf("after flush, reuse: %d %s", r.status, r.raw)
	}
	// Only the jobs above were produced for acme.
	b.projected(t, b.keyA, 2)
}

func TestListFiltersAndCursor(t *testing.T) {
	b := setup(t, api.Config{})
	var want []string
	for i := range 7 {
		typ, queue := "t.even", "default"
		if i%2 == 1 {
			typ, queue = "t.odd", "bulk"
		}
		body := fmt.Sprintf(`{"type":%q,"queue":%q,"tags":["n%d","all"]}`, typ, queue, i)
		if i == 6 {
			body = `{"type":"t.even","delay":"1h","tags":["n6","all"]}`
		}
		r := b.do(t, b.keyA, "POST", "/v1/jobs", body)
		if r.status != 202 {
			t.Fatalf("%d %s", r.status, r.raw)
		}
		want = append([]string{r.body["id"].(string)}, want...) // newest first
	}
	b.do(t, b.keyB, "POST", "/v1/jobs", `{"type":"t.even"}`)
	b.projected(t, b.keyA, 7)
	ids := func(r resp) []string {
		var out []string
		for _, j := range r.body["jobs"].([]any) {
			out = append(out, j.(map[string]any)["id"].(string))
		}
		return out
	}
	var got []string
	path := "/v1/jobs?limit=3"
	for pages := 0; ; pages++ {
		r := b.do(t, b.keyA, "GET", path, nil)
		if r.status != 200 || pages > 3 {
			t.Fatalf("%d %s", r.status, r.raw)
		}
		got = append(got, ids(r)...)
		next, _ := r.body["next_cursor"].(string)
		if next == "" {
			break
		}
		path = "/v1/jobs?limit=3&cursor=" + next
	}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("pages:\n got %v\nwant %v", got, want)
	}
	count := func(q string) int {
		r := b.do(t, b.keyA, "GET", "/v1/jobs?"+q, nil)
		if r.status != 200 {
			t.Fatalf("%s: %d %s", q, r.status, r.raw)
		}
		return len(r.body["jobs"].([]any))
	}
	for q, n := range map[string]int{"type=t.odd": 3, "queue=bulk": 3, "tag=n4": 1, "tag=all&tag=n5": 1, "tag=all": 7,
		"status=queued": 6, "status=scheduled": 1, "status=running": 0, "type=t.even&status=scheduled": 1} {
		if got := count(q); got != n {
			t.Errorf("%s: %d jobs, want %d", q, got, n)
		}
	}
	if r := b.do(t, b.keyA, "GET", "/v1/jobs?status=weird", nil); r.status != 422 {
		t.Errorf("bad status: %d", r.status)
	}
	if r := b.do(t, b.keyA, "GET", "/v1/jobs?limit=501", nil); r.status != 422 {
		t.Errorf("bad limit: %d", r.status)
	}
	if r := b.do(t, b.keyA, "GET", "/v1/jobs?cursor=zzz", nil); r.status != 400 || errCode(r) != "invalid_cursor" {
		t.Errorf("bad cursor: %d %s", r.status, r.raw)
	}
}

func TestCancelAndTenantIsolation(t *testing.T) {
	b := setup(t, api.Config{})
	r := b.do(t, b.keyA, "POST", "/v1/jobs", `{"type":"slow"}`)
	id := r.body["id"].(string)
	// Another tenant sees nothing.
	if r := b.do(t, b.keyB, "GET", "/v1/jobs/"+id, nil); r.status != 404 || errCode(r) != "not_found" {
		t.Fatalf("other tenant get: %d %s", r.status, r.raw)
	}
	if r := b.do(t, b.keyB, "POST", "/v1/jobs/"+id+"/cancel", nil); r.status != 404 {
		t.Fatalf("other tenant cancel: %d %s", r.status, r.raw)
	}
	b.projected(t, b.keyA, 1)
	if r := b.do(t, b.keyB, "GET", "/v1/jobs/"+id, nil); r.status != 404 {
		t.Fatalf("other tenant get after projection: %d", r.status)
	}
	if r := b.do(t, b.keyB, "GET", "/v1/jobs", nil); len(r.body["jobs"].([]any)) != 0 {
		t.Fatalf("other tenant list: %s", r.raw)
	}
	if r := b.do(t, b.keyA, "GET", "/v1/jobs/job_nope", nil); r.status != 404 {
		t.Fatalf("missing: %d", r.status)
	}
	c := b.do(t, b.keyA, "POST", "/v1/jobs/"+id+"/cancel", nil)
	if c.status != 202 || c.body["cancel_requested"] != true || c.body["job"].(map[string]any)["id"] != id {
		t.Fatalf("cancel: %d %s", c.status, c.raw)
	}
	rec := b.records(t, "ferry.jobs.cancelled", 1, byKey(id))[0]
	ev, err := schema.Decode(rec)
	if err != nil {
		t.Fatal(err)
	}
	if cn := ev.Data.(schema.Cancelled); cn.Reason != "user" || !strings.HasPrefix(cn.Actor, "key_") || cn.Attempt != 1 || cn.TenantID != "acme" {
		t.Fatalf("cancelled: %+v", cn)
	}
	eventually(t, func() error {
		if r := b.do(t, b.keyA, "GET", "/v1/jobs/"+id, nil); r.body["status"] != "cancelled" || r.body["finished_at"] == nil {
			return errors.New("not cancelled yet: " + string(r.raw))
		}
		return nil
	})
	if r := b.do(t, b.keyA, "POST", "/v1/jobs/"+id+"/cancel", nil); r.status != 409 || errCode(r) != "job_finished" || r.body["job"] == nil {
		t.Fatalf("cancel finished: %d %s", r.status, r.raw)
	}
}

// TestProjectionLifecycle drives a job through worker events in a shuffled
// order over Kafka and checks the resource.
func TestProjectionLifecycle(t *testing.T) {
	b := setup(t, api.Config{})
	r := b.do(t, b.keyA, "POST", "/v1/jobs", `{"type":"x","payload":{"n":1}}`)
	id := r.body["id"].(string)
	ref := func(a int) schema.JobRef { return schema.JobRef{JobID: id, TenantID: "acme", Attempt: a} }
	now := time.Now().UTC()
	evs := []schema.Lifecycle{
		schema.Completed{JobRef: ref(1), WorkerID: "w1", Result: json.RawMessage(`{"ok":1}`), StartedAt: now, FinishedAt: now.Add(time.Second)},
		schema.Progress{JobRef: ref(1), WorkerID: "w1", Percent: 40, Message: "half", At: now.Add(time.Millisecond)},
		schema.Started{JobRef: ref(1), WorkerID: "w1", StartedAt: now},
	}
	var recs []*kgo.Record
	for _, e := range evs {
		rec, err := schema.NewRecord(b.deps.Topics.Lifecycle(e.EventType()), "test", e)
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, rec)
	}
	if err := b.deps.Kafka.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	eventually(t, func() error {
		g := b.do(t, b.keyA, "GET", "/v1/jobs/"+id, nil)
		if g.body["status"] != "succeeded" || g.body["worker_id"] != nil || g.body["type"] != "x" || g.body["started_at"] == nil ||
			g.body["result"] == nil || g.body["progress"] == nil {
			return errors.New(string(g.raw))
		}
		return nil
	})
}
