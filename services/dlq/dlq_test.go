package dlq_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/goleak"

	"github.com/ferryhq/ferry/events/schema"
	"github.com/ferryhq/ferry/platform/kafkax"
	"github.com/ferryhq/ferry/platform/service"
	"github.com/ferryhq/ferry/platform/testenv"
	"github.com/ferryhq/ferry/services/dlq"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
	)
}

type bundle struct {
	srv     *httptest.Server
	deps    *service.Deps
	brokers string
	prod    *kgo.Client
	keyA    string // tenant acme
	keyB    string // tenant globex
}

func setup(t *testing.T, cfg dlq.Config) *bundle {
	t.Helper()
	c := testenv.Common(t, dlq.Needs)
	b := &bundle{brokers: c.KafkaBrokers[0], deps: testenv.Open(t, c, dlq.Needs)}
	b.keyA, b.keyB = testenv.Tenant(t, b.deps.Postgres, "acme"), testenv.Tenant(t, b.deps.Postgres, "globex")
	prod, err := kafkax.NewClient(kafkax.Config{Brokers: []string{b.brokers}, ClientID: "test-scheduler"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(prod.Close)
	b.prod = prod
	svc, err := dlq.New(t.Context(), b.deps, cfg)
	if err != nil {
		t.Fatal(err)
	}
	b.srv = testenv.Serve(t, b.deps, svc)
	testenv.Run(t, svc)
	return b
}

type resp = testenv.Response

func (b *bundle) do(t *testing.T, key, method, path string, body any) resp {
	t.Helper()
	return testenv.Call(t, b.srv.URL, key, method, path, body)
}

func eventually(t *testing.T, f func() error) {
	t.Helper()
	testenv.Eventually(t, 20*time.Second, f)
}

var base = time.Date(2031, 3, 1, 12, 0, 0, 0, time.UTC)

// dead is a dlq event of tenant's job id after attempts attempts.
func dead(tenant, id string, attempts int, typ, queue string, class schema.ErrorClass, msg string, deadAt time.Time) schema.DeadLettered {
	var hist []schema.Attempt
	for i := 1; i <= attempts; i++ {
		st, fin := deadAt.Add(-time.Duration(attempts-i+1)*time.Minute), deadAt.Add(-time.Duration(attempts-i+1)*time.Minute+time.Second)
		hist = append(hist, schema.Attempt{Attempt: i, Class: class, Error: fmt.Sprintf("%s (attempt %d)", msg, i),
			WorkerID: "w1", StartedAt: &st, FinishedAt: &fin})
	}
	return schema.DeadLettered{
		JobRef: schema.JobRef{JobID: id, TenantID: tenant, Attempt: attempts},
		Job: schema.JobSpec{Type: typ, Queue: queue, Priority: 3, Payload: json.RawMessage(`{"to": "a@example.com", "n": 1}`),
			MaxAttempts: attempts, Tags: []string{"t1"}, Pool: schema.PoolShort, Timeout: schema.Duration(30 * time.Second)},
		CreatedAt: deadAt.Add(-time.Hour),
		Error:     schema.ErrorInfo{Class: class, Message: msg},
		History:   hist,
		DeadAt:    deadAt,
	}
}

func (b *bundle) produce(t *testing.T, evs ...schema.DeadLettered) {
	t.Helper()
	var recs []*kgo.Record
	for _, d := range evs {
		rec, err := schema.NewRecord("ferry.jobs.dlq", "ferry/scheduler", d)
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, rec)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := kafkax.ProduceAll(ctx, b.prod, recs...); err != nil {
		t.Fatal(err)
	}
}

// projected waits until the key's tenant lists n entries.
func (b *bundle) projected(t *testing.T, key string, n int) {
	t.Helper()
	eventually(t, func() error {
		r := b.do(t, key, "GET", "/v1/dlq?limit=500", nil)
		if r.Status != 200 {
			return fmt.Errorf("list: %d %s", r.Status, r.Raw)
		}
		if got := len(r.Body["entries"].([]any)); got != n {
			return fmt.Errorf("dlq lists %d entries, want %d", got, n)
		}
		return nil
	})
}

// redrives reads ferry.jobs.enqueued from the start for d and returns the
// re-drive events of dead job deadID (all dead jobs when empty).
func (b *bundle) redrives(t *testing.T, deadID string, want int, settle time.Duration) []schema.Enqueued {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.brokers), kgo.ConsumeTopics("ferry.jobs.enqueued"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	var out []schema.Enqueued
	var settled <-chan time.Time
	for {
		pctx := ctx
		var pcancel context.CancelFunc = func() {}
		if settled != nil {
			pctx, pcancel = context.WithTimeout(ctx, settle)
		}
		fs := cl.PollFetches(pctx)
		pcancel()
		fs.EachRecord(func(r *kgo.Record) {
			ev, err := schema.Decode(r)
			if err != nil {
				t.Errorf("undecodable enqueued record: %v", err)
				return
			}
			e := ev.Data.(schema.Enqueued)
			if deadID == "" || e.RedrivenFrom == deadID {
				out = append(out, e)
			}
		})
		if ctx.Err() != nil {
			t.Fatalf("found %d of %d re-drives of %q", len(out), want, deadID)
		}
		if len(out) >= want && settled == nil {
			settled = time.After(settle)
		}
		if settled != nil {
			select {
			case <-settled:
				return out
			default:
			}
		}
	}
}

func TestEntryHoldsTheFullStoryAndDuplicatesMakeOne(t *testing.T) {
	b := setup(t, dlq.Config{})
	d := dead("acme", "job_a1", 3, "email.send", "mail", schema.ClassAppError, "SMTP 421 try later", base)
	earlier := d
	earlier.Attempt, earlier.History, earlier.Error.Message = 2, d.History[:2], "older"
	b.produce(t, d, d, earlier)
	b.produce(t, d) // a producer retry, another batch
	b.projected(t, b.keyA, 1)

	r := b.do(t, b.keyA, "GET", "/v1/dlq/job_a1", nil)
	if r.Status != 200 {
		t.Fatalf("%d %s", r.Status, r.Raw)
	}
	var e dlq.Entry
	if err := json.Unmarshal(r.Raw, &e); err != nil {
		t.Fatal(err)
	}
	if e.ID != "job_a1" || e.TenantID != "acme" || e.Type != "email.send" || e.Queue != "mail" || e.Attempt != 3 ||
		e.Error.Class != schema.ClassAppError || e.Error.Message != "SMTP 421 try later" || !e.DeadAt.Equal(base) ||
		!e.CreatedAt.Equal(base.Add(-time.Hour)) || e.Suppressed || e.Redrive != nil {
		t.Fatalf("entry: %s", r.Raw)
	}
	if string(e.Job.Payload) != `{"to":"a@example.com","n":1}` || e.Job.Priority != 3 || e.Job.MaxAttempts != 3 ||
		e.Job.Timeout.D() != 30*time.Second || len(e.Job.Tags) != 1 {
		t.Fatalf("original submission not kept verbatim: %+v", e.Job)
	}
	if len(e.History) != 3 || e.History[2].Attempt != 3 || e.History[0].Error != "SMTP 421 try later (attempt 1)" || e.History[1].StartedAt == nil {
		t.Fatalf("history: %+v", e.History)
	}
}

func TestListFiltersAndPagination(t *testing.T) {
	b := setup(t, dlq.Config{})
	var evs []schema.DeadLettered
	for i := range 12 {
		typ, queue, class, msg := "email.send", "mail", schema.ClassAppError, "connection refused"
		if i%3 == 0 {
			typ, class, msg = "report.build", schema.ClassPermanent, "HTTP 400: Bad 100% Input"
		}
		if i%4 == 0 {
			queue = "bulk"
		}
		d := dead("acme", fmt.Sprintf("job_l%02d", i), 1, typ, queue, class, msg, base.Add(time.Duration(i)*time.Minute))
		if i%5 == 0 {
			d.Job.Tags = append(d.Job.Tags, "vip")
		}
		evs = append(evs, d)
	}
	evs = append(evs, dead("globex", "job_g1", 1, "email.send", "mail", schema.ClassAppError, "connection refused", base))
	b.produce(t, evs...)
	b.projected(t, b.keyA, 12)

	ids := func(r resp) []string {
		t.Helper()
		if r.Status != 200 {
			t.Fatalf("%d %s", r.Status, r.Raw)
		}
		var out []string
		for _, e := range r.Body["entries"].([]any) {
			out = append(out, e.(map[string]any)["id"].(string))
		}
		return out
	}
	for _, tc := range []struct {
		query string
		want  string
	}{
		{"type=report.build", "job_l09,job_l06,job_l03,job_l00"},
		{"queue=bulk", "job_l08,job_l04,job_l00"},
		{"class=permanent&queue=mail", "job_l09,job_l06,job_l03"},
		{"q=" + url.QueryEscape("100% input"), "job_l09,job_l06,job_l03,job_l00"},
		{"q=" + url.QueryEscape("0%"), "job_l09,job_l06,job_l03,job_l00"},
		{"q=REFUSED&type=email.send&queue=mail", "job_l11,job_l10,job_l07,job_l05,job_l02,job_l01"},
		{"q=nothing+like+this", ""},
		{"q=_", ""}, // LIKE wildcards are matched literally
		{"tag=vip", "job_l10,job_l05,job_l00"},
		{"tag=vip&tag=t1&queue=bulk", "job_l00"},
		{"tag=t1&tag=nope", ""},
		{"from=" + url.QueryEscape(base.Add(3*time.Minute).Format(time.RFC3339)) + "&to=" + url.QueryEscape(base.Add(6*time.Minute).Format(time.RFC3339)),
			"job_l05,job_l04,job_l03"},
	} {
		if got := strings.Join(ids(b.do(t, b.keyA, "GET", "/v1/dlq?"+tc.query, nil)), ","); got != tc.want {
			t.Errorf("%s: got %s, want %s", tc.query, got, tc.want)
		}
	}

	// Pagination: newest first, no gaps or repeats.
	var all []string
	path := "/v1/dlq?limit=5"
	for pages := 0; ; pages++ {
		r := b.do(t, b.keyA, "GET", path, nil)
		all = append(all, ids(r)...)
		next, present := r.Body["next_cursor"].(string)
		if !present {
			t.Fatalf("next_cursor missing: %s", r.Raw)
		}
		if next == "" {
			if pages != 2 {
				t.Errorf("%d pages, want 3", pages+1)
			}
			break
		}
		path = "/v1/dlq?limit=5&cursor=" + url.QueryEscape(next)
	}
	if len(all) != 12 || all[0] != "job_l11" || all[11] != "job_l00" {
		t.Fatalf("pages: %v", all)
	}
	// Filters and cursor combine.
	r := b.do(t, b.keyA, "GET", "/v1/dlq?type=report.build&limit=3", nil)
	r2 := b.do(t, b.keyA, "GET", "/v1/dlq?type=report.build&limit=3&cursor="+url.QueryEscape(r.Body["next_cursor"].(string)), nil)
	if got := strings.Join(append(ids(r), ids(r2)...), ","); got != "job_l09,job_l06,job_l03,job_l00" {
		t.Errorf("filtered pages: %s", got)
	}

	for _, q := range []string{"class=bogus", "tag=", "tag=a%00b", "limit=0", "limit=x", "from=yesterday", "cursor=bm90LWEtY3Vyc29y", "from=2031-03-02T00:00:00Z&to=2031-03-01T00:00:00Z"} {
		if r := b.do(t, b.keyA, "GET", "/v1/dlq?"+q, nil); r.Status != 400 || r.ErrorCode() == "" {
			t.Errorf("%s: %d %s", q, r.Status, r.Raw)
		}
	}
	// Pagination parameters answer as on every list route.
	for q, code := range map[string]string{"limit=0": "invalid_parameter", "limit=501": "invalid_parameter", "limit=x": "invalid_parameter",
		"cursor=bm90LWEtY3Vyc29y": "invalid_cursor", "cursor=e30": "invalid_cursor"} {
		r := b.do(t, b.keyA, "GET", "/v1/dlq?"+q, nil)
		e, _ := r.Body["error"].(map[string]any)
		fields, _ := e["fields"].(map[string]any)
		if r.Status != 400 || r.ErrorCode() != code || (code == "invalid_parameter" && fields["limit"] == nil) {
			t.Errorf("%s: %d %s", q, r.Status, r.Raw)
		}
	}
}

func TestRedriveProducesEnqueuedAndIsIdempotent(t *testing.T) {
	b := setup(t, dlq.Config{})
	d := dead("acme", "job_r1", 5, "email.send", "mail", schema.ClassTimeout, "deadline exceeded", base)
	past := time.Now().Add(-time.Hour)
	d.Job.NotAfter = &past
	b.produce(t, d)
	b.projected(t, b.keyA, 1)

	r := b.do(t, b.keyA, "POST", "/v1/dlq/job_r1/redrive", `{"payload":{"to":"fixed@example.com"},"max_attempts":2}`)
	if r.Status != http.StatusAccepted {
		t.Fatalf("%d %s", r.Status, r.Raw)
	}
	job := r.Body["job"].(map[string]any)
	newID := job["id"].(string)
	if !strings.HasPrefix(newID, "job_") || newID == "job_r1" || job["status"] != "queued" || job["redriven_from"] != "job_r1" ||
		job["attempt"] != 1.0 || job["max_attempts"] != 2.0 || job["deduplicated"] != false || r.Body["deduplicated"] != false {
		t.Fatalf("job: %s", r.Raw)
	}
	entry := r.Body["entry"].(map[string]any)
	rd, _ := entry["redrive"].(map[string]any)
	if rd == nil || rd["job_id"] != newID || rd["state"] != "done" || !strings.HasPrefix(rd["by"].(string), "key_") || rd["at"] == nil {
		t.Fatalf("entry after re-drive: %s", r.Raw)
	}

	evs := b.redrives(t, "job_r1", 1, 300*time.Millisecond)
	if len(evs) != 1 {
		t.Fatalf("%d re-drive events", len(evs))
	}
	e := evs[0]
	if e.JobID != newID || e.TenantID != "acme" || e.Attempt != 1 || e.Reason != schema.ReasonRedrive || e.RedrivenFrom != "job_r1" ||
		e.Actor != rd["by"] || len(e.History) != 0 || time.Since(e.CreatedAt) > time.Minute || e.RunAt.Before(e.CreatedAt) {
		t.Fatalf("enqueued: %+v", e)
	}
	if string(e.Job.Payload) != `{"to":"fixed@example.com"}` || e.Job.MaxAttempts != 2 || e.Job.Type != "email.send" ||
		e.Job.Queue != "mail" || e.Job.Priority != 3 || e.Job.NotAfter != nil || e.Job.Timeout.D() != 30*time.Second {
		t.Fatalf("re-driven spec: %+v", e.Job)
	}

	// Twice: the first re-drive's job, 200, deduplicated.
	r = b.do(t, b.keyA, "POST", "/v1/dlq/job_r1/redrive", nil)
	if r.Status != 200 || r.Body["deduplicated"] != true || r.Body["job"].(map[string]any)["id"] != newID ||
		r.Body["job"].(map[string]any)["deduplicated"] != true || r.Body["job"].(map[string]any)["max_attempts"] != 2.0 {
		t.Fatalf("second re-drive: %d %s", r.Status, r.Raw)
	}
	// The projection sees the enqueued event and confirms the re-drive.
	eventually(t, func() error {
		r := b.do(t, b.keyA, "GET", "/v1/dlq/job_r1", nil)
		if rd := r.Body["redrive"].(map[string]any); rd["confirmed_at"] == nil {
			return fmt.Errorf("re-drive not confirmed: %s", r.Raw)
		}
		return nil
	})
	if n := len(b.redrives(t, "job_r1", 1, 300*time.Millisecond)); n != 1 {
		t.Fatalf("%d re-drive events after a repeat", n)
	}

	// Bad bodies.
	for body, code := range map[string]string{
		`{"max_attempts":0}`: "validation_failed", `{"nope":1}`: "unknown_field", `{"payload":`: "invalid_json",
	} {
		if r := b.do(t, b.keyA, "POST", "/v1/dlq/job_r1/redrive", body); r.ErrorCode() != code {
			t.Errorf("%s: %d %s", body, r.Status, r.Raw)
		}
	}
	if r := b.do(t, b.keyA, "POST", "/v1/dlq/job_nope/redrive", nil); r.Status != 404 || r.ErrorCode() != "dlq_entry_not_found" {
		t.Errorf("missing entry: %d %s", r.Status, r.Raw)
	}
}

func TestConcurrentRedrivesMakeOneJob(t *testing.T) {
	b := setup(t, dlq.Config{})
	b.produce(t, dead("acme", "job_c1", 1, "x", "default", schema.ClassPermanent, "boom", base))
	b.projected(t, b.keyA, 1)
	const n = 12
	var wg sync.WaitGroup
	out := make([]resp, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i] = b.do(t, b.keyA, "POST", "/v1/dlq/job_c1/redrive", nil)
		}()
	}
	wg.Wait()
	created, ids := 0, map[string]bool{}
	for _, r := range out {
		switch r.Status {
		case http.StatusAccepted:
			created++
		case http.StatusOK:
			if r.Body["deduplicated"] != true {
				t.Errorf("200 without deduplicated: %s", r.Raw)
			}
		default:
			t.Fatalf("%d %s", r.Status, r.Raw)
		}
		ids[r.Body["job"].(map[string]any)["id"].(string)] = true
	}
	if created != 1 || len(ids) != 1 {
		t.Fatalf("%d created, job ids %v", created, ids)
	}
	if evs := b.redrives(t, "job_c1", 1, 500*time.Millisecond); len(evs) != 1 {
		t.Fatalf("%d enqueued events", len(evs))
	}
}

