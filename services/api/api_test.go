package api_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferryhq/ferry/events/schema"
	"github.com/ferryhq/ferry/platform/httpx"
	"github.com/ferryhq/ferry/platform/jobs"
	"github.com/ferryhq/ferry/platform/service"
	"github.com/ferryhq/ferry/platform/testenv"
	"github.com/ferryhq/ferry/services/api"
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
	c := testenv.Common(t, api.Needs)
	c.AdminKey = adminKey
	b := &bundle{brokers: c.KafkaBrokers[0], deps: testenv.Open(t, c, api.Needs)}
	b.rdb = b.deps.Redis
	b.keyA, b.keyB = testenv.Tenant(t, b.deps.Postgres, "acme"), testenv.Tenant(t, b.deps.Postgres, "globex")
	svc, err := api.New(t.Context(), b.deps, cfg)
	if err != nil {
		t.Fatal(err)
	}
	b.srv = testenv.Serve(t, b.deps, svc)
	testenv.Run(t, svc)
	return b
}

type resp = testenv.Response

func (b *bundle) do(t *testing.T, key, method, path string, body any, hdr ...string) resp {
	t.Helper()
	return testenv.Call(t, b.srv.URL, key, method, path, body, hdr...)
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

// eventually polls f until it returns nil (testenv.Eventually, 20s).
func eventually(t *testing.T, f func() error) {
	t.Helper()
	testenv.Eventually(t, 20*time.Second, f)
}

// projected waits until the projection lists n jobs of the key's tenant.
func (b *bundle) projected(t *testing.T, key string, n int) {
	t.Helper()
	eventually(t, func() error {
		r := b.do(t, key, "GET", "/v1/jobs?limit=500", nil)
		if got := len(r.Body["jobs"].([]any)); got != n {
			return fmt.Errorf("projection lists %d jobs, want %d", got, n)
		}
		return nil
	})
}

// badListParams checks the list at path answers 400 invalid_parameter
// (fields.limit) to a bad limit and 400 invalid_cursor to a cursor it did
// not issue: some malformed ones and the given ones.
func (b *bundle) badListParams(t *testing.T, key, path string, cursors ...string) {
	t.Helper()
	for _, l := range []string{"0", "-1", "501", "abc", "1.5"} {
		r := b.do(t, key, "GET", path+"?limit="+l, nil)
		if r.Status != 400 || r.ErrorCode() != "invalid_parameter" || fieldsOf(r)["limit"] == nil {
			t.Errorf("%s limit=%s: %d %s", path, l, r.Status, r.Raw)
		}
	}
	cursors = append([]string{"zzz", "!!", httpx.EncodeCursor(map[string]int{"x": 1}), httpx.EncodeCursor(map[string]string{})}, cursors...)
	for _, c := range cursors {
		r := b.do(t, key, "GET", path+"?cursor="+url.QueryEscape(c), nil)
		if r.Status != 400 || r.ErrorCode() != "invalid_cursor" {
			t.Errorf("%s cursor=%s: %d %s", path, c, r.Status, r.Raw)
		}
	}
}

func TestSubmitProducesEnqueued(t *testing.T) {
	b := setup(t, api.Config{})
	r := b.do(t, b.keyA, "POST", "/v1/jobs", `{"type":"email.send","payload":{"to":"a@example.com"},"priority":2,
		"tags":["welcome"],"delay":"1h","max_attempts":3,"timeout":"30s","pool":"long","backoff":{"base":"1s","max":"1m"}}`)
	if r.Status != http.StatusAccepted {
		t.Fatalf("%d %s", r.Status, r.Raw)
	}
	id := r.Body["id"].(string)
	if !strings.HasPrefix(id, "job_") || r.Body["status"] != "scheduled" || r.Body["deduplicated"] != false ||
		r.Body["tenant_id"] != "acme" || r.Body["queue"] != "default" || r.Body["attempt"] != 1.0 {
		t.Fatalf("resource: %s", r.Raw)
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
	// Readable at once (the GET waits for the projection), and so after it.
	if g := b.do(t, b.keyA, "GET", "/v1/jobs/"+id, nil); g.Status != 200 || g.Body["type"] != "email.send" {
		t.Fatalf("get: %d %s", g.Status, g.Raw)
	}
	b.projected(t, b.keyA, 1)
	g := b.do(t, b.keyA, "GET", "/v1/jobs/"+id, nil)
	if g.Status != 200 || g.Body["status"] != "scheduled" || g.Body["payload"].(map[string]any)["to"] != "a@example.com" {
		t.Fatalf("get: %d %s", g.Status, g.Raw)
	}
	if _, ok := g.Body["deduplicated"]; ok {
		t.Fatalf("GET carries deduplicated: %s", g.Raw)
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
		{`{"type":"x","delay":"9000h"}`, 422, "run_at_too_far", "delay"}, // beyond FERRY_API_MAX_DELAY
		{`{"type":"x","delay":"145h"}`, 422, "run_at_too_far", "delay"},
		{`{"type":"x","timeout":"0s"}`, 422, "validation_failed", "timeout"},
		{`{"type":"x","pool":"huge"}`, 422, "validation_failed", "pool"},
		{`{"type":"x","max_attempts":101}`, 422, "validation_failed", "max_attempts"},
		{big, 413, "payload_too_large", "payload"},
		{`{"type":"x","payload":"` + strings.Repeat("a", 200<<10) + `"}`, 413, "payload_too_large", ""},
	}
	for _, c := range cases {
		r := b.do(t, b.keyA, "POST", "/v1/jobs", c.body)
		if r.Status != c.status || r.ErrorCode() != c.code {
			t.Errorf("%.60s: %d %s, want %d %s", c.body, r.Status, r.Raw, c.status, c.code)
			continue
		}
		if c.field != "" {
			fields, _ := r.Body["error"].(map[string]any)["fields"].(map[string]any)
			if _, ok := fields[c.field]; !ok {
				t.Errorf("%.60s: fields %v lack %s", c.body, fields, c.field)
			}
		}
		if r.Body["error"].(map[string]any)["request_id"] == "" {
			t.Errorf("no request id: %s", r.Raw)
		}
	}
	if r := b.do(t, "nope", "POST", "/v1/jobs", `{"type":"x"}`); r.Status != 401 {
		t.Fatalf("bad key: %d", r.Status)
	}
}

func TestBatch(t *testing.T) {
	b := setup(t, api.Config{MaxBatchJobs: 5})
	runAt := time.Now().Add(48 * time.Hour).UTC().Format(time.RFC3339)
	body := `{"jobs":[{"type":"a"},{"type":"b","priority":42},{"type":"c","run_at":"` + runAt + `"},{"type":"d","bogus":1}]}`
	r := b.do(t, b.keyA, "POST", "/v1/jobs/batch", body, api.IdempotencyKeyHeader, "batch-1")
	if r.Status != http.StatusAccepted {
		t.Fatalf("%d %s", r.Status, r.Raw)
	}
	jobs := r.Body["jobs"].([]any)
	if len(jobs) != 4 {
		t.Fatalf("%s", r.Raw)
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
	if r.Status != http.StatusOK {
		t.Fatalf("retry: %d %s", r.Status, r.Raw)
	}
	jobs = r.Body["jobs"].([]any)
	if item(0)["id"] != id0 || item(0)["deduplicated"] != true || item(2)["id"] != id2 {
		t.Fatalf("retry: %s", r.Raw)
	}
	// Whole-request errors.
	if r := b.do(t, b.keyA, "POST", "/v1/jobs/batch", `{"jobs":[]}`); r.Status != 422 {
		t.Fatalf("empty: %d", r.Status)
	}
	if r := b.do(t, b.keyA, "POST", "/v1/jobs/batch", `{"jobs":[{},{},{},{},{},{}]}`); r.Status != 413 || r.ErrorCode() != "batch_too_large" {
		t.Fatalf("too many: %d %s", r.Status, r.Raw)
	}
	if r := b.do(t, b.keyA, "POST", "/v1/jobs/batch", `{"jobs":[{"priority":1}]}`); r.Status != 422 || r.ErrorCode() != "batch_rejected" {
		t.Fatalf("all bad: %d %s", r.Status, r.Raw)
	}
	if r := b.do(t, b.keyA, "POST", "/v1/jobs/batch", `{"items":[]}`); r.Status != 400 || r.ErrorCode() != "unknown_field" {
		t.Fatalf("unknown: %d %s", r.Status, r.Raw)
	}
}

func TestIdempotency(t *testing.T) {
	b := setup(t, api.Config{})
	body := `{"type":"report.build","payload":{"month":"2026-04"}}`
	hdr := []string{api.IdempotencyKeyHeader, "k-1"}
	first := b.do(t, b.keyA, "POST", "/v1/jobs", body, hdr...)
	if first.Status != 202 {
		t.Fatalf("%d %s", first.Status, first.Raw)
	}
	id := first.Body["id"]
	// Same body (formatted differently): the original job.
	again := b.do(t, b.keyA, "POST", "/v1/jobs", `{"payload": {"month": "2026-04"}, "type": "report.build"}`, hdr...)
	if again.Status != 200 || again.Body["id"] != id || again.Body["deduplicated"] != true {
		t.Fatalf("dedup: %d %s", again.Status, again.Raw)
	}
	// Another body: 422.
	if r := b.do(t, b.keyA, "POST", "/v1/jobs", `{"type":"report.build"}`, hdr...); r.Status != 422 || r.ErrorCode() != "idempotency_key_reused" {
		t.Fatalf("reuse: %d %s", r.Status, r.Raw)
	}
	// Another tenant's identical key is its own.
	if r := b.do(t, b.keyB, "POST", "/v1/jobs", body, hdr...); r.Status != 202 || r.Body["id"] == id {
		t.Fatalf("other tenant: %d %s", r.Status, r.Raw)
	}
	// In flight: a request holding the key that has not finished.
	var req jobs.Request
	_ = json.Unmarshal([]byte(body), &req)
	ctx := context.Background()
	if err := b.rdb.Set(ctx, "ferry:idem:acme:k-2", "p:"+jobs.Hash(req), time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if r := b.do(t, b.keyA, "POST", "/v1/jobs", body, api.IdempotencyKeyHeader, "k-2"); r.Status != 409 || r.ErrorCode() != "idempotency_request_in_flight" {
		t.Fatalf("in flight: %d %s", r.Status, r.Raw)
	}
	// Concurrent duplicates: one job, the others deduplicated or told to wait.
	var wg sync.WaitGroup
	statuses := make([]int, 16)
	ids := make([]any, 16)
	for i := range statuses {
		wg.Go(func() {
			r := b.do(t, b.keyA, "POST", "/v1/jobs", body, api.IdempotencyKeyHeader, "k-3")
			statuses[i], ids[i] = r.Status, r.Body["id"]
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
	if r.Status != 200 || r.Body["id"] != id || r.Body["deduplicated"] != true || r.Body["type"] != "report.build" {
		t.Fatalf("after flush: %d %s", r.Status, r.Raw)
	}
	if r := b.do(t, b.keyA, "POST", "/v1/jobs", `{"type":"other"}`, hdr...); r.Status != 422 || r.ErrorCode() != "idempotency_key_reused" {
		t.Fatalf("after flush, reuse: %d %s", r.Status, r.Raw)
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
		if r.Status != 202 {
			t.Fatalf("%d %s", r.Status, r.Raw)
		}
		want = append([]string{r.Body["id"].(string)}, want...) // newest first
	}
	b.do(t, b.keyB, "POST", "/v1/jobs", `{"type":"t.even"}`)
	b.projected(t, b.keyA, 7)
	ids := func(r resp) []string {
		var out []string
		for _, j := range r.Body["jobs"].([]any) {
			out = append(out, j.(map[string]any)["id"].(string))
		}
		return out
	}
	var got []string
	path := "/v1/jobs?limit=3"
	for pages := 0; ; pages++ {
		r := b.do(t, b.keyA, "GET", path, nil)
		if r.Status != 200 || pages > 3 {
			t.Fatalf("%d %s", r.Status, r.Raw)
		}
		got = append(got, ids(r)...)
		next, ok := r.Body["next_cursor"].(string)
		if !ok {
			t.Fatalf("page without next_cursor: %s", r.Raw)
		}
		if next == "" {
			break
		}
		path = "/v1/jobs?limit=3&cursor=" + next
	}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("pages:\n got %v\nwant %v", got, want)
	}
	// A page that holds the last job is the last page.
	if r := b.do(t, b.keyA, "GET", "/v1/jobs?limit=7", nil); r.Status != 200 || len(ids(r)) != 7 || r.Body["next_cursor"] != "" {
		t.Fatalf("full last page: %d %s", r.Status, r.Raw)
	}
	count := func(q string) int {
		r := b.do(t, b.keyA, "GET", "/v1/jobs?"+q, nil)
		if r.Status != 200 {
			t.Fatalf("%s: %d %s", q, r.Status, r.Raw)
		}
		return len(r.Body["jobs"].([]any))
	}
	for q, n := range map[string]int{"type=t.odd": 3, "queue=bulk": 3, "tag=n4": 1, "tag=all&tag=n5": 1, "tag=all": 7,
		"status=queued": 6, "status=scheduled": 1, "status=running": 0, "type=t.even&status=scheduled": 1} {
		if got := count(q); got != n {
			t.Errorf("%s: %d jobs, want %d", q, got, n)
		}
	}
	if r := b.do(t, b.keyA, "GET", "/v1/jobs?status=weird", nil); r.Status != 422 {
		t.Errorf("bad status: %d", r.Status)
	}
	listCreatedRange(t, b, want, ids)
	b.badListParams(t, b.keyA, "/v1/jobs", httpx.Keyset{ID: want[0]}.String())
}

// listCreatedRange: created_from (inclusive) and created_to (exclusive)
// bound the creation time, and page with the cursor. want is every job of
// the tenant, newest first.
func listCreatedRange(t *testing.T, b *bundle, want []string, ids func(resp) []string) {
	t.Helper()
	all := b.do(t, b.keyA, "GET", "/v1/jobs?limit=100", nil).Body["jobs"].([]any)
	at := func(i int) string { return url.QueryEscape(all[i].(map[string]any)["created_at"].(string)) }
	window := "/v1/jobs?created_from=" + at(5) + "&created_to=" + at(1)
	first := b.do(t, b.keyA, "GET", window+"&limit=2", nil)
	second := b.do(t, b.keyA, "GET", window+"&limit=2&cursor="+url.QueryEscape(first.Body["next_cursor"].(string)), nil)
	if got, exp := strings.Join(append(ids(first), ids(second)...), ","), strings.Join(want[2:6], ","); got != exp {
		t.Errorf("jobs created in [%s, %s): got %s, want %s", at(5), at(1), got, exp)
	}
	if second.Body["next_cursor"] != "" {
		t.Errorf("the window's second page is not its last: %s", second.Raw)
	}
	for q, field := range map[string]string{"created_from=yesterday": "created_from", "created_to=2025-13-01": "created_to",
		"created_from=" + at(1) + "&created_to=" + at(5): "created_to"} {
		r := b.do(t, b.keyA, "GET", "/v1/jobs?"+q, nil)
		e, _ := r.Body["error"].(map[string]any)
		fields, _ := e["fields"].(map[string]any)
		if r.Status != 400 || r.ErrorCode() != "invalid_parameter" || fields[field] == nil {
			t.Errorf("%s: %d %s, want 400 invalid_parameter on %s", q, r.Status, r.Raw, field)
		}
	}
}

func TestCancelAndTenantIsolation(t *testing.T) {
	b := setup(t, api.Config{})
	r := b.do(t, b.keyA, "POST", "/v1/jobs", `{"type":"slow"}`)
	id := r.Body["id"].(string)
	// Another tenant sees nothing.
	if r := b.do(t, b.keyB, "GET", "/v1/jobs/"+id, nil); r.Status != 404 || r.ErrorCode() != "not_found" {
		t.Fatalf("other tenant get: %d %s", r.Status, r.Raw)
	}
	if r := b.do(t, b.keyB, "POST", "/v1/jobs/"+id+"/cancel", nil); r.Status != 404 {
		t.Fatalf("other tenant cancel: %d %s", r.Status, r.Raw)
	}
	b.projected(t, b.keyA, 1)
	if r := b.do(t, b.keyB, "GET", "/v1/jobs/"+id, nil); r.Status != 404 {
		t.Fatalf("other tenant get after projection: %d", r.Status)
	}
	if r := b.do(t, b.keyB, "GET", "/v1/jobs", nil); len(r.Body["jobs"].([]any)) != 0 {
		t.Fatalf("other tenant list: %s", r.Raw)
	}
	if r := b.do(t, b.keyA, "GET", "/v1/jobs/job_nope", nil); r.Status != 404 {
		t.Fatalf("missing: %d", r.Status)
	}
	c := b.do(t, b.keyA, "POST", "/v1/jobs/"+id+"/cancel", nil)
	if c.Status != 202 || c.Body["cancel_requested"] != true || c.Body["job"].(map[string]any)["id"] != id {
		t.Fatalf("cancel: %d %s", c.Status, c.Raw)
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
		if r := b.do(t, b.keyA, "GET", "/v1/jobs/"+id, nil); r.Body["status"] != "cancelled" || r.Body["finished_at"] == nil {
			return errors.New("not cancelled yet: " + string(r.Raw))
		}
		return nil
	})
	if r := b.do(t, b.keyA, "POST", "/v1/jobs/"+id+"/cancel", nil); r.Status != 409 || r.ErrorCode() != "job_finished" || r.Body["job"] == nil {
		t.Fatalf("cancel finished: %d %s", r.Status, r.Raw)
	}
}

// TestProjectionLifecycle drives a job through worker events in a shuffled
// order over Kafka and checks the resource.
func TestProjectionLifecycle(t *testing.T) {
	b := setup(t, api.Config{})
	r := b.do(t, b.keyA, "POST", "/v1/jobs", `{"type":"x","payload":{"n":1}}`)
	id := r.Body["id"].(string)
	ref := func(a int) schema.JobRef { return schema.JobRef{JobID: id, TenantID: "acme", Attempt: a} }
	now := time.Now().UTC()
	evs := []schema.Lifecycle{
		schema.Completed{JobRef: ref(1), WorkerID: "w1", Result: json.RawMessage(`{"ok":1}`), StartedAt: now, FinishedAt: now.Add(time.Second)},
		schema.Progress{JobRef: ref(1), WorkerID: "w1", Percent: 40, Message: "half", At: now.Add(time.Millisecond)},
		schema.Started{JobRef: ref(1), WorkerID: "w1", StartedAt: now},
	}
	b.produce(t, evs...)
	eventually(t, func() error {
		g := b.do(t, b.keyA, "GET", "/v1/jobs/"+id, nil)
		if g.Body["status"] != "succeeded" || g.Body["worker_id"] != nil || g.Body["type"] != "x" || g.Body["started_at"] == nil ||
			g.Body["result"] == nil || g.Body["progress"] == nil {
			return errors.New(string(g.Raw))
		}
		return nil
	})
}
