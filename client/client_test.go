package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// seen is one request a test server received.
type seen struct {
	method, path, key, body string
}

// recorder is a test server's log of requests.
type recorder struct {
	mu   sync.Mutex
	reqs []seen
}

func (r *recorder) add(req *http.Request) seen {
	b, _ := io.ReadAll(req.Body)
	s := seen{req.Method, req.URL.Path, req.Header.Get(IdempotencyKeyHeader), string(b)}
	r.mu.Lock()
	r.reqs = append(r.reqs, s)
	r.mu.Unlock()
	return s
}

func (r *recorder) all() []seen {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]seen(nil), r.reqs...)
}

// dropConnection closes the client's connection without an answer, as a
// crashed proxy or a network cut does after the request was received.
func dropConnection(t *testing.T, w http.ResponseWriter) {
	t.Helper()
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		t.Errorf("hijack: %v", err)
		return
	}
	conn.Close()
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func apiError(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, map[string]any{"error": map[string]any{"code": code, "message": msg, "request_id": "test/1"}})
}

func jobJSON(id string, status Status, dedup bool) map[string]any {
	return map[string]any{"id": id, "tenant_id": "acme", "type": "email.send", "queue": "default", "priority": 5,
		"status": status, "attempt": 1, "max_attempts": 5, "payload": map[string]any{"to": "a@example.com"},
		"tags": []string{}, "created_at": "2026-05-01T12:00:00Z", "deduplicated": dedup}
}

