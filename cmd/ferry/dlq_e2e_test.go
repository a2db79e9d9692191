package main

import (
	"net/http"
	"testing"
	"time"
)

// TestDeadLetterAndRedrive: a job that exhausts its attempts is
// dead-lettered with its full history, shows up in GET /v1/dlq, and a
// re-drive with an edited payload runs a new job that succeeds and links
// back to the dead one; a second re-drive returns the same job.
func TestDeadLetterAndRedrive(t *testing.T) {
	e := startStack(t, nil)
	id := e.submit(map[string]any{
		"type": "fail", "payload": map[string]any{"times": 5, "class": "app_error"},
		"max_attempts": 2, "backoff": map[string]any{"base": "100ms", "max": "100ms", "jitter": 0},
	})
	dead := e.waitStatus(id, "dead", 30*time.Second)
	if dead["attempt"].(float64) != 2 || dead["last_error"].(map[string]any)["class"] != "app_error" {
		t.Fatalf("dead job: %v", dead)
	}

	var entry map[string]any
	waitFor(t, 20*time.Second, "DLQ entry", func() bool {
		var code int
		code, entry = e.call("GET", "/v1/dlq/"+id, nil)
		return code == http.StatusOK
	})
	history, _ := entry["history"].([]any)
	if len(history) != 2 {
		t.Fatalf("DLQ history has %d attempts, want 2: %v", len(history), entry)
	}
	for i, h := range history {
		a := h.(map[string]any)
		if a["attempt"].(float64) != float64(i+1) || a["class"] != "app_error" || a["worker_id"] == "" {
			t.Fatalf("history[%d] = %v", i, a)
		}
	}
	code, list := e.call("GET", "/v1/dlq?class=app_error", nil)
	if code != http.StatusOK || len(list["entries"].([]any)) != 1 {
		t.Fatalf("GET /v1/dlq: %d %v", code, list)
	}

	code, out := e.call("POST", "/v1/dlq/"+id+"/redrive", map[string]any{"payload": map[string]any{"times": 0}})
	if code != http.StatusAccepted {
		t.Fatalf("redrive: %d %v", code, out)
	}
	newID := out["job"].(map[string]any)["id"].(string)
	if newID == id {
		t.Fatal("re-drive reused the dead job's id")
	}
	// The dlq service produced the new job's enqueued event; the status
	// projection shows it moments later.
	waitFor(t, 10*time.Second, "re-driven job visible", func() bool {
		code, _ := e.call("GET", "/v1/jobs/"+newID, nil)
		return code == http.StatusOK
	})
	done := e.waitStatus(newID, "succeeded", 30*time.Second)
	if done["redriven_from"] != id || done["attempt"].(float64) != 1 {
		t.Fatalf("re-driven job: %v", done)
	}
	code, again := e.call("POST", "/v1/dlq/"+id+"/redrive", nil)
	if code != http.StatusOK || again["job"].(map[string]any)["id"] != newID || again["deduplicated"] != true {
		t.Fatalf("second re-drive: %d %v (want 200, job %s)", code, again, newID)
	}
}
