package main

// Hostile input: what the stores cannot hold is refused at the door (422
// with the field), and output nobody chose (binary http answers) is stored
// safely. Issue 11: one NUL in a tag used to stop every tenant's status and
// streams.

import (
	"bufio"
	"encoding/base64"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"
)

// wantField asserts a 4xx answer with code that names field.
func wantField(t *testing.T, what string, code int, out map[string]any, wantStatus int, wantCode, field string) {
	t.Helper()
	wantError(t, what, code, out, wantStatus, wantCode)
	e, _ := out["error"].(map[string]any)
	fields, _ := e["fields"].(map[string]any)
	if fields[field] == nil {
		t.Fatalf("%s: fields %v, want %q", what, fields, field)
	}
}

// TestHostileInputText: NUL in every text field a user sets — job type,
// queue, tags, idempotency key, webhook fields, tenant name — and in a
// payload is a 422 naming the field; a batch answers per item; nothing
// stops anyone else.
func TestHostileInputText(t *testing.T) {
	e := startStack(t, nil)
	for _, c := range []struct {
		body, code, field string
	}{
		{`{"type":"noop","tags":["a\u0000b"]}`, "validation_failed", "tags[0]"}, // the request
		{`{"type":"no\u0000op"}`, "validation_failed", "type"},
		{`{"type":"noop","queue":"q\u0000"}`, "validation_failed", "queue"},
		{`{"type":"noop","idempotency_key":"k\u0000"}`, "validation_failed", "idempotency_key"},
		{`{"type":"noop","payload":{"to":"x\u0000y"}}`, "payload_unstorable", "payload.to"},
		{`{"type":"noop","payload":{"k\u0000":1}}`, "payload_unstorable", `payload["k\u0000"]`},
		{`{"type":"noop","payload":["\ud800"]}`, "payload_unstorable", "payload[0]"},
		{"{\"type\":\"noop\",\"payload\":\"\xff\xfe\"}", "payload_unstorable", "payload"},
		{`{"type":"noop","delay":"8760h"}`, "run_at_too_far", "delay"},
	} {
		code, out := e.call("POST", "/v1/jobs", c.body)
		wantField(t, c.body, code, out, http.StatusUnprocessableEntity, c.code, c.field)
	}
	code, out := e.call("POST", "/v1/jobs", `{"type":"noop"}`, "Idempotency-Key", "key\xff")
	wantField(t, "Idempotency-Key with invalid UTF-8", code, out, http.StatusUnprocessableEntity, "validation_failed", "idempotency_key")
	nulHeaderRefused(t, e)

	// A batch with one bad item: the others are queued and run.
	code, out = e.call("POST", "/v1/jobs/batch", `{"jobs":[{"type":"noop","tags":["fine"]},{"type":"noop","tags":["\u0000"]}]}`)
	items, _ := out["jobs"].([]any)
	if code != http.StatusAccepted || len(items) != 2 || errorCode(items[1].(map[string]any)) != "validation_failed" {
		t.Fatalf("batch with one bad item: %d %v", code, out)
	}
	e.waitStatus(items[0].(map[string]any)["id"].(string), "succeeded", 30*time.Second)

	// Webhook fields and tenant names.
	code, out = e.call("POST", "/v1/webhooks", `{"url":"http://127.0.0.1:9/","description":"a\u0000b"}`)
	wantField(t, "webhook description", code, out, http.StatusUnprocessableEntity, "validation_failed", "description")
	code, out = e.call("POST", "/v1/webhooks", `{"url":"http://127.0.0.1:9/","filter":{"queue":"q\u0000"}}`)
	wantField(t, "webhook filter", code, out, http.StatusUnprocessableEntity, "validation_failed", "filter.queue")
	code, out = e.as("admin-e2e").call("POST", "/v1/admin/tenants", `{"id":"nul-name","name":"a\u0000b"}`)
	wantField(t, "tenant name", code, out, http.StatusUnprocessableEntity, "validation_failed", "name")
	// Query parameters and path ids reach Postgres as arguments: refused at
	// the router of every service.
	for _, path := range []string{"/v1/dlq?type=" + url.QueryEscape("a\x00b"), "/v1/jobs?tag=" + url.QueryEscape("a\x00b"),
		"/v1/jobs?type=%ff", "/v1/jobs/job_" + url.PathEscape("\x00"), "/v1/events?type=" + url.QueryEscape("\x00")} {
		code, out = e.call("GET", path, nil)
		wantError(t, "GET "+path, code, out, http.StatusBadRequest, "invalid_parameter")
	}
	code, out = e.call("POST", "/v1/queues/"+url.PathEscape("q\x00")+"/pause", nil)
	wantError(t, "pause a NUL queue", code, out, http.StatusBadRequest, "invalid_parameter")

	e.othersUnaffected(t)
}

