package api_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferryhq/ferry/events/schema"
	"github.com/ferryhq/ferry/services/api"
)

func nightly(name string) map[string]any {
	return map[string]any{"name": name, "cron": "30 2 * * *", "timezone": "Europe/Berlin",
		"job": map[string]any{"type": "report.build", "payload": map[string]any{"kind": "daily"}, "tags": []string{"nightly"}}}
}

func TestSchedulesResource(t *testing.T) {
	b := setup(t, api.Config{MaxSchedules: 3})
	r := b.do(t, b.keyA, "POST", "/v1/schedules", nightly("nightly"))
	if r.Status != http.StatusCreated {
		t.Fatalf("create: %d %s", r.Status, r.Raw)
	}
	id := r.Body["id"].(string)
	if !strings.HasPrefix(id, "sch_") || r.Body["overlap"] != "allow" || r.Body["catchup"] != "one" || r.Body["catchup_limit"] != 10.0 || r.Body["paused"] != false {
		t.Fatalf("defaults: %s", r.Raw)
	}
	next := r.Body["next_fire_times"].([]any)
	if len(next) != 5 {
		t.Fatalf("next_fire_times: %v", next)
	}
	berlin, _ := time.LoadLocation("Europe/Berlin")
	for _, v := range next {
		ft, _ := time.Parse(time.RFC3339Nano, v.(string))
		if l := ft.In(berlin); l.Hour() != 2 && l.Hour() != 3 || !ft.After(time.Now()) {
			t.Fatalf("fire time %v (%v local)", ft, l)
		}
	}
	// Another tenant sees nothing of it.
	for _, c := range []struct{ method, path string }{{"GET", ""}, {"PATCH", ""}, {"DELETE", ""}, {"POST", "/pause"}, {"POST", "/resume"}, {"POST", "/trigger"}} {
		if got := b.do(t, b.keyB, c.method, "/v1/schedules/"+id+c.path, map[string]any{}); got.Status != http.StatusNotFound {
			t.Errorf("globex %s %s: %d", c.method, c.path, got.Status)
		}
	}
	if got := b.do(t, b.keyB, "GET", "/v1/schedules", nil); len(got.Body["schedules"].([]any)) != 0 {
		t.Errorf("globex lists %s", got.Raw)
	}
	if got := b.do(t, b.keyA, "POST", "/v1/schedules", nightly("nightly")); got.Status != http.StatusConflict || got.ErrorCode() != "schedule_name_taken" {
		t.Errorf("same name: %d %s", got.Status, got.Raw)
	}
	r = b.do(t, b.keyA, "PATCH", "/v1/schedules/"+id, map[string]any{"cron": "0 0 9 * * MON", "timezone": "UTC", "overlap": "skip"})
	if r.Status != http.StatusOK || r.Body["cron"] != "0 0 9 * * MON" || r.Body["overlap"] != "skip" || r.Body["name"] != "nightly" {
		t.Fatalf("patch: %d %s", r.Status, r.Raw)
	}
	first, _ := time.Parse(time.RFC3339Nano, r.Body["next_fire_times"].([]any)[0].(string))
	if first.Weekday() != time.Monday || first.Hour() != 9 || first.Minute() != 0 {
		t.Fatalf("next fire after patch: %v", first)
	}
	r = b.do(t, b.keyA, "POST", "/v1/schedules/"+id+"/pause", nil)
	if r.Status != http.StatusOK || r.Body["paused"] != true || len(r.Body["next_fire_times"].([]any)) != 0 {
		t.Fatalf("pause: %d %s", r.Status, r.Raw)
	}
	r = b.do(t, b.keyA, "POST", "/v1/schedules/"+id+"/resume", nil)
	if r.Status != http.StatusOK || r.Body["paused"] != false || len(r.Body["next_fire_times"].([]any)) != 5 {
		t.Fatalf("resume: %d %s", r.Status, r.Raw)
	}
	for i := range 2 {
		if got := b.do(t, b.keyA, "POST", "/v1/schedules", nightly(fmt.Sprintf("n%d", i))); got.Status != http.StatusCreated {
			t.Fatalf("create %d: %d %s", i, got.Status, got.Raw)
		}
	}
	if got := b.do(t, b.keyA, "POST", "/v1/schedules", nightly("n9")); got.Status != http.StatusUnprocessableEntity || got.ErrorCode() != "too_many_schedules" {
		t.Errorf("past the limit: %d %s", got.Status, got.Raw)
	}
	// Pagination, oldest first.
	var names []string
	cursor := ""
	for range 4 {
		got := b.do(t, b.keyA, "GET", "/v1/schedules?limit=2&cursor="+cursor, nil)
		for _, s := range got.Body["schedules"].([]any) {
			names = append(names, s.(map[string]any)["name"].(string))
		}
		if cursor = got.Body["next_cursor"].(string); cursor == "" {
			break
		}
	}
	if strings.Join(names, ",") != "nightly,n0,n1" {
		t.Errorf("listed %v", names)
	}
	if got := b.do(t, b.keyA, "DELETE", "/v1/schedules/"+id, nil); got.Status != http.StatusNoContent {
		t.Fatalf("delete: %d", got.Status)
	}
	if got := b.do(t, b.keyA, "GET", "/v1/schedules/"+id, nil); got.Status != http.StatusNotFound {
		t.Fatalf("get deleted: %d", got.Status)
	}
}

