package api_test

import (
	"fmt"
	"testing"

	"github.com/ferryhq/ferry/services/api"
)

// TestJobResourceShowsConcurrency: a job submitted with a concurrency key
// shows the key and its limit (1 when the submission gave none) in the
// submission's answer, and once projected in GET /v1/jobs/{id} and in the
// job list; a job without one shows none.
func TestJobResourceShowsConcurrency(t *testing.T) {
	b := setup(t, api.Config{})
	want := map[string]string{} // job id → "key/limit", "" for none
	for body, shown := range map[string]string{
		`{"type":"email.send","concurrency":{"key":"customer-42","limit":2}}`: "customer-42/2",
		`{"type":"email.send","concurrency":{"key":"customer-43"}}`:           "customer-43/1",
		`{"type":"email.send"}`: "",
	} {
		r := b.do(t, b.keyA, "POST", "/v1/jobs", body)
		if r.Status != 202 || concurrencyOf(r.Body) != shown {
			t.Fatalf("%s: %d %s, want concurrency %q", body, r.Status, r.Raw, shown)
		}
		want[r.Body["id"].(string)] = shown
	}
	b.projected(t, b.keyA, len(want))
	for id, shown := range want {
		if g := b.do(t, b.keyA, "GET", "/v1/jobs/"+id, nil); g.Status != 200 || concurrencyOf(g.Body) != shown {
			t.Errorf("GET %s: %d %s, want concurrency %q", id, g.Status, g.Raw, shown)
		}
	}
	list := b.do(t, b.keyA, "GET", "/v1/jobs", nil)
	for _, j := range list.Body["jobs"].([]any) {
		job := j.(map[string]any)
		if got := concurrencyOf(job); got != want[job["id"].(string)] {
			t.Errorf("listed %s with concurrency %q, want %q", job["id"], got, want[job["id"].(string)])
		}
	}
}

// concurrencyOf renders a job resource's concurrency as "key/limit", ""
// when it has none.
func concurrencyOf(job map[string]any) string {
	c, ok := job["concurrency"].(map[string]any)
	if !ok {
		return ""
	}
	return fmt.Sprintf("%v/%v", c["key"], c["limit"])
}