func TestBulkRedriveDryRunMatchesRealRun(t *testing.T) {
	// Small batches and a modest rate exercise batching and the limiter.
	b := setup(t, dlq.Config{BulkBatch: 7, RedriveRate: 200})
	var evs []schema.DeadLettered
	for i := range 25 {
		evs = append(evs, dead("acme", fmt.Sprintf("job_b%02d", i), 2, "report.build", "default", schema.ClassAppError, "upstream 502", base.Add(time.Duration(i)*time.Second)))
	}
	for i := range 5 {
		evs = append(evs, dead("acme", fmt.Sprintf("job_o%02d", i), 1, "other", "default", schema.ClassPermanent, "bad", base))
	}
	evs = append(evs, dead("globex", "job_gb", 1, "report.build", "default", schema.ClassAppError, "upstream 502", base))
	b.produce(t, evs...)
	b.projected(t, b.keyA, 30)

	for _, id := range []string{"job_b03", "job_b04"} {
		if r := b.do(t, b.keyA, "POST", "/v1/dlq/"+id+"/suppress", nil); r.Status != 200 || r.Body["suppressed"] != true {
			t.Fatalf("suppress: %d %s", r.Status, r.Raw)
		}
	}
	if r := b.do(t, b.keyA, "POST", "/v1/dlq/job_b05/redrive", nil); r.Status != 202 {
		t.Fatalf("single: %d %s", r.Status, r.Raw)
	}
	// A suppressed entry may still be re-driven on its own.
	if r := b.do(t, b.keyA, "POST", "/v1/dlq/job_b04/redrive", nil); r.Status != 202 {
		t.Fatalf("single re-drive of a suppressed entry: %d %s", r.Status, r.Raw)
	}

	filter := map[string]any{"type": "report.build", "q": "502"}
	dry := b.do(t, b.keyA, "POST", "/v1/dlq/redrive", map[string]any{"filter": filter, "dry_run": true})
	if dry.Status != 200 || dry.Body["count"] != 22.0 || len(dry.Body["sample"].([]any)) != 10 {
		t.Fatalf("dry run: %d %s", dry.Status, dry.Raw)
	}
	for _, s := range dry.Body["sample"].([]any) {
		if id := s.(map[string]any)["id"]; id == "job_b03" || id == "job_b04" || id == "job_b05" {
			t.Errorf("sample holds excluded entry %s", id)
		}
	}
	// Nothing was re-driven by the dry run.
	if again := b.do(t, b.keyA, "POST", "/v1/dlq/redrive", map[string]any{"filter": filter, "dry_run": true}); again.Body["count"] != 22.0 {
		t.Fatalf("second dry run: %s", again.Raw)
	}

	// A bounded run says what remains.
	part := b.do(t, b.keyA, "POST", "/v1/dlq/redrive", map[string]any{"filter": filter, "limit": 9})
	if part.Status != 200 || part.Body["redriven"] != 9.0 || part.Body["remaining"] != 13.0 || part.Body["failed"] != 0.0 {
		t.Fatalf("bounded run: %d %s", part.Status, part.Raw)
	}
	rest := b.do(t, b.keyA, "POST", "/v1/dlq/redrive", map[string]any{"filter": filter})
	if rest.Status != 200 || rest.Body["redriven"] != 13.0 || rest.Body["remaining"] != 0.0 {
		t.Fatalf("real run: %d %s", rest.Status, rest.Raw)
	}
	if got := part.Body["redriven"].(float64) + rest.Body["redriven"].(float64); got != dry.Body["count"] {
		t.Fatalf("dry run counted %v, real runs re-drove %v", dry.Body["count"], got)
	}
	if r := b.do(t, b.keyA, "POST", "/v1/dlq/redrive", map[string]any{"filter": filter, "dry_run": true}); r.Body["count"] != 0.0 {
		t.Fatalf("after the run: %s", r.Raw)
	}

	all := b.redrives(t, "", 24, 500*time.Millisecond)
	seen := map[string]bool{}
	for _, e := range all {
		if seen[e.RedrivenFrom] {
			t.Errorf("%s re-driven twice", e.RedrivenFrom)
		}
		seen[e.RedrivenFrom] = true
		if e.TenantID != "acme" || e.Job.Type != "report.build" || e.Attempt != 1 || e.Reason != schema.ReasonRedrive {
			t.Errorf("bulk event: %+v", e)
		}
	}
	if len(all) != 24 || seen["job_b03"] || !seen["job_b04"] || seen["job_gb"] {
		t.Fatalf("%d re-drives: %v", len(all), seen)
	}
	// The suppressed entry is still there, marked.
	if r := b.do(t, b.keyA, "GET", "/v1/dlq/job_b03", nil); r.Status != 200 || r.Body["suppressed"] != true || r.Body["redrive"] != nil {
		t.Fatalf("suppressed entry: %s", r.Raw)
	}
	// Globex's matching entry was untouched.
	if r := b.do(t, b.keyB, "POST", "/v1/dlq/redrive", map[string]any{"filter": filter, "dry_run": true}); r.Body["count"] != 1.0 {
		t.Fatalf("globex: %s", r.Raw)
	}
	if r := b.do(t, b.keyA, "POST", "/v1/dlq/redrive", map[string]any{"filter": map[string]any{"class": "nope"}}); r.Status != 400 {
		t.Fatalf("bad filter: %d %s", r.Status, r.Raw)
	}
}

