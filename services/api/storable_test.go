package api_test

import (
	"strings"
	"testing"
	"time"

	"github.com/ferryhq/ferry/events/schema"
	"github.com/ferryhq/ferry/platform/testenv"
	"github.com/ferryhq/ferry/services/api"
)

// TestSubmitRefusesUnstorable: NUL and invalid UTF-8 in text fields, the
// Idempotency-Key header and the payload are 422s with their field, never
// a record the projections cannot store (nor a 500).
func TestSubmitRefusesUnstorable(t *testing.T) {
	b := setup(t, api.Config{})
	cases := []struct {
		body, key, code, field string
	}{
		{`{"type":"noop","tags":["a\u0000b"]}`, "", "validation_failed", "tags[0]"},
		{`{"type":"noop","queue":"q\u0000"}`, "", "validation_failed", "queue"},
		{`{"type":"no\u0000op"}`, "", "validation_failed", "type"},
		{`{"type":"noop","idempotency_key":"k\u0000"}`, "", "validation_failed", "idempotency_key"},
		{`{"type":"noop"}`, "k\xff", "validation_failed", "idempotency_key"},
		{`{"type":"noop","payload":{"a":["x","y\u0000"]}}`, "", "payload_unstorable", "payload.a[1]"},
		{`{"type":"noop","payload":"\ud800"}`, "", "payload_unstorable", "payload"},
		{"{\"type\":\"noop\",\"payload\":{\"s\":\"\xff\"}}", "", "payload_unstorable", "payload.s"},
		{`{"type":"noop","delay":"200h"}`, "", "run_at_too_far", "delay"},
	}
	for _, c := range cases {
		var hdr []string
		if c.key != "" {
			hdr = []string{"Idempotency-Key", c.key}
		}
		r := b.do(t, b.keyA, "POST", "/v1/jobs", c.body, hdr...)
		if r.Status != 422 || r.ErrorCode() != c.code || fieldsOf(r)[c.field] == nil {
			t.Errorf("%q (key %q): %d %s, want 422 %s on %s", c.body, c.key, r.Status, r.Raw, c.code, c.field)
		}
	}
	// A batch answers each item; the good ones are queued.
	r := b.do(t, b.keyA, "POST", "/v1/jobs/batch", `{"jobs":[{"type":"noop"},{"type":"noop","tags":["\u0000"]},{"type":"noop","payload":"\u0000"}]}`)
	items, _ := r.Body["jobs"].([]any)
	if r.Status != 202 || len(items) != 3 {
		t.Fatalf("batch: %d %s", r.Status, r.Raw)
	}
	for i, want := range []string{"", "validation_failed", "payload_unstorable"} {
		m := items[i].(map[string]any)
		e, _ := m["error"].(map[string]any)
		if got, _ := e["code"].(string); got != want {
			t.Errorf("batch item %d: %v, want code %q", i, m, want)
		}
	}
	// The header of a batch is checked once, for every item.
	r = b.do(t, b.keyA, "POST", "/v1/jobs/batch", `{"jobs":[{"type":"noop"}]}`, "Idempotency-Key", "b\xfe")
	if r.Status != 422 || fieldsOf(r)["idempotency_key"] == nil {
		t.Fatalf("batch with a bad header key: %d %s", r.Status, r.Raw)
	}
	b.projected(t, b.keyA, 1)
}

// TestSubmitRecordTooLarge: a job whose event would not fit in a Kafka
// record with room for its retries is refused with 413 record_too_large,
// not a produce failure (503) the client would retry forever.
func TestSubmitRecordTooLarge(t *testing.T) {
	b := setup(t, api.Config{MaxPayloadBytes: 2 << 20})
	big := `{"type":"noop","payload":"` + strings.Repeat("x", schema.MaxSubmitRecordBytes) + `"}`
	r := b.do(t, b.keyA, "POST", "/v1/jobs", big, "Idempotency-Key", "big")
	if r.Status != 413 || r.ErrorCode() != "record_too_large" {
		t.Fatalf("oversized record: %d %.300s", r.Status, r.Raw)
	}
	// The key was released: the same key with a smaller job works.
	r = b.do(t, b.keyA, "POST", "/v1/jobs", `{"type":"noop"}`, "Idempotency-Key", "big")
	if r.Status != 202 {
		t.Fatalf("after record_too_large the key is free: %d %s", r.Status, r.Raw)
	}
	// '<' counts six bytes against the payload limit.
	b2 := setup(t, api.Config{MaxPayloadBytes: 1000})
	r = b2.do(t, b2.keyA, "POST", "/v1/jobs", `{"type":"noop","payload":"`+strings.Repeat("<", 400)+`"}`)
	if r.Status != 413 || r.ErrorCode() != "payload_too_large" {
		t.Fatalf("'<' blow-up: %d %s", r.Status, r.Raw)
	}
}

// TestMaxDelayBelowRetention: the api does not start with a maximum delay
// the topics would not retain.
func TestMaxDelayBelowRetention(t *testing.T) {
	c := testenv.Common(t, api.Needs)
	c.TopicRetention = 100 * time.Hour
	deps := testenv.Open(t, c, api.Needs)
	if _, err := api.New(t.Context(), deps, api.Config{}); err == nil || !strings.Contains(err.Error(), "FERRY_API_MAX_DELAY") {
		t.Fatalf("default max delay (144h) over a 100h retention: %v", err)
	}
	if _, err := api.New(t.Context(), deps, api.Config{MaxDelay: 72 * time.Hour}); err != nil {
		t.Fatalf("72h under 100h: %v", err)
	}
}

// TestTenantNameStorable: a tenant name with NUL is a 422 on create and on
// update. (Invalid UTF-8 inside a JSON string never reaches a handler: the
// JSON decoder turns it into U+FFFD.)
func TestTenantNameStorable(t *testing.T) {
	b := setup(t, api.Config{})
	r := b.do(t, adminKey, "POST", "/v1/admin/tenants", `{"id":"named","name":"a\u0000b"}`)
	if r.Status != 422 || r.ErrorCode() != "validation_failed" || fieldsOf(r)["name"] == nil {
		t.Errorf("create with a NUL name: %d %s", r.Status, r.Raw)
	}
	b.createTenant(t, `{"id":"named","name":"Named"}`)
	r = b.do(t, adminKey, "PATCH", "/v1/admin/tenants/named", `{"name":"x\u0000"}`)
	if r.Status != 422 || fieldsOf(r)["name"] == nil {
		t.Fatalf("update with a NUL name: %d %s", r.Status, r.Raw)
	}
}
