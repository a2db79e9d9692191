package api_test

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferryhq/ferry/platform/quarantine"
	"github.com/ferryhq/ferry/services/api"
)

// park parks a record of group directly, as a consumer would.
func park(t *testing.T, b *bundle, group string, offset int64, key, value []byte) {
	t.Helper()
	rec := &kgo.Record{Topic: "ferry.jobs.enqueued", Partition: 1, Offset: offset, Key: key, Value: value,
		Headers: []kgo.RecordHeader{{Key: "ce_type", Value: []byte("dev.ferry.job.enqueued")}}}
	if err := quarantine.Park(context.Background(), b.deps.Postgres, group, rec, errors.New("ERROR: invalid byte sequence (SQLSTATE 22021)"), 3); err != nil {
		t.Fatal(err)
	}
}

// TestQuarantineRoutes: operators list (filtered, paged), inspect (bytes
// shown safely), retry and discard parked records; tenants may not; bad
// parameters and unknown ids get their codes.
func TestQuarantineRoutes(t *testing.T) {
	b := setup(t, api.Config{})
	binValue := []byte("{\"tags\":[\"a\x00b\"]}\xff")
	park(t, b, "g1", 10, []byte("job_1"), binValue)
	park(t, b, "g1", 11, nil, []byte(`{"ok":true}`))
	park(t, b, "g2", 12, []byte("job_3"), []byte(`{}`))

	if r := b.do(t, b.keyA, "GET", "/v1/admin/quarantine", nil); r.Status != http.StatusForbidden || r.ErrorCode() != "forbidden" {
		t.Fatalf("tenant key: %d %s", r.Status, r.Raw)
	}
	// Paging and filters.
	r := b.do(t, adminKey, "GET", "/v1/admin/quarantine?limit=2", nil)
	recs, _ := r.Body["records"].([]any)
	if r.Status != http.StatusOK || len(recs) != 2 || r.Body["next_cursor"] == "" {
		t.Fatalf("first page: %d %s", r.Status, r.Raw)
	}
	first := recs[0].(map[string]any)
	if _, ok := first["value"]; ok || first["value_bytes"] != float64(len(binValue)) || first["consumer_group"] != "g1" || first["status"] != "parked" {
		t.Fatalf("list item %v", first)
	}
	r = b.do(t, adminKey, "GET", "/v1/admin/quarantine?limit=2&cursor="+r.Body["next_cursor"].(string), nil)
	if recs, _ := r.Body["records"].([]any); len(recs) != 1 || r.Body["next_cursor"] != "" {
		t.Fatalf("second page: %s", r.Raw)
	}
	r = b.do(t, adminKey, "GET", "/v1/admin/quarantine?group=g2", nil)
	if recs, _ := r.Body["records"].([]any); len(recs) != 1 || recs[0].(map[string]any)["offset"] != float64(12) {
		t.Fatalf("group filter: %s", r.Raw)
	}
	for q, code := range map[string]string{"status=lost": "invalid_parameter", "limit=0": "invalid_parameter",
		"cursor=zz": "invalid_cursor", "group=a%00b": "invalid_parameter"} {
		if r := b.do(t, adminKey, "GET", "/v1/admin/quarantine?"+q, nil); r.Status != http.StatusBadRequest || r.ErrorCode() != code {
			t.Errorf("%s: %d %s, want 400 %s", q, r.Status, r.Raw, code)
		}
	}

	// Inspect: text when it can be, base64 otherwise, round-tripping.
	id := first["id"].(string)
	r = b.do(t, adminKey, "GET", "/v1/admin/quarantine/"+id, nil)
	val, _ := r.Body["value"].(map[string]any)
	key, _ := r.Body["key"].(map[string]any)
	raw, _ := base64.StdEncoding.DecodeString(fmt.Sprint(val["data"]))
	if r.Status != http.StatusOK || val["encoding"] != "base64" || string(raw) != string(binValue) ||
		key["encoding"] != "text" || key["data"] != "job_1" || r.Body["topic"] != "ferry.jobs.enqueued" {
		t.Fatalf("inspect: %d %s", r.Status, r.Raw)
	}
	if hs, _ := r.Body["headers"].([]any); len(hs) != 1 {
		t.Fatalf("headers: %s", r.Raw)
	}
	for _, p := range []string{"/v1/admin/quarantine/nope", "/v1/admin/quarantine/999999"} {
		if r := b.do(t, adminKey, "GET", p, nil); r.Status != http.StatusNotFound || r.ErrorCode() != "quarantine_record_not_found" {
			t.Errorf("%s: %d %s", p, r.Status, r.Raw)
		}
	}

	// Retry: marked (twice is a no-op).
	for range 2 {
		if r := b.do(t, adminKey, "POST", "/v1/admin/quarantine/"+id+"/retry", nil); r.Status != http.StatusAccepted || r.Body["status"] != "retry" {
			t.Fatalf("retry: %d %s", r.Status, r.Raw)
		}
	}
	// Discard: who and why; it stays listed.
	if r := b.do(t, adminKey, "POST", "/v1/admin/quarantine/"+id+"/discard", map[string]any{"reason": "a\x00"}); r.Status != http.StatusUnprocessableEntity || r.ErrorCode() != "validation_failed" {
		t.Fatalf("NUL reason: %d %s", r.Status, r.Raw)
	}
	if r := b.do(t, adminKey, "POST", "/v1/admin/quarantine/"+id+"/discard", map[string]any{"why": "x"}); r.Status != http.StatusBadRequest || r.ErrorCode() != "unknown_field" {
		t.Fatalf("unknown field: %d %s", r.Status, r.Raw)
	}
	r = b.do(t, adminKey, "POST", "/v1/admin/quarantine/"+id+"/discard", map[string]any{"reason": "broken producer"})
	if r.Status != http.StatusOK || r.Body["status"] != "discarded" || r.Body["discarded_by"] != "admin" ||
		r.Body["discard_reason"] != "broken producer" || r.Body["discarded_at"] == nil {
		t.Fatalf("discard: %d %s", r.Status, r.Raw)
	}
	r = b.do(t, adminKey, "GET", "/v1/admin/quarantine?status=discarded", nil)
	if recs, _ := r.Body["records"].([]any); len(recs) != 1 || recs[0].(map[string]any)["id"] != id {
		t.Fatalf("discarded list: %s", r.Raw)
	}
	// A resolved record can be neither retried nor discarded.
	if _, err := b.deps.Postgres.Exec(context.Background(), `UPDATE ferry_quarantine SET status = 'resolved' WHERE id = $1::bigint`, id); err != nil {
		t.Fatal(err)
	}
	for _, action := range []string{"retry", "discard"} {
		if r := b.do(t, adminKey, "POST", "/v1/admin/quarantine/"+id+"/"+action, nil); r.Status != http.StatusConflict || r.ErrorCode() != "quarantine_record_resolved" {
			t.Errorf("%s of a resolved record: %d %s", action, r.Status, r.Raw)
		}
	}
	if r := b.do(t, adminKey, "POST", "/v1/admin/quarantine/999999/retry", nil); r.Status != http.StatusNotFound || r.ErrorCode() != "quarantine_record_not_found" {
		t.Errorf("retry unknown: %d %s", r.Status, r.Raw)
	}
}