// TestBulkRedriveTakesOnlyEntriesListedBeforeIt: a job a bulk re-drive
// re-drives may die again while the call runs, and its new entry matches
// the filter too. The call re-drives each entry that was listed when it
// started once, and leaves the new entries to a later call (it once
// re-drove one failing job 58 times in one call).
func TestBulkRedriveTakesOnlyEntriesListedBeforeIt(t *testing.T) {
	// One entry per batch at 4 a second: the call runs for about a second,
	// long enough for the re-driven jobs to die again meanwhile.
	b := setup(t, dlq.Config{BulkBatch: 1, RedriveRate: 4, BulkMax: 40})
	const n = 5
	var evs []schema.DeadLettered
	for i := range n {
		evs = append(evs, dead("acme", fmt.Sprintf("job_r%02d", i), 1, "flaky", "default", schema.ClassAppError, "still broken", base.Add(time.Duration(i)*time.Second)))
	}
	b.produce(t, evs...)
	b.projected(t, b.keyA, n)

	ctx, cancel := context.WithCancel(context.Background())
	killed := make(chan int, 1)
	go func() { killed <- b.killRedriven(ctx, t) }()
	r := b.do(t, b.keyA, "POST", "/v1/dlq/redrive", map[string]any{"filter": map[string]any{"type": "flaky"}})
	if r.Status != 200 || r.Body["redriven"] != float64(n) || r.Body["failed"] != 0.0 || r.Body["remaining"] != 0.0 {
		cancel()
		t.Fatalf("bulk re-drive: %d %s (want %d re-driven, none remaining of the entries listed before it)", r.Status, r.Raw, n)
	}
	// Every re-driven job died again: n new entries, none re-driven.
	b.projected(t, b.keyA, 2*n)
	cancel()
	if k := <-killed; k != n {
		t.Fatalf("%d re-driven jobs died again, want %d", k, n)
	}
	list := b.do(t, b.keyA, "GET", "/v1/dlq?type=flaky&limit=100", nil)
	for _, it := range list.Body["entries"].([]any) {
		e := it.(map[string]any)
		original := strings.HasPrefix(e["id"].(string), "job_r")
		if original != (e["redrive"] != nil) {
			t.Errorf("entry %s (redriven_from %q): redrive %v", e["id"], e["redriven_from"], e["redrive"])
		}
	}
	// A later call takes the new entries.
	if dry := b.do(t, b.keyA, "POST", "/v1/dlq/redrive", map[string]any{"filter": map[string]any{"type": "flaky"}, "dry_run": true}); dry.Body["count"] != float64(n) {
		t.Fatalf("dry run after the call: %s", dry.Raw)
	}
}

