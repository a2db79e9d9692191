package main

import (
	"context"
	"net/http"
	"testing"
	"time"
)

// TestUniqueWelcomeEmail is issue 15's "deduplicate 'send welcome email
// for user 7' while it is queued" on the whole stack: with its queue paused
// the job stays queued, and submitting it again — also after Redis lost
// every key — answers the same job (200, deduplicated). Once the job ran,
// the key is free: the next submission is a new job.
func TestUniqueWelcomeEmail(t *testing.T) {
	e := startStack(t, nil)
	if code, out := e.call("POST", "/v1/queues/mail/pause", nil); code != http.StatusOK || out["paused"] != true {
		t.Fatalf("pause: %d %v", code, out)
	}
	welcome := map[string]any{"type": "noop", "queue": "mail", "payload": map[string]any{"user": 7},
		"unique": map[string]any{"key": "welcome-email:user-7", "while": "queued", "ttl": "1h"}}
	id := e.submit(welcome)
	again := func(what string) {
		t.Helper()
		if code, out := e.call("POST", "/v1/jobs", welcome); code != http.StatusOK || out["id"] != id || out["deduplicated"] != true {
			t.Fatalf("%s: %d %v (want 200, deduplicated to %s)", what, code, out, id)
		}
	}
	again("second submission while queued")

	// The status projection has the job; then Redis loses everything.
	waitFor(t, 30*time.Second, id+" listed as queued", func() bool {
		_, out := e.call("GET", "/v1/jobs?status=queued&queue=mail", nil)
		jobs, _ := out["jobs"].([]any)
		return len(jobs) == 1 && jobs[0].(map[string]any)["id"] == id
	})
	if err := e.stack.Deps.Redis.FlushDB(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	again("after Redis lost its data")

	if code, out := e.call("POST", "/v1/queues/mail/resume", nil); code != http.StatusOK {
		t.Fatalf("resume: %d %v", code, out)
	}
	e.waitStatus(id, "succeeded", 60*time.Second)
	next := e.submit(welcome)
	if next == id {
		t.Fatalf("after the job ran, a new submission answered it again")
	}
	e.waitStatus(next, "succeeded", 60*time.Second)
	_, out := e.call("GET", "/v1/jobs?queue=mail", nil)
	if jobs, _ := out["jobs"].([]any); len(jobs) != 2 {
		t.Fatalf("%d jobs in queue mail, want 2: %v", len(jobs), out)
	}
}
