package api_test

import (
	"bytes"
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferryhq/ferry/events/schema"
	"github.com/ferryhq/ferry/platform/callback"
	"github.com/ferryhq/ferry/platform/secretbox"
	"github.com/ferryhq/ferry/services/api"
)

// TestCallbackReports: the callback routes check the token, validate each
// report (storable result within its bound, percent, class, retry_after),
// produce the worker's event for a valid one, and answer an api built
// without a key with 503.
func TestCallbackReports(t *testing.T) {
	key := bytes.Repeat([]byte{9}, secretbox.KeySize)
	b := setup(t, api.Config{SecretKey: key})
	box, err := secretbox.New(key)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	c := callback.Claims{TenantID: "acme", JobID: "job_cb1", Attempt: 1, DispatchID: "d-1", Lease: time.Minute, Expires: time.Now().Add(time.Hour)}
	if ok, err := callback.NewAttempts(b.deps.Postgres).Hold(ctx, c, time.Now()); err != nil || !ok {
		t.Fatalf("hold: %v %v", ok, err)
	}
	token := callback.Mint(box, c)
	base := "/v1/jobs/job_cb1/callback/"
	check := func(action string, body any, status int, code string) {
		t.Helper()
		r := b.do(t, token, "POST", base+action, body)
		if r.Status != status || (code != "" && !strings.Contains(string(r.Raw), `"code":"`+code+`"`)) {
			t.Fatalf("%s %v: %d %s, want %d %s", action, body, r.Status, r.Raw, status, code)
		}
	}
	check("complete", `{"result": "`+strings.Repeat("x", 70<<10)+`"}`, http.StatusRequestEntityTooLarge, "result_too_large")
	check("complete", `{"result": {"a": "\u0000"}}`, http.StatusUnprocessableEntity, "result_unstorable")
	check("complete", `{"result": 1e400}`, http.StatusUnprocessableEntity, "result_unstorable")
	check("progress", map[string]any{"percent": -1}, http.StatusUnprocessableEntity, "invalid_callback")
	check("progress", map[string]any{}, http.StatusUnprocessableEntity, "invalid_callback")
	check("progress", map[string]any{"percent": 5, "lease": "1h"}, http.StatusBadRequest, "unknown_field")
	check("fail", map[string]any{"class": "expired"}, http.StatusUnprocessableEntity, "invalid_callback")
	check("fail", map[string]any{"retry_after": "25h"}, http.StatusUnprocessableEntity, "invalid_callback")
	check("heartbeat", nil, http.StatusOK, "")
	check("progress", map[string]any{"percent": 50, "message": "half\u0000way"}, http.StatusOK, "")

	recs := b.records(t, "ferry.jobs.progress", 2, func(r *kgo.Record) bool { return string(r.Key) == "job_cb1" })
	for i, rec := range recs {
		ev, err := schema.Decode(rec)
		if err != nil {
			t.Fatal(err)
		}
		p := ev.Data.(schema.Progress)
		if p.Lease.D() != time.Minute || p.DispatchID != "d-1" || p.WorkerID != "callback" || p.TenantID != "acme" {
			t.Fatalf("progress event %d: %+v", i, p)
		}
		if i == 1 && (p.Percent != 50 || p.Message != schema.EventText("half\x00way", schema.MaxProgressMessage) || strings.ContainsRune(p.Message, 0)) {
			t.Fatalf("progress %+v, want 50 and the message made storable", p)
		}
	}

	// Without a key the routes cannot check tokens.
	bare := setup(t, api.Config{})
	if r := bare.do(t, token, "POST", base+"heartbeat", nil); r.Status != http.StatusServiceUnavailable {
		t.Fatalf("no key: %d %s", r.Status, r.Raw)
	}
}