// killRedriven plays a worker whose jobs keep failing: every re-drive on
// ferry.jobs.enqueued dies at once (a dlq event for the new job). It
// returns how many it killed when ctx is done.
func (b *bundle) killRedriven(ctx context.Context, t *testing.T) int {
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.brokers), kgo.ConsumeTopics("ferry.jobs.enqueued"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Error(err)
		return 0
	}
	defer cl.Close()
	killed := 0
	for ctx.Err() == nil {
		var deaths []*kgo.Record
		cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
			ev, err := schema.Decode(r)
			if err != nil {
				t.Errorf("undecodable enqueued record: %v", err)
				return
			}
			e := ev.Data.(schema.Enqueued)
			d := dead(e.TenantID, e.JobID, 1, e.Job.Type, e.Job.Queue, schema.ClassAppError, "still broken", time.Now().UTC())
			d.RedrivenFrom = e.RedrivenFrom
			rec, err := schema.NewRecord("ferry.jobs.dlq", "ferry/scheduler", d)
			if err != nil {
				t.Error(err)
				return
			}
			deaths = append(deaths, rec)
		})
		if len(deaths) == 0 {
			continue
		}
		pctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if err := kafkax.ProduceAll(pctx, b.prod, deaths...); err != nil {
			t.Error(err)
		}
		cancel()
		killed += len(deaths)
	}
	return killed
}