func TestSchedulesValidation(t *testing.T) {
	b := setup(t, api.Config{MaxPayloadBytes: 1024})
	withJob := func(job map[string]any, extra map[string]any) map[string]any {
		body := map[string]any{"name": "x", "cron": "@every 30s", "job": job}
		for k, v := range extra {
			body[k] = v
		}
		return body
	}
	noop := map[string]any{"type": "noop"}
	for _, tc := range []struct {
		name   string
		body   any
		status int
		code   string
		field  string
	}{
		{"bad cron", withJob(noop, map[string]any{"cron": "61 * * * *"}), 422, "invalid_schedule", "cron"},
		{"sub-second every", withJob(noop, map[string]any{"cron": "@every 100ms"}), 422, "invalid_schedule", "cron"},
		{"7 fields", withJob(noop, map[string]any{"cron": "* * * * * * *"}), 422, "invalid_schedule", "cron"},
		{"bad zone", withJob(noop, map[string]any{"timezone": "Europe/Atlantis"}), 422, "invalid_timezone", "timezone"},
		{"Local zone", withJob(noop, map[string]any{"timezone": "Local"}), 422, "invalid_timezone", "timezone"},
		{"bad policy", withJob(noop, map[string]any{"overlap": "sometimes"}), 422, "invalid_schedule", "overlap"},
		{"bad catchup", withJob(noop, map[string]any{"catchup": "most"}), 422, "invalid_schedule", "catchup"},
		{"catchup limit", withJob(noop, map[string]any{"catchup_limit": 0}), 422, "invalid_schedule", "catchup_limit"},
		{"bad name", withJob(noop, map[string]any{"name": "-x y"}), 422, "invalid_schedule", "name"},
		{"no job", map[string]any{"name": "x", "cron": "@hourly"}, 422, "invalid_schedule", "job"},
		{"job type", withJob(map[string]any{"type": "9lives"}, nil), 422, "validation_failed", "job.type"},
		{"job priority", withJob(map[string]any{"type": "noop", "priority": 11}, nil), 422, "validation_failed", "job.priority"},
		{"job run_at", withJob(map[string]any{"type": "noop", "run_at": "2030-01-01T00:00:00Z"}, nil), 422, "invalid_schedule", "job.run_at"},
		{"job delay", withJob(map[string]any{"type": "noop", "delay": "1s"}, nil), 422, "invalid_schedule", "job.delay"},
		{"job unknown field", withJob(map[string]any{"type": "noop", "color": "red"}, nil), 400, "unknown_field", "job.color"},
		{"job payload too large", withJob(map[string]any{"type": "noop", "payload": map[string]any{"s": strings.Repeat("x", 2000)}}, nil), 413, "payload_too_large", "job.payload"},
		{"unknown field", withJob(noop, map[string]any{"every": "day"}), 400, "unknown_field", ""},
	} {
		r := b.do(t, b.keyA, "POST", "/v1/schedules", tc.body)
		fields, _ := r.Body["error"].(map[string]any)["fields"].(map[string]any)
		if r.Status != tc.status || r.ErrorCode() != tc.code || (tc.field != "" && fields[tc.field] == nil) {
			t.Errorf("%s: %d %s, want %d %s with fields.%s", tc.name, r.Status, r.Raw, tc.status, tc.code, tc.field)
		}
	}
}

