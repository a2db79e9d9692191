package dlq_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/ferryhq/ferry/events/schema"
	"github.com/ferryhq/ferry/services/dlq"
)

// TestRedriveEditedPayloadIsStorable: an edited payload jsonb cannot store
// is a 422 payload_unstorable and nothing is re-driven; its size counts as
// produced; filters with NUL are 400s, not failed queries.
func TestRedriveEditedPayloadIsStorable(t *testing.T) {
	b := setup(t, dlq.Config{MaxPayloadBytes: 1000})
	b.produce(t, dead("acme", "job_s1", 2, "email.send", "mail", schema.ClassPermanent, "no", base))
	b.projected(t, b.keyA, 1)

	for body, field := range map[string]string{
		`{"payload":{"to":"x\u0000"}}`: "payload.to",
		`{"payload":["\ud800"]}`:       "payload[0]",
		"{\"payload\":\"\xff\"}":       "payload",
	} {
		r := b.do(t, b.keyA, "POST", "/v1/dlq/job_s1/redrive", body)
		f, _ := r.Body["error"].(map[string]any)["fields"].(map[string]any)
		if r.Status != 422 || r.ErrorCode() != "payload_unstorable" || f[field] == nil {
			t.Errorf("%q: %d %s", body, r.Status, r.Raw)
		}
	}
	r := b.do(t, b.keyA, "POST", "/v1/dlq/job_s1/redrive", `{"payload":"`+strings.Repeat("<", 400)+`"}`)
	if r.Status != 413 || r.ErrorCode() != "payload_too_large" {
		t.Errorf("'<' blow-up: %d %s", r.Status, r.Raw)
	}
	r = b.do(t, b.keyA, "POST", "/v1/dlq/job_s1/redrive", `{"payload":{"html":"<b>"}}`)
	if r.Status != http.StatusAccepted {
		t.Fatalf("storable edit: %d %s", r.Status, r.Raw)
	}
	// Exactly one re-drive: the refused requests produced nothing.
	if evs := b.redrives(t, "job_s1", 1, 300*time.Millisecond); len(evs) != 1 || string(evs[0].Job.Payload) != `{"html":"\u003cb\u003e"}` {
		t.Fatalf("re-drives %+v", evs)
	}

	// Query parameters are refused by the router (httpx) before the handler.
	for _, q := range []string{"type=a%00b", "queue=%00", "q=x%00"} {
		r := b.do(t, b.keyA, "GET", "/v1/dlq?"+q, nil)
		if r.Status != 400 || r.ErrorCode() != "invalid_parameter" {
			t.Errorf("list ?%s: %d %s", q, r.Status, r.Raw)
		}
	}
	r = b.do(t, b.keyA, "GET", "/v1/dlq?type="+url.QueryEscape("\xff"), nil)
	if r.Status != 400 {
		t.Errorf("list with invalid UTF-8: %d %s", r.Status, r.Raw)
	}
}