func newTestClient(t *testing.T, h http.HandlerFunc, opts ...Option) *Client {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	c, err := New(srv.URL, "test-key", opts...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

var fastRetry = WithRetry(RetryPolicy{BaseDelay: 5 * time.Millisecond, MaxDelay: 20 * time.Millisecond})

// TestSubmitHonoursRetryAfter: a 429 with Retry-After is retried after
// that long, with the same Idempotency-Key and body.
func TestSubmitHonoursRetryAfter(t *testing.T) {
	var rec recorder
	c := newTestClient(t, func(w http.ResponseWriter, r *http.Request) {
		first := len(rec.all()) == 0
		rec.add(r)
		if first {
			w.Header().Set("Retry-After", "1")
			apiError(w, http.StatusTooManyRequests, CodeTenantRateLimited, "slow down")
			return
		}
		writeJSON(w, http.StatusAccepted, jobJSON("job_1", StatusQueued, false))
	}, fastRetry)
	start := time.Now()
	res, err := c.Submit(context.Background(), JobRequest{Type: "email.send", Payload: map[string]string{"to": "a@example.com"}})
	if err != nil {
		t.Fatal(err)
	}
	if waited := time.Since(start); waited < time.Second {
		t.Errorf("retried after %v; Retry-After asked for 1s", waited)
	}
	reqs := rec.all()
	if len(reqs) != 2 {
		t.Fatalf("%d requests, want 2", len(reqs))
	}
	if reqs[0].key == "" || reqs[0].key != reqs[1].key || reqs[0].key != res.IdempotencyKey {
		t.Errorf("keys %q, %q (result %q): want one generated key on both attempts", reqs[0].key, reqs[1].key, res.IdempotencyKey)
	}
	if reqs[0].body != reqs[1].body || !strings.Contains(reqs[0].body, `"type":"email.send"`) {
		t.Errorf("bodies differ or are wrong: %s / %s", reqs[0].body, reqs[1].body)
	}
	if res.Job.ID != "job_1" || res.Deduplicated {
		t.Errorf("result %+v", res)
	}
}

// TestSubmitRetriesNetworkErrorWithSameKey: a connection lost after the
// request was sent is retried with the same key and body; the second
// answer (deduplicated) is the job the first attempt created.
func TestSubmitRetriesNetworkErrorWithSameKey(t *testing.T) {
	var rec recorder
	c := newTestClient(t, func(w http.ResponseWriter, r *http.Request) {
		first := len(rec.all()) == 0
		rec.add(r)
		if first {
			dropConnection(t, w)
			return
		}
		writeJSON(w, http.StatusOK, jobJSON("job_1", StatusQueued, true))
	}, fastRetry)
	res, err := c.Submit(context.Background(), JobRequest{Type: "email.send"}, WithIdempotencyKey("order-42"))
	if err != nil {
		t.Fatal(err)
	}
	reqs := rec.all()
	if len(reqs) != 2 || reqs[0].key != "order-42" || reqs[1].key != "order-42" || reqs[0].body != reqs[1].body {
		t.Fatalf("requests %+v: want two with key order-42 and the same body", reqs)
	}
	if !res.Deduplicated || res.Job.ID != "job_1" {
		t.Errorf("result %+v: want job_1, deduplicated", res)
	}
}

// TestBackoffWithoutRetryAfter: 503 without Retry-After is retried with
// backoff until it succeeds; 409 idempotency_request_in_flight too.
func TestBackoffWithoutRetryAfter(t *testing.T) {
	var rec recorder
	c := newTestClient(t, func(w http.ResponseWriter, r *http.Request) {
		n := len(rec.all())
		rec.add(r)
		switch n {
		case 0:
			apiError(w, http.StatusServiceUnavailable, CodeUnavailable, "kafka down")
		case 1:
			apiError(w, http.StatusConflict, CodeIdempotencyInFlight, "in flight")
		default:
			writeJSON(w, http.StatusAccepted, jobJSON("job_1", StatusQueued, false))
		}
	}, fastRetry)
	if _, err := c.Submit(context.Background(), JobRequest{Type: "x"}); err != nil {
		t.Fatal(err)
	}
	if n := len(rec.all()); n != 3 {
		t.Fatalf("%d requests, want 3", n)
	}
}

// TestRetryGivesUp: a call that keeps failing stops after MaxAttempts and
// returns the last answer as an *APIError.
func TestRetryGivesUp(t *testing.T) {
	var rec recorder
	c := newTestClient(t, func(w http.ResponseWriter, r *http.Request) {
		rec.add(r)
		apiError(w, http.StatusServiceUnavailable, CodeUnavailable, "down")
	}, WithRetry(RetryPolicy{MaxAttempts: 3, BaseDelay: time.Millisecond, MaxDelay: 2 * time.Millisecond}))
	_, err := c.Get(context.Background(), "job_1")
	var apiErr *APIError
	if !errors.As(err, &apiErr) || !errors.Is(err, ErrUnavailable) || apiErr.Code != CodeUnavailable {
		t.Fatalf("err = %v, want *APIError unavailable", err)
	}
	if n := len(rec.all()); n != 3 {
		t.Fatalf("%d requests, want 3", n)
	}
}

// TestRetryAfterBeyondPolicy: a Retry-After longer than MaxRetryAfter is
// not waited for; the error says when to come back.
func TestRetryAfterBeyondPolicy(t *testing.T) {
	var rec recorder
	c := newTestClient(t, func(w http.ResponseWriter, r *http.Request) {
		rec.add(r)
		w.Header().Set("Retry-After", "3600")
		apiError(w, http.StatusTooManyRequests, CodeTenantQueueFull, "full")
	})
	_, err := c.Submit(context.Background(), JobRequest{Type: "x"})
	var apiErr *APIError
	if !errors.As(err, &apiErr) || !errors.Is(err, ErrRateLimited) || apiErr.RetryAfter != time.Hour {
		t.Fatalf("err = %#v, want rate limited with RetryAfter 1h", err)
	}
	if n := len(rec.all()); n != 1 {
		t.Fatalf("%d requests, want 1", n)
	}
}

// TestNoRetryOfUnsafeCalls: creating a webhook is not repeated after a
// network error (a second endpoint would exist), nor is a 422 retried.
func TestNoRetryOfUnsafeCalls(t *testing.T) {
	var rec recorder
	c := newTestClient(t, func(w http.ResponseWriter, r *http.Request) {
		rec.add(r)
		if r.URL.Path == "/v1/webhooks" {
			dropConnection(t, w)
			return
		}
		e := map[string]any{"code": CodeValidationFailed, "message": "bad", "fields": map[string]string{"priority": "must be 0-9"}}
		writeJSON(w, http.StatusUnprocessableEntity, map[string]any{"error": e})
	}, fastRetry)
	_, err := c.CreateWebhook(context.Background(), WebhookRequest{URL: "https://example.com/hook"})
	var ne *NetworkError
	if !errors.As(err, &ne) {
		t.Fatalf("err = %v, want *NetworkError", err)
	}
	_, err = c.Submit(context.Background(), JobRequest{Type: "x", Priority: Int(12)})
	var apiErr *APIError
	if !errors.As(err, &apiErr) || !errors.Is(err, ErrValidation) || apiErr.Fields["priority"] == "" {
		t.Fatalf("err = %v, want validation_failed with fields.priority", err)
	}
	if n := len(rec.all()); n != 2 {
		t.Fatalf("%d requests, want 2 (no retries)", n)
	}
}

func TestErrorSentinels(t *testing.T) {
	cases := []struct {
		status int
		code   string
		want   error
	}{
		{404, CodeNotFound, ErrNotFound},
		{404, CodeJobNotFound, ErrNotFound},
		{404, CodeDLQEntryNotFound, ErrNotFound},
		{404, CodeWebhookNotFound, ErrNotFound},
		{401, CodeUnauthorized, ErrUnauthorized},
		{403, CodeForbidden, ErrForbidden},
		{422, CodeValidationFailed, ErrValidation},
		{400, CodeInvalidCursor, ErrValidation},
		{422, CodeIdempotencyKeyReused, ErrIdempotencyConflict},
		{409, CodeIdempotencyInFlight, ErrInFlight},
		{409, CodeRedriveInFlight, ErrInFlight},
		{409, CodeJobFinished, ErrJobFinished},
		{429, CodeTenantRateLimited, ErrRateLimited},
		{429, CodeTooManyStreams, ErrRateLimited},
		{413, CodePayloadTooLarge, ErrTooLarge},
		{503, CodeUnavailable, ErrUnavailable},
		{503, CodeNotVisibleYet, ErrUnavailable},
	}
	all := []error{ErrNotFound, ErrUnauthorized, ErrForbidden, ErrValidation, ErrIdempotencyConflict, ErrInFlight,
		ErrJobFinished, ErrRateLimited, ErrTooLarge, ErrUnavailable}
	for _, tc := range cases {
		err := fmt.Errorf("wrapped: %w", &APIError{Status: tc.status, Code: tc.code})
		for _, s := range all {
			if got := errors.Is(err, s); got != (s == tc.want) {
				t.Errorf("%d %s: errors.Is(%v) = %v", tc.status, tc.code, s, got)
			}
		}
	}
}

// TestNonJSONErrorAnswer: a proxy's HTML error keeps its status.
func TestNonJSONErrorAnswer(t *testing.T) {
	c := newTestClient(t, func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "<html>bad gateway</html>", http.StatusBadGateway)
	}, WithRetry(RetryPolicy{MaxAttempts: 1}))
	_, err := c.Get(context.Background(), "job_1")
	var apiErr *APIError
	if !errors.As(err, &apiErr) || apiErr.Status != 502 || apiErr.Code != "http_502" {
		t.Fatalf("err = %v", err)
	}
}

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	for v, want := range map[string]time.Duration{
		"0": 0, "3": 3 * time.Second, "Fri, 01 May 2026 12:00:05 GMT": 5 * time.Second,
		"Fri, 01 May 2026 11:00:00 GMT": 0,
	} {
		if got, ok := parseRetryAfter(v, now); !ok || got != want {
			t.Errorf("parseRetryAfter(%q) = %v, %v; want %v", v, got, ok, want)
		}
	}
	for _, v := range []string{"", "-1", "soon"} {
		if _, ok := parseRetryAfter(v, now); ok {
			t.Errorf("parseRetryAfter(%q) accepted", v)
		}
	}
}

