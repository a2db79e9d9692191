package main

import (
	"encoding/json"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/ferryhq/ferry/events/schema"
)

// TestSchedulesEveryTenSecondsAudited is issue 15's "run a job every 10
// seconds" on the whole stack, and the audit of what people change: a
// `*/10 * * * * *` schedule fires one job per fire time, 10 s apart; then
// every change of the schedule (update, pause, resume, trigger, delete) and
// of the tenant's flow control is in the tenant's audit log with its actor
// and what changed, and the hash chains verify.
func TestSchedulesEveryTenSecondsAudited(t *testing.T) {
	e := startStack(t, nil) // its api fires schedules
	rec := e.record(e.stack.Deps.Topics.Lifecycle(schema.EventEnqueued))
	code, out := e.as("admin-e2e").call("POST", "/v1/admin/tenants", map[string]any{"id": "ticker", "name": "Ticker"})
	if code != http.StatusCreated {
		t.Fatalf("create tenant: %d %v", code, out)
	}
	c, keyID := e.as(out["api_key"].(string)), out["key_id"].(string)

	id := c.createSchedule(map[string]any{"name": "tick", "cron": "*/10 * * * * *", "job": map[string]any{"type": "noop"}})
	everyTenSeconds(t, c, rec, id)

	trigger := c.changeSchedule(id)
	if code, out := c.call("GET", "/v1/audit/events?type=nope", nil); code != http.StatusBadRequest {
		t.Errorf("an unknown audit type: %d %v", code, out)
	}
	rows := waitAudit(t, c, schema.AuditScheduleChanged, 6)
	checkScheduleAudit(t, rows, id, keyID, trigger)

	if code, out := e.as("admin-e2e").call("PATCH", "/v1/admin/tenants/ticker", map[string]any{
		"flow_control": map[string]any{"rate_limits": map[string]any{"noop": map[string]any{"per_second": 5, "burst": 5}}}}); code != http.StatusOK {
		t.Fatalf("set rate limit: %d %v", code, out)
	}
	tenant := waitAudit(t, c, schema.AuditTenantChanged, 2) // created, then updated
	if d := tenant[0]["data"].(map[string]any); d["action"] != schema.ActionCreated || tenant[0]["actor"] != "admin" {
		t.Errorf("first tenant change: %v", tenant[0])
	}
	upd := tenant[1]["data"].(map[string]any)
	changes := changesOf(upd)
	if upd["action"] != schema.ActionUpdated || tenant[1]["actor"] != "admin" || len(changes) != 1 ||
		changes["flow_control"][0] != "null" || changes["flow_control"][1] != `{"rate_limits":{"noop":{"burst":5,"per_second":5}}}` {
		t.Errorf("flow-control change audited as %v", tenant[1])
	}
	if code, out := c.call("GET", "/v1/audit/verify", nil); code != http.StatusOK || out["ok"] != true {
		t.Errorf("verify: %d %v", code, out)
	}
	// Another tenant sees none of it.
	if _, out := e.call("GET", "/v1/audit/events?type=schedule.changed", nil); len(out["events"].([]any)) != 0 {
		t.Errorf("another tenant sees %v", out["events"])
	}
}

// everyTenSeconds checks schedule id's fire times are 10 s apart, on the
// tens of seconds, and that its first two fire times make one job each.
func everyTenSeconds(t *testing.T, c *e2e, rec *recorder, id string) {
	_, sc := c.call("GET", "/v1/schedules/"+id, nil)
	next := sc["next_fire_times"].([]any)
	for i := range next {
		at, _ := time.Parse(time.RFC3339Nano, next[i].(string))
		if at.Second()%10 != 0 || at.Nanosecond() != 0 {
			t.Errorf("next fire time %s is not on a tens of seconds", at)
		}
		if prev, _ := time.Parse(time.RFC3339Nano, next[max(i-1, 0)].(string)); i > 0 && at.Sub(prev) != 10*time.Second {
			t.Errorf("next fire times %v are not 10 s apart", next)
		}
	}
	var fs []fire
	waitFor(t, 40*time.Second, "two fires", func() bool { fs, _ = fires(rec, id); return len(fs) >= 2 })
	_, perJob := fires(rec, id)
	if fs[1].at.Sub(fs[0].at) != 10*time.Second || perJob[fs[0].job] != 1 || perJob[fs[1].job] != 1 {
		t.Errorf("fires %v (enqueued per job %v), want one job per fire time, 10 s apart", fs, perJob)
	}
	t.Logf("fire delays: %v, %v", fs[0].created.Sub(fs[0].at), fs[1].created.Sub(fs[1].at))
}