// TestSchedulesFireJobs: an every-second schedule creates one job per fire
// time, each carrying schedule_id and its fire time as scheduled_for, with
// exactly one enqueued event per job; trigger fires at once and pause
// stops the fires.
func TestSchedulesFireJobs(t *testing.T) {
	b := setup(t, api.Config{ScheduleFiring: true})
	r := b.do(t, b.keyA, "POST", "/v1/schedules", map[string]any{"name": "tick", "cron": "*/1 * * * * *", "job": map[string]any{"type": "noop"}})
	if r.Status != http.StatusCreated {
		t.Fatalf("create: %d %s", r.Status, r.Raw)
	}
	id := r.Body["id"].(string)
	var jobs []any
	eventually(t, func() error {
		jobs = b.do(t, b.keyA, "GET", "/v1/jobs?limit=500", nil).Body["jobs"].([]any)
		if len(jobs) < 3 {
			return fmt.Errorf("%d jobs", len(jobs))
		}
		return nil
	})
	if got := b.do(t, b.keyA, "POST", "/v1/schedules/"+id+"/pause", nil); got.Status != http.StatusOK {
		t.Fatalf("pause: %d %s", got.Status, got.Raw)
	}
	tr := b.do(t, b.keyA, "POST", "/v1/schedules/"+id+"/trigger", nil)
	if tr.Status != http.StatusAccepted || tr.Body["schedule_id"] != id {
		t.Fatalf("trigger: %d %s", tr.Status, tr.Raw)
	}
	time.Sleep(1500 * time.Millisecond) // paused: no fire meanwhile
	sc := b.do(t, b.keyA, "GET", "/v1/schedules/"+id, nil).Body
	fired := int(sc["fired"].(float64))
	b.projected(t, b.keyA, fired)
	jobs = b.do(t, b.keyA, "GET", "/v1/jobs?limit=500", nil).Body["jobs"].([]any)
	seen := map[string]bool{}
	for _, j := range jobs {
		j := j.(map[string]any)
		if j["schedule_id"] != id || j["type"] != "noop" {
			t.Fatalf("job %v", j)
		}
		at := j["scheduled_for"].(string)
		if seen[at] {
			t.Fatalf("two jobs for fire time %s", at)
		}
		seen[at] = true
	}
	if sc["last_job_id"] != tr.Body["id"] {
		t.Errorf("last_job_id %v, want the triggered %v", sc["last_job_id"], tr.Body["id"])
	}
	recs := b.records(t, "ferry.jobs.enqueued", fired, func(r *kgo.Record) bool { return true })
	perJob := map[string]int{}
	for _, rec := range recs {
		ev, err := schema.Decode(rec)
		if err != nil {
			t.Fatal(err)
		}
		e := ev.Data.(schema.Enqueued)
		perJob[e.JobID]++
		if e.ScheduleID != id || e.Actor != id {
			t.Errorf("enqueued %+v", e)
		}
	}
	for jid, n := range perJob {
		if n != 1 {
			t.Errorf("job %s enqueued %d times", jid, n)
		}
	}
}

// TestSchedulesOverlapQueueOne: while the previous run is queued (no
// worker runs here) one fire waits and the others are skipped; once the
// run ends (cancelled), the waiting fire makes the next job, with its own
// fire time.
func TestSchedulesOverlapQueueOne(t *testing.T) {
	b := setup(t, api.Config{ScheduleFiring: true})
	r := b.do(t, b.keyA, "POST", "/v1/schedules", map[string]any{"name": "q1", "cron": "@every 1s", "overlap": "queue_one",
		"job": map[string]any{"type": "noop"}})
	if r.Status != http.StatusCreated {
		t.Fatalf("create: %d %s", r.Status, r.Raw)
	}
	id := r.Body["id"].(string)
	var sc map[string]any
	get := func() map[string]any { return b.do(t, b.keyA, "GET", "/v1/schedules/"+id, nil).Body }
	eventually(t, func() error {
		if sc = get(); sc["fired"] != 1.0 || sc["queued_fire_at"] == nil || sc["skipped"].(float64) < 2 {
			return fmt.Errorf("schedule %v", sc)
		}
		return nil
	})
	queued := sc["queued_fire_at"].(string)
	if c := b.do(t, b.keyA, "POST", "/v1/jobs/"+sc["last_job_id"].(string)+"/cancel", nil); c.Status != http.StatusAccepted {
		t.Fatalf("cancel: %d %s", c.Status, c.Raw)
	}
	eventually(t, func() error {
		if sc = get(); sc["fired"] != 2.0 {
			return fmt.Errorf("schedule %v", sc)
		}
		return nil
	})
	eventually(t, func() error {
		j := b.do(t, b.keyA, "GET", "/v1/jobs/"+sc["last_job_id"].(string), nil)
		if j.Status != http.StatusOK {
			return fmt.Errorf("second job: %d", j.Status)
		}
		if at, _ := time.Parse(time.RFC3339Nano, j.Body["scheduled_for"].(string)); !at.Equal(mustTime(t, queued)) {
			t.Fatalf("second job's fire time %v, want the queued %s", j.Body["scheduled_for"], queued)
		}
		return nil
	})
}

func mustTime(t *testing.T, s string) time.Time {
	t.Helper()
	ts, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatal(err)
	}
	return ts
}