func TestBackoffBounds(t *testing.T) {
	p := RetryPolicy{BaseDelay: 100 * time.Millisecond, MaxDelay: time.Second}
	for n := 1; n <= 8; n++ {
		d := min(100*time.Millisecond<<(n-1), time.Second)
		for range 50 {
			if got := p.Backoff(n); got < d/2 || got > d {
				t.Fatalf("Backoff(%d) = %v, want in [%v, %v]", n, got, d/2, d)
			}
		}
	}
}

// TestSubmitBatch: per-item results, the header key, and a batch with no
// accepted job returns both the items and a batch_rejected error.
func TestSubmitBatch(t *testing.T) {
	var rec recorder
	c := newTestClient(t, func(w http.ResponseWriter, r *http.Request) {
		s := rec.add(r)
		itemErr := map[string]any{"error": map[string]any{"status": 422, "code": CodeValidationFailed, "message": "bad",
			"fields": map[string]string{"type": "required"}}}
		if strings.Contains(s.body, `"type":"ok"`) {
			writeJSON(w, http.StatusAccepted, map[string]any{"jobs": []any{jobJSON("job_1", StatusQueued, false), itemErr}})
			return
		}
		writeJSON(w, http.StatusUnprocessableEntity, map[string]any{"jobs": []any{itemErr},
			"error": map[string]any{"status": 422, "code": CodeBatchRejected, "message": "none accepted"}})
	})
	res, err := c.SubmitBatch(context.Background(), []JobRequest{{Type: "ok"}, {}}, WithIdempotencyKey("b1"))
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Items) != 2 || res.Items[0].Job == nil || res.Items[0].Job.ID != "job_1" || res.Items[1].Err == nil ||
		!errors.Is(res.Items[1].Err, ErrValidation) || res.Items[1].Err.Fields["type"] != "required" {
		t.Fatalf("items %+v", res.Items)
	}
	if k := rec.all()[0].key; k != "b1" {
		t.Errorf("key %q, want b1", k)
	}
	res, err = c.SubmitBatch(context.Background(), []JobRequest{{}})
	var apiErr *APIError
	if !errors.As(err, &apiErr) || apiErr.Code != CodeBatchRejected || res == nil || len(res.Items) != 1 || res.Items[0].Err == nil {
		t.Fatalf("rejected batch: %+v, %v", res, err)
	}
}