func TestSuppressAndPurge(t *testing.T) {
	b := setup(t, dlq.Config{})
	d := dead("acme", "job_p1", 1, "x", "default", schema.ClassPermanent, "boom", base)
	b.produce(t, d)
	b.projected(t, b.keyA, 1)

	r := b.do(t, b.keyA, "POST", "/v1/dlq/job_p1/suppress", nil)
	if r.Status != 200 || r.Body["suppressed"] != true || !strings.HasPrefix(r.Body["suppressed_by"].(string), "key_") {
		t.Fatalf("suppress: %d %s", r.Status, r.Raw)
	}
	if r := b.do(t, b.keyA, "DELETE", "/v1/dlq/job_p1/suppress", nil); r.Status != 200 || r.Body["suppressed"] != false {
		t.Fatalf("unsuppress: %d %s", r.Status, r.Raw)
	}
	if r := b.do(t, b.keyA, "DELETE", "/v1/dlq/job_p1", nil); r.Status != http.StatusNoContent {
		t.Fatalf("purge: %d %s", r.Status, r.Raw)
	}
	if r := b.do(t, b.keyA, "GET", "/v1/dlq/job_p1", nil); r.Status != 404 {
		t.Fatalf("after purge: %d %s", r.Status, r.Raw)
	}
	if r := b.do(t, b.keyA, "DELETE", "/v1/dlq/job_p1", nil); r.Status != 404 {
		t.Fatalf("purge twice: %d %s", r.Status, r.Raw)
	}
	// A late duplicate of the purged job's dlq event does not bring it back.
	b.produce(t, d, dead("acme", "job_p2", 1, "x", "default", schema.ClassPermanent, "boom", base))
	b.projected(t, b.keyA, 1)
	if r := b.do(t, b.keyA, "GET", "/v1/dlq/job_p1", nil); r.Status != 404 {
		t.Fatalf("purged entry came back: %d %s", r.Status, r.Raw)
	}
}

