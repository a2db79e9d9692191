package main

// The hostile suite: black-box attacks and faults against the whole stack
// (hostile_*_test.go). Each attack ends with othersUnaffected, the invariant
// that matters: a job another tenant submits afterwards still runs to
// succeeded, its status is projected and its live stream still streams.

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"
)

var bystanders atomic.Int64

// othersUnaffected creates a fresh tenant, submits a short job and asserts
// that it succeeds, that GET /v1/jobs/{id} shows it succeeded (the status
// projection is moving) and that its SSE stream delivers its lifecycle up to
// completed (the sse-bridge is moving). Call it after every attack.
func (e *e2e) othersUnaffected(t *testing.T) {
	t.Helper()
	other := e.adminTenant(fmt.Sprintf("bystander-%d", bystanders.Add(1)))
	id := other.submit(map[string]any{"type": "sleep", "payload": map[string]any{"ms": 300}, "tags": []string{"bystander"}})
	events := other.readSSE("/v1/jobs/"+id+"/events", 45*time.Second)
	if len(events) == 0 || events[len(events)-1].event != "completed" {
		var names []string
		for _, ev := range events {
			names = append(names, ev.event)
		}
		t.Fatalf("bystander job %s: stream %v, want it to end with completed", id, names)
	}
	other.waitStatus(id, "succeeded", 30*time.Second)
}

// wantError asserts an HTTP status and stable error code.
func wantError(t *testing.T, what string, code int, out map[string]any, wantStatus int, wantCode string) {
	t.Helper()
	if code != wantStatus || errorCode(out) != wantCode {
		t.Fatalf("%s: %d %v, want %d %s", what, code, out, wantStatus, wantCode)
	}
}

// TestHostileBaseline: the invariant check passes on a healthy stack, so a
// failure after an attack is the attack's doing.
func TestHostileBaseline(t *testing.T) {
	e := startStack(t, nil)
	e.othersUnaffected(t)
	code, out := e.call("POST", "/v1/jobs", map[string]any{"type": ""})
	if code < 400 || code >= 500 || errorCode(out) == "" {
		t.Fatalf("empty type: %d %v, want a 4xx with a code", code, out)
	}
}