// changeSchedule updates, pauses, resumes, triggers and deletes schedule
// id, and returns the id of the job the trigger made.
func (e *e2e) changeSchedule(id string) string {
	e.t.Helper()
	steps := []struct {
		method, path string
		body         any
		want         int
	}{
		{"PATCH", "/v1/schedules/" + id, map[string]any{"overlap": "skip", "catchup_limit": 3}, http.StatusOK},
		{"POST", "/v1/schedules/" + id + "/pause", nil, http.StatusOK},
		{"POST", "/v1/schedules/" + id + "/resume", nil, http.StatusOK},
		{"POST", "/v1/schedules/" + id + "/trigger", nil, http.StatusAccepted},
	}
	var job string
	for _, s := range steps {
		code, out := e.call(s.method, s.path, s.body)
		if code != s.want {
			e.t.Fatalf("%s %s: %d %v", s.method, s.path, code, out)
		}
		if code == http.StatusAccepted {
			job = out["id"].(string)
		}
	}
	if code, out := e.call("DELETE", "/v1/schedules/"+id, nil); code != http.StatusNoContent {
		e.t.Fatalf("delete: %d %v", code, out)
	}
	return job
}

// waitAudit waits until the caller's audit log holds at least n rows of
// type typ and returns them, oldest first.
func waitAudit(t *testing.T, c *e2e, typ string, n int) []map[string]any {
	t.Helper()
	var rows []map[string]any
	waitFor(t, 30*time.Second, "the changes audited", func() bool {
		_, out := c.call("GET", "/v1/audit/events?type="+typ, nil)
		rows = rows[:0]
		for _, r := range out["events"].([]any) {
			rows = append(rows, r.(map[string]any))
		}
		return len(rows) >= n
	})
	return rows
}

// changesOf maps a change record's changes to [from, to], as JSON text.
func changesOf(data map[string]any) map[string][2]string {
	out := map[string][2]string{}
	list, _ := data["changes"].([]any)
	for _, c := range list {
		m := c.(map[string]any)
		from, _ := json.Marshal(m["from"])
		to, _ := json.Marshal(m["to"])
		out[m["field"].(string)] = [2]string{string(from), string(to)}
	}
	return out
}

// checkScheduleAudit checks the six schedule.changed rows of schedule id.
func checkScheduleAudit(t *testing.T, rows []map[string]any, id, keyID, trigger string) {
	t.Helper()
	var actions []string
	for _, r := range rows {
		d := r["data"].(map[string]any)
		actions = append(actions, d["action"].(string))
		if r["actor"] != keyID || d["schedule_id"] != id || r["tenant_id"] != "ticker" || r["job_id"] != "" || d["name"] != "tick" {
			t.Errorf("audit row %v: want actor %s, schedule %s, tenant ticker, no job id", r, keyID, id)
		}
	}
	want := []string{schema.ActionCreated, schema.ActionUpdated, schema.ActionPaused, schema.ActionResumed,
		schema.ActionTriggered, schema.ActionDeleted}
	if !slices.Equal(actions, want) {
		t.Fatalf("audited actions %v, want %v", actions, want)
	}
	data := func(i int) map[string]any { return rows[i]["data"].(map[string]any) }
	checks := []struct {
		i      int
		field  string
		change [2]string
		n      int
	}{
		{0, "cron", [2]string{"null", `"*/10 * * * * *"`}, 8},
		{1, "overlap", [2]string{`"allow"`, `"skip"`}, 2},
		{1, "catchup_limit", [2]string{"10", "3"}, 2},
		{2, "paused", [2]string{"false", "true"}, 1},
		{3, "paused", [2]string{"true", "false"}, 1},
		{5, "job", [2]string{`{"type":"noop"}`, "null"}, 8},
	}
	for _, c := range checks {
		got := changesOf(data(c.i))
		if got[c.field] != c.change || len(got) != c.n {
			t.Errorf("%s: changes %v, want %s %v among %d", want[c.i], got, c.field, c.change, c.n)
		}
	}
	if d := data(4); d["job_id"] != trigger || d["changes"] != nil {
		t.Errorf("triggered: %v, want job %s and no changes", d, trigger)
	}
}