func TestTenantIsolation(t *testing.T) {
	b := setup(t, dlq.Config{})
	b.produce(t, dead("acme", "job_t1", 1, "x", "default", schema.ClassPermanent, "boom", base))
	b.projected(t, b.keyA, 1)
	for _, c := range []struct{ method, path string }{
		{"GET", "/v1/dlq/job_t1"}, {"POST", "/v1/dlq/job_t1/redrive"}, {"POST", "/v1/dlq/job_t1/suppress"},
		{"DELETE", "/v1/dlq/job_t1/suppress"}, {"DELETE", "/v1/dlq/job_t1"},
	} {
		if r := b.do(t, b.keyB, c.method, c.path, nil); r.Status != 404 || r.ErrorCode() != "dlq_entry_not_found" {
			t.Errorf("globex %s %s: %d %s", c.method, c.path, r.Status, r.Raw)
		}
	}
	if r := b.do(t, b.keyB, "GET", "/v1/dlq", nil); r.Status != 200 || len(r.Body["entries"].([]any)) != 0 {
		t.Errorf("globex list: %s", r.Raw)
	}
	if r := b.do(t, b.keyB, "POST", "/v1/dlq/redrive", `{"filter":{}}`); r.Body["redriven"] != 0.0 {
		t.Errorf("globex bulk: %s", r.Raw)
	}
	if r := b.do(t, b.keyA, "GET", "/v1/dlq/job_t1", nil); r.Status != 200 || r.Body["redrive"] != nil || r.Body["suppressed"] != false {
		t.Errorf("acme's entry was touched: %s", r.Raw)
	}
	if r := b.do(t, "fry_wrong", "GET", "/v1/dlq", nil); r.Status != 401 {
		t.Errorf("bad key: %d", r.Status)
	}
}