// nulHeaderRefused: a NUL in the Idempotency-Key header never reaches the
// api: the HTTP server refuses the request (400) and nothing is queued.
func nulHeaderRefused(t *testing.T, e *e2e) {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(e.base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	body := `{"type":"noop","tags":["nul-header"]}`
	fmt.Fprintf(conn, "POST /v1/jobs HTTP/1.1\r\nHost: ferry\r\nAuthorization: Bearer %s\r\nIdempotency-Key: a\x00b\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
		e.key, len(body), body)
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("NUL header: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("NUL in Idempotency-Key: %d, want 400", resp.StatusCode)
	}
	code, out := e.call("GET", "/v1/jobs?tag=nul-header", nil)
	if jobs, _ := out["jobs"].([]any); code != http.StatusOK || len(jobs) != 0 {
		t.Fatalf("a refused request queued a job: %d %v", code, out)
	}
}

// TestHostileInputBodies: malformed, oversized, deeply nested and
// escape-inflated bodies get a 4xx with a code (never a crash, a hang or a
// record too big for Kafka); a payload just under the limit as encoded is
// accepted and runs.
func TestHostileInputBodies(t *testing.T) {
	e := startStack(t, nil)
	const limit = 262144 // FERRY_API_MAX_PAYLOAD_BYTES default
	code, out := e.call("POST", "/v1/jobs", `{"type":"noop",`)
	wantError(t, "malformed JSON", code, out, http.StatusBadRequest, "invalid_json")
	code, out = e.call("POST", "/v1/jobs", `{"type":"noop","payload":"`+strings.Repeat("x", limit+100<<10)+`"}`)
	wantError(t, "oversized body", code, out, http.StatusRequestEntityTooLarge, "payload_too_large")
	for _, path := range []string{"/v1/jobs", "/v1/jobs/batch"} {
		start := time.Now()
		code, out = e.call("POST", path, `{"type":"noop","payload":`+strings.Repeat("[", 100_000))
		if code < 400 || code >= 500 || errorCode(out) == "" || time.Since(start) > 10*time.Second {
			t.Fatalf("%s with 100k '[': %d %v after %s", path, code, out, time.Since(start))
		}
	}

	// '<' is 1 byte sent and 6 bytes produced (\u003c): 50k of them fit
	// the body limit but not the payload limit, as encoded.
	code, out = e.call("POST", "/v1/jobs", `{"type":"noop","payload":"`+strings.Repeat("<", 50_000)+`"}`)
	wantError(t, "'<' blow-up", code, out, http.StatusRequestEntityTooLarge, "payload_too_large")
	n := (limit - 2) / 6 // just under the limit once escaped
	code, out = e.call("POST", "/v1/jobs", `{"type":"noop","payload":"`+strings.Repeat("<", n)+`"}`)
	if code != http.StatusAccepted {
		t.Fatalf("'<' payload just under the limit: %d %v", code, out)
	}
	j := e.waitStatus(out["id"].(string), "succeeded", 30*time.Second)
	if p, _ := j["payload"].(string); len(p) != n {
		t.Fatalf("stored payload holds %d characters, want %d", len(p), n)
	}

	// A tenant allowed 4 MiB payloads still cannot make a record Kafka
	// would refuse (or a retry event that outgrows it).
	big := e.adminTenant("big-payloads")
	code, out = e.as("admin-e2e").call("PATCH", "/v1/admin/tenants/big-payloads", map[string]any{"max_payload_bytes": 4 << 20})
	if code != http.StatusOK {
		t.Fatalf("raise max_payload_bytes: %d %v", code, out)
	}
	code, out = big.call("POST", "/v1/jobs", map[string]any{"type": "noop", "payload": strings.Repeat("y", 2<<20)})
	wantError(t, "2 MiB payload", code, out, http.StatusRequestEntityTooLarge, "record_too_large")

	e.othersUnaffected(t)
}

// TestHostileInputBinaryHTTP: an http job whose target answers binary bytes
// (NUL, invalid UTF-8) succeeds with the body as base64 behind a marker; a
// failing answer quoting such bytes is stored as readable text. Nothing
// stalls the projections.
func TestHostileInputBinaryHTTP(t *testing.T) {
	payload := []byte("\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\xff\xfe\x00")
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/bad" {
			w.WriteHeader(http.StatusBadRequest)
		} else {
			w.Header().Set("Content-Type", "image/png")
		}
		_, _ = w.Write(payload)
	}))
	defer target.Close()
	e := startStack(t, nil)

	id := e.submit(map[string]any{"type": "http", "payload": map[string]any{"url": target.URL + "/img"}})
	j := e.waitStatus(id, "succeeded", 30*time.Second)
	res, _ := j["result"].(map[string]any)
	got, err := base64.StdEncoding.DecodeString(fmt.Sprint(res["body_base64"]))
	if res["encoding"] != "base64" || err != nil || string(got) != string(payload) {
		t.Fatalf("binary result: %v", res)
	}

	id = e.submit(map[string]any{"type": "http", "payload": map[string]any{"url": target.URL + "/bad"}})
	j = e.waitStatus(id, "dead", 30*time.Second)
	if msg := fmt.Sprint(j["last_error"]); !strings.Contains(msg, "400") || strings.ContainsRune(msg, 0) {
		t.Fatalf("failed answer quoting binary bytes: %v", j)
	}
	e.othersUnaffected(t)
}
