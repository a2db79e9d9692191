package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// as returns a client of the same stack calling with key.
func (e *e2e) as(key string) *e2e {
	c := *e
	c.key = key
	return &c
}

// raw calls path with the client's key and returns the status and body
// (for answers that are not JSON: SSE streams, CSV and NDJSON exports).
// The request is abandoned after d.
func (e *e2e) raw(method, path string, d time.Duration) (int, string) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, method, e.base+path, nil)
	req.Header.Set("Authorization", "Bearer "+e.key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body) // a stream ends with the context
	return resp.StatusCode, string(body)
}

// adminTenant creates a tenant through the admin route and returns a client
// acting with its first key.
func (e *e2e) adminTenant(id string) *e2e {
	e.t.Helper()
	code, out := e.as("admin-e2e").call("POST", "/v1/admin/tenants", map[string]any{"id": id, "name": id})
	if code != http.StatusCreated {
		e.t.Fatalf("create tenant %s: %d %v", id, code, out)
	}
	return e.as(out["api_key"].(string))
}

func errorCode(out map[string]any) string {
	m, _ := out["error"].(map[string]any)
	c, _ := m["code"].(string)
	return c
}

// TestIsolation: tenant B cannot read, list, cancel, stream, re-drive,
// suppress, purge or audit tenant A's jobs, nor see or change A's webhooks;
// every foreign id answers 404, like a missing one.
func TestIsolation(t *testing.T) {
	e := startStack(t, nil)
	a, b := e.adminTenant("alpha"), e.adminTenant("bravo")

	// Tenant A: a running job, a dead-lettered job, a finished job and a webhook.
	running := a.submit(map[string]any{"type": "sleep", "payload": map[string]any{"ms": 60000}})
	dead := a.submit(map[string]any{"type": "fail", "payload": map[string]any{"class": "permanent"}})
	done := a.submit(map[string]any{"type": "noop"})
	code, hook := a.call("POST", "/v1/webhooks", map[string]any{"url": "http://127.0.0.1:9/hook", "event_types": []string{"completed"}})
	if code != http.StatusCreated {
		t.Fatalf("A creates a webhook: %d %v", code, hook)
	}
	hookID := hook["id"].(string)
	a.waitStatus(running, "running", 20*time.Second)
	a.waitStatus(dead, "dead", 20*time.Second)
	a.waitStatus(done, "succeeded", 20*time.Second)
	waitFor(t, 20*time.Second, "A's DLQ entry", func() bool { c, _ := a.call("GET", "/v1/dlq/"+dead, nil); return c == http.StatusOK })
	waitFor(t, 20*time.Second, "A's audit rows", func() bool {
		c, out := a.call("GET", "/v1/audit/events?job_id="+done, nil)
		ev, _ := out["events"].([]any)
		return c == http.StatusOK && len(ev) >= 3
	})
	// B has a job of its own, so its lists are not trivially empty.
	own := b.submit(map[string]any{"type": "noop"})
	b.waitStatus(own, "succeeded", 20*time.Second)
	aIDs := []string{running, dead, done, hookID}
	leaks := func(body string) string {
		for _, id := range aIDs {
			if strings.Contains(body, id) {
				return id
			}
		}
		return ""
	}

	// Every route naming one of A's resources answers 404 not_found to B.
	notFound := []struct{ method, path string }{
		{"GET", "/v1/jobs/" + running},
		{"GET", "/v1/jobs/" + done},
		{"POST", "/v1/jobs/" + running + "/cancel"},
		{"GET", "/v1/dlq/" + dead},
		{"POST", "/v1/dlq/" + dead + "/redrive"},
		{"POST", "/v1/dlq/" + dead + "/suppress"},
		{"DELETE", "/v1/dlq/" + dead + "/suppress"},
		{"DELETE", "/v1/dlq/" + dead},
		{"GET", "/v1/webhooks/" + hookID},
		{"GET", "/v1/webhooks/" + hookID + "/deliveries"},
		{"POST", "/v1/webhooks/" + hookID + "/rotate-secret"},
		{"POST", "/v1/webhooks/" + hookID + "/enable"},
		{"DELETE", "/v1/webhooks/" + hookID},
	}
	for _, c := range notFound {
		code, out := b.call(c.method, c.path, nil)
		if code != http.StatusNotFound {
			t.Errorf("B %s %s: %d %v, want 404", c.method, c.path, code, out)
		}
		// The same answer as for an id that does not exist: no existence oracle.
		missing := strings.NewReplacer(running, "job_missing", dead, "job_missing", done, "job_missing", hookID, "wh_missing").Replace(c.path)
		if mc, mout := b.call(c.method, missing, nil); mc != code || errorCode(mout) != errorCode(out) {
			t.Errorf("B %s %s: %d %s, but %d %s for a missing id", c.method, c.path, code, errorCode(out), mc, errorCode(mout))
		}
	}
	// SSE: A's job stream is 404 for B.
	if code, body := b.raw("GET", "/v1/jobs/"+running+"/events", 3*time.Second); code != http.StatusNotFound {
		t.Errorf("B streams A's job: %d %.200s", code, body)
	}
	if code, body := a.raw("GET", "/v1/jobs/"+done+"/events", 1500*time.Millisecond); code != http.StatusOK || !strings.Contains(body, done) {
		t.Errorf("A streams its own job: %d %.200s", code, body)
	}
	// B's tenant stream carries B's new events and none of A's.
	type streamed struct {
		code int
		body string
	}
	got := make(chan streamed, 1)
	go func() {
		code, body := b.raw("GET", "/v1/events", 4*time.Second)
		got <- streamed{code, body}
	}()
	time.Sleep(time.Second)
	aIDs = append(aIDs, a.submit(map[string]any{"type": "noop"}))
	ownNew := b.submit(map[string]any{"type": "noop"})
	if s := <-got; s.code != http.StatusOK || leaks(s.body) != "" || !strings.Contains(s.body, ownNew) {
		t.Errorf("B's tenant stream: %d, leaks %q, own job shown %v", s.code, leaks(s.body), strings.Contains(s.body, ownNew))
	}

	// Lists, searches, exports and bulk operations show B only its own.
	for _, path := range []string{
		"/v1/jobs", "/v1/jobs?status=running", "/v1/jobs?status=dead", "/v1/jobs?type=sleep",
		"/v1/dlq", "/v1/dlq?type=fail",
		"/v1/audit/events", "/v1/audit/events?job_id=" + done, "/v1/audit/events?job_id=" + dead,
		"/v1/webhooks",
	} {
		code, out := b.call("GET", path, nil)
		for _, k := range []string{"jobs", "entries", "events", "webhooks"} {
			if items, ok := out[k].([]any); ok {
				for _, it := range items {
					if id := leaks(mustJSON(it)); id != "" {
						t.Errorf("B GET %s lists A's %s", path, id)
					}
				}
			}
		}
		if code != http.StatusOK {
			t.Errorf("B GET %s: %d %v", path, code, out)
		}
	}
	for _, path := range []string{"/v1/audit/export?format=ndjson", "/v1/audit/export?format=csv", "/v1/audit/verify"} {
		if code, body := b.raw("GET", path, 10*time.Second); code != http.StatusOK || leaks(body) != "" {
			t.Errorf("B GET %s: %d, leaks %q", path, code, leaks(body))
		}
	}
	if code, out := b.call("POST", "/v1/dlq/redrive", map[string]any{"filter": map[string]any{}, "dry_run": true}); code != http.StatusOK || out["count"] != 0.0 {
		t.Errorf("B bulk re-drive (dry run): %d %v", code, out)
	}
	if code, out := b.call("POST", "/v1/dlq/redrive", map[string]any{"filter": map[string]any{"type": "fail"}}); code >= 300 || leaks(mustJSON(out)) != "" {
		t.Errorf("B bulk re-drive: %d %v", code, out)
	}

	// A's resources are untouched by B's attempts.
	if j := a.job(running); j["status"] != "running" {
		t.Errorf("A's running job is now %v", j["status"])
	}
	if code, out := a.call("GET", "/v1/dlq/"+dead, nil); code != http.StatusOK || out["redrive"] != nil || out["suppressed"] == true {
		t.Errorf("A's DLQ entry after B's attempts: %d %v", code, out)
	}
	if code, _ := a.call("GET", "/v1/webhooks/"+hookID, nil); code != http.StatusOK {
		t.Errorf("A's webhook after B's delete: %d", code)
	}
	// The audit rows of A's job carry the key id as the actor of its submission.
	_, out := a.call("GET", "/v1/audit/events?job_id="+done, nil)
	if evs, _ := out["events"].([]any); len(evs) == 0 || !strings.HasPrefix(mustString(evs[0].(map[string]any)["actor"]), "key_") {
		t.Errorf("A's audit rows: %v", out)
	}

	// Queues are per tenant: A's pause is not B's, and B's listing shows
	// none of A's queues.
	if code, out := a.call("POST", "/v1/queues/alpha-only/pause", nil); code != http.StatusOK || out["paused"] != true {
		t.Errorf("A pauses a queue: %d %v", code, out)
	}
	if code, out := b.call("POST", "/v1/queues/default/pause", nil); code != http.StatusOK || out["paused"] != true {
		t.Errorf("B pauses its default queue: %d %v", code, out)
	}
	pausedOf := func(c *e2e) map[string]bool {
		code, out := c.call("GET", "/v1/queues", nil)
		if code != http.StatusOK {
			t.Errorf("GET /v1/queues: %d %v", code, out)
		}
		m := map[string]bool{}
		for _, q := range out["queues"].([]any) {
			m[q.(map[string]any)["name"].(string)] = q.(map[string]any)["paused"].(bool)
		}
		return m
	}
	if qa := pausedOf(a); !qa["alpha-only"] || qa["default"] {
		t.Errorf("A's queues: %v, want alpha-only paused, default not", qa)
	}
	if qb := pausedOf(b); !qb["default"] {
		t.Errorf("B's queues: %v, want default paused", qb)
	} else if _, ok := qb["alpha-only"]; ok {
		t.Errorf("B's queue list shows A's queue alpha-only: %v", qb)
	}
	for _, c := range []*e2e{a, b} {
		for _, q := range []string{"alpha-only", "default"} {
			if code, _ := c.call("POST", "/v1/queues/"+q+"/resume", nil); code != http.StatusOK {
				t.Errorf("resume %s: %d", q, code)
			}
		}
	}
	_, _ = a.call("POST", "/v1/jobs/"+running+"/cancel", nil)
}

func mustString(v any) string { s, _ := v.(string); return s }

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
