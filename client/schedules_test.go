package client

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"testing"
	"time"
)

// TestScheduleCalls: each schedule method sends its route and body (only
// the fields a ScheduleRequest sets, a false Paused included) and decodes
// the answer; a write after a network error is resent only when repeating
// it is harmless.
func TestScheduleCalls(t *testing.T) {
	var rec recorder
	fire := "2031-01-02T03:00:00Z"
	c := newTestClient(t, func(w http.ResponseWriter, r *http.Request) {
		s := rec.add(r)
		switch {
		case s.method == http.MethodDelete:
			w.WriteHeader(http.StatusNoContent)
		case s.path == "/v1/schedules/sch_1/trigger":
			writeJSON(w, http.StatusAccepted, jobJSON("job_1", StatusQueued, false))
		case s.path == "/v1/schedules" && s.method == http.MethodGet:
			writeJSON(w, http.StatusOK, map[string]any{"schedules": []any{map[string]any{"id": "sch_1"}, map[string]any{"id": "sch_2"}}})
		default:
			writeJSON(w, http.StatusOK, map[string]any{"id": "sch_1", "name": "n", "cron": "@hourly", "timezone": "UTC",
				"job": map[string]any{"type": "noop"}, "paused": false, "next_fire_times": []string{fire}, "catchup_limit": 10})
		}
	})
	ctx := context.Background()
	name, cron, paused := "n", "@hourly", false
	s, err := c.CreateSchedule(ctx, ScheduleRequest{Name: &name, Cron: &cron, Job: json.RawMessage(`{"type":"noop"}`)})
	if err != nil || s.ID != "sch_1" || len(s.NextFireTimes) != 1 || !s.NextFireTimes[0].Equal(time.Date(2031, 1, 2, 3, 0, 0, 0, time.UTC)) {
		t.Fatalf("create: %+v %v", s, err)
	}
	if _, err := c.UpdateSchedule(ctx, "sch_1", ScheduleRequest{Paused: &paused}); err != nil {
		t.Fatal(err)
	}
	for _, call := range []func(context.Context, string) (*Schedule, error){c.GetSchedule, c.PauseSchedule, c.ResumeSchedule} {
		if s, err := call(ctx, "sch_1"); err != nil || s.Name != "n" {
			t.Fatalf("%+v %v", s, err)
		}
	}
	if j, err := c.TriggerSchedule(ctx, "sch_1"); err != nil || j.ID != "job_1" {
		t.Fatalf("trigger: %+v %v", j, err)
	}
	if err := c.DeleteSchedule(ctx, "sch_1"); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for s, err := range c.Schedules(ctx, PageOptions{Limit: 2}) {
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, s.ID)
	}
	want := []seen{
		{method: "POST", path: "/v1/schedules", body: `{"name":"n","cron":"@hourly","job":{"type":"noop"}}`},
		{method: "PATCH", path: "/v1/schedules/sch_1", body: `{"paused":false}`},
		{method: "GET", path: "/v1/schedules/sch_1"},
		{method: "POST", path: "/v1/schedules/sch_1/pause"},
		{method: "POST", path: "/v1/schedules/sch_1/resume"},
		{method: "POST", path: "/v1/schedules/sch_1/trigger"},
		{method: "DELETE", path: "/v1/schedules/sch_1"},
		{method: "GET", path: "/v1/schedules"},
	}
	got := rec.all()
	if len(got) != len(want) || len(ids) != 2 {
		t.Fatalf("requests %+v, listed %v", got, ids)
	}
	for i, w := range want {
		if got[i].method != w.method || got[i].path != w.path || got[i].body != w.body {
			t.Errorf("request %d: %+v, want %+v", i, got[i], w)
		}
	}
	if _, err := c.GetSchedule(ctx, ""); !errors.Is(err, errEmptyID) {
		t.Errorf("empty id: %v", err)
	}
}