// TestJobsIterator: the iterator follows next_cursor across pages, passes
// filters, and stops when the consumer breaks.
func TestJobsIterator(t *testing.T) {
	var rec recorder
	c := newTestClient(t, func(w http.ResponseWriter, r *http.Request) {
		rec.add(r)
		q := r.URL.Query()
		if q.Get("status") != "succeeded" || q["tag"][0] != "a" || q["tag"][1] != "b" || q.Get("limit") != "2" {
			apiError(w, 400, CodeInvalidParameter, "query "+r.URL.RawQuery)
			return
		}
		pages := map[string]map[string]any{
			"":   {"jobs": []any{jobJSON("job_5", StatusSucceeded, false), jobJSON("job_4", StatusSucceeded, false)}, "next_cursor": "c1"},
			"c1": {"jobs": []any{jobJSON("job_3", StatusSucceeded, false), jobJSON("job_2", StatusSucceeded, false)}, "next_cursor": "c2"},
			"c2": {"jobs": []any{jobJSON("job_1", StatusSucceeded, false)}, "next_cursor": ""},
		}
		writeJSON(w, 200, pages[q.Get("cursor")])
	})
	var ids []string
	for j, err := range c.Jobs(context.Background(), ListOptions{Status: StatusSucceeded, Tags: []string{"a", "b"}, Limit: 2}) {
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, j.ID)
	}
	if got := strings.Join(ids, ","); got != "job_5,job_4,job_3,job_2,job_1" {
		t.Fatalf("ids %s", got)
	}
	before := len(rec.all())
	for range c.Jobs(context.Background(), ListOptions{Status: StatusSucceeded, Tags: []string{"a", "b"}, Limit: 2}) {
		break
	}
	if n := len(rec.all()) - before; n != 1 {
		t.Fatalf("breaking after the first job read %d pages, want 1", n)
	}
}

// TestJobsIteratorError: an error is yielded, then the iteration ends.
func TestJobsIteratorError(t *testing.T) {
	c := newTestClient(t, func(w http.ResponseWriter, r *http.Request) {
		apiError(w, 400, CodeInvalidCursor, "bad cursor")
	})
	n := 0
	for _, err := range c.Jobs(context.Background(), ListOptions{Cursor: "junk"}) {
		n++
		if !errors.Is(err, ErrValidation) {
			t.Fatalf("err = %v", err)
		}
	}
	if n != 1 {
		t.Fatalf("%d yields, want 1", n)
	}
}

// TestCancelFinished: a 409 job_finished is ErrJobFinished.
func TestCancelFinished(t *testing.T) {
	c := newTestClient(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/jobs/job_1/cancel" || r.Method != http.MethodPost {
			apiError(w, 404, CodeNotFound, r.Method+" "+r.URL.Path)
			return
		}
		writeJSON(w, http.StatusConflict, map[string]any{"error": map[string]any{"code": CodeJobFinished, "message": "done"},
			"job": jobJSON("job_1", StatusSucceeded, false)})
	})
	if _, err := c.Cancel(context.Background(), "job_1"); !errors.Is(err, ErrJobFinished) {
		t.Fatalf("err = %v", err)
	}
}

func TestJobRequestJSON(t *testing.T) {
	at := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	jit := 0.0
	b, err := json.Marshal(JobRequest{Type: "t", Priority: Int(0), Delay: 90 * time.Second, Timeout: 30 * time.Second,
		NotAfter: at, Backoff: &Backoff{Base: 100 * time.Millisecond, Max: time.Second, Jitter: &jit}})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"type":"t","priority":0,"delay":"1m30s","timeout":"30s","not_after":"2026-05-01T12:00:00Z","backoff":{"base":"100ms","max":"1s","jitter":0}}`
	if string(b) != want {
		t.Fatalf("got  %s\nwant %s", b, want)
	}
}

func TestNewRejectsBadURL(t *testing.T) {
	for _, u := range []string{"", "localhost:8080", "ftp://x", "http://"} {
		if _, err := New(u, "k"); err == nil {
			t.Errorf("New(%q) accepted", u)
		}
	}
}
