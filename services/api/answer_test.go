package api

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/ferryhq/ferry/events/schema"
	"github.com/ferryhq/ferry/platform/httpx"
	"github.com/ferryhq/ferry/platform/jobs"
)

// TestAnswersMatchWriteJSON: the hand-encoded answers of submissions are
// byte for byte what httpx.WriteJSON writes for the same values, headers
// and status included.
func TestAnswersMatchWriteJSON(t *testing.T) {
	at := time.Date(2026, 11, 28, 7, 0, 0, 5, time.UTC)
	job := jobs.Submitted("01JOB", "acme", schema.JobSpec{Type: "email<&>", Queue: "default", Priority: 5, MaxAttempts: 3,
		Payload: json.RawMessage(`{ "to": "a@b.c" }`), Tags: []string{"x"}}, at, at.Add(time.Minute)).Deduplicate(false)
	rejected := &itemError{Status: 422, Error: httpx.Errorf(422, "validation_failed", "type is required")}
	cases := map[string]struct {
		v     any
		write func(http.ResponseWriter)
	}{
		"job": {job, func(w http.ResponseWriter) { writeJob(w, http.StatusAccepted, &job) }},
		"batch": {batchResponse{Jobs: []batchItem{{Job: &job}, {Error: rejected}, {Job: &job}}},
			func(w http.ResponseWriter) {
				writeBatch(w, http.StatusAccepted, batchResponse{Jobs: []batchItem{{Job: &job}, {Error: rejected}, {Job: &job}}})
			}},
		"rejected batch": {batchResponse{Jobs: []batchItem{{Error: rejected}}, Error: rejected},
			func(w http.ResponseWriter) {
				writeBatch(w, http.StatusAccepted, batchResponse{Jobs: []batchItem{{Error: rejected}}, Error: rejected})
			}},
	}
	for name, c := range cases {
		want, got := httptest.NewRecorder(), httptest.NewRecorder()
		httpx.WriteJSON(want, http.StatusAccepted, c.v)
		c.write(got)
		if got.Code != want.Code || got.Header().Get("Content-Type") != want.Header().Get("Content-Type") ||
			!bytes.Equal(got.Body.Bytes(), want.Body.Bytes()) {
			t.Fatalf("%s: wrote %d %q %s\nWriteJSON wrote %d %q %s", name, got.Code, got.Header().Get("Content-Type"), got.Body,
				want.Code, want.Header().Get("Content-Type"), want.Body)
		}
	}
}