func TestRetentionDeletesOldEntries(t *testing.T) {
	now := time.Now()
	b := setup(t, dlq.Config{Retention: time.Hour, RetentionInterval: 50 * time.Millisecond, Now: func() time.Time { return now }})
	b.produce(t,
		dead("acme", "job_old", 1, "x", "default", schema.ClassPermanent, "boom", now.Add(-2*time.Hour)),
		dead("acme", "job_new", 1, "x", "default", schema.ClassPermanent, "boom", now.Add(-time.Minute)),
	)
	b.produce(t, dead("acme", "job_marker", 1, "x", "default", schema.ClassPermanent, "boom", now))
	eventually(t, func() error {
		r := b.do(t, b.keyA, "GET", "/v1/dlq", nil)
		var got []string
		for _, e := range r.Body["entries"].([]any) {
			got = append(got, e.(map[string]any)["id"].(string))
		}
		if strings.Join(got, ",") != "job_marker,job_new" {
			return fmt.Errorf("entries %v", got)
		}
		return nil
	})
}

func TestFailedProduceReleasesTheClaimAndKeepsTheJobID(t *testing.T) {
	b := setup(t, dlq.Config{})
	b.produce(t, dead("acme", "job_f1", 1, "x", "default", schema.ClassPermanent, "boom", base))
	b.projected(t, b.keyA, 1)

	// A second instance of the service whose Kafka is unreachable.
	bad := *b.deps
	cl, err := kafkax.NewClient(kafkax.Config{Brokers: []string{"127.0.0.1:1"}, ClientID: "unreachable"})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	bad.Kafka = cl
	svc, err := dlq.New(t.Context(), &bad, dlq.Config{ProduceTimeout: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	badBundle := *b
	badBundle.srv = testenv.Serve(t, &bad, svc)

	r := badBundle.do(t, b.keyA, "POST", "/v1/dlq/job_f1/redrive", nil)
	if r.Status != http.StatusServiceUnavailable || r.ErrorCode() != "unavailable" {
		t.Fatalf("%d %s", r.Status, r.Raw)
	}
	var reserved, state string
	if err := b.deps.Postgres.QueryRow(context.Background(),
		`SELECT job_id, state FROM dlq_redrives WHERE tenant_id = 'acme' AND dead_job_id = 'job_f1'`).Scan(&reserved, &state); err != nil {
		t.Fatal(err)
	}
	if state != "released" {
		t.Fatalf("claim state %q after a failed produce", state)
	}
	if r := b.do(t, b.keyA, "GET", "/v1/dlq/job_f1", nil); r.Body["redrive"] != nil {
		t.Fatalf("released re-drive shown: %s", r.Raw)
	}
	if r := b.do(t, b.keyA, "POST", "/v1/dlq/redrive", map[string]any{"filter": map[string]any{}, "dry_run": true}); r.Body["count"] != 1.0 {
		t.Fatalf("released entry not re-drivable in bulk: %s", r.Raw)
	}
	// The retry succeeds with the job id the failed attempt reserved.
	r = b.do(t, b.keyA, "POST", "/v1/dlq/job_f1/redrive", nil)
	if r.Status != http.StatusAccepted || r.Body["job"].(map[string]any)["id"] != reserved {
		t.Fatalf("retry: %d %s (reserved %s)", r.Status, r.Raw, reserved)
	}
}
