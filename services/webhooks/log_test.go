package webhooks_test

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ferryhq/ferry/services/webhooks"
)

// delivery waits until the only delivery of endpoint id satisfies ok and
// returns it.
func (b *bundle) delivery(t *testing.T, id string, ok func(d map[string]any) bool) map[string]any {
	t.Helper()
	deadline := time.Now().Add(wait)
	for {
		r := b.do(t, b.keyA, "GET", "/v1/webhooks/"+id+"/deliveries", nil)
		ds, _ := r.Body["deliveries"].([]any)
		if len(ds) == 1 && ok(ds[0].(map[string]any)) {
			return ds[0].(map[string]any)
		}
		if time.Now().After(deadline) {
			t.Fatalf("deliveries of %s: %s", id, r.Raw)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func statusIs(status string, attempts int) func(map[string]any) bool {
	return func(d map[string]any) bool { return d["status"] == status && d["attempts"] == float64(attempts) }
}

// TestDeliveryLogKeepsRequestAndResponse: a delivery's log shows the request
// it sends (body, headers with the signature redacted) and each attempt's
// response (headers with credentials redacted, the body capped); a job's
// deliveries are listed by job id; another tenant sees none of it.
func TestDeliveryLogKeepsRequestAndResponse(t *testing.T) {
	t.Parallel()
	b := setup(t, opts{})
	rc := newReceiver(t, func(n int, w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Set-Cookie", "sid=receiver-session-secret")
		w.Header().Set("X-Receiver", "r1")
		if n == 1 {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprint(w, "busy "+strings.Repeat("x", 10_000))
			return
		}
		fmt.Fprint(w, "thanks")
	})
	id, _ := b.register(t, b.keyA, map[string]any{"url": rc.URL + "/in", "event_types": []string{"completed"}})
	b.emit(t, completed("acme", "job-log"))
	first, second := rc.next(t, wait), rc.next(t, wait)
	d := b.delivery(t, id, statusIs("delivered", 2))
	if d["job_id"] != "job-log" || d["endpoint_id"] != id {
		t.Fatalf("delivery: %v", d)
	}

	byJob := b.do(t, b.keyA, "GET", "/v1/webhooks/deliveries?job_id=job-log", nil)
	if js, _ := byJob.Body["deliveries"].([]any); byJob.Status != 200 || len(js) != 1 || js[0].(map[string]any)["id"] != d["id"] {
		t.Fatalf("deliveries of job-log: %d %s", byJob.Status, byJob.Raw)
	}
	r := b.do(t, b.keyA, "GET", "/v1/webhooks/"+id+"/deliveries/"+d["id"].(string), nil)
	if r.Status != 200 {
		t.Fatalf("delivery log: %d %s", r.Status, r.Raw)
	}
	req := r.Body["request"].(map[string]any)
	if req["method"] != "POST" || req["url"] != rc.URL+"/in" || req["body"] != string(first.body) || req["body_truncated"] != false {
		t.Errorf("logged request: %v (sent %s)", req, first.body)
	}
	hist := r.Body["history"].([]any)
	if len(hist) != 2 {
		t.Fatalf("history: %s", r.Raw)
	}
	a1, a2 := hist[0].(map[string]any), hist[1].(map[string]any)
	checkLoggedAttempt(t, a1, first, http.StatusServiceUnavailable)
	checkLoggedAttempt(t, a2, second, http.StatusOK)
	resp1 := a1["response"].(map[string]any)
	if body := resp1["body"].(string); len(body) != 4096 || !strings.HasPrefix(body, "busy x") || resp1["body_truncated"] != true {
		t.Errorf("first response body: %d bytes, truncated %v", len(body), resp1["body_truncated"])
	}
	if resp2 := a2["response"].(map[string]any); resp2["body"] != "thanks" || resp2["body_truncated"] != false {
		t.Errorf("second response: %v", resp2)
	}
	// Neither a signature nor the receiver's cookie is stored anywhere.
	sig := strings.TrimPrefix(first.header.Get("webhook-signature"), "v1,")
	var n int
	if err := b.deps.Postgres.QueryRow(context.Background(), `SELECT count(*) FROM webhook_attempts
		WHERE position($1 in request_headers::text) > 0 OR position('receiver-session-secret' in response_headers::text) > 0`, sig).Scan(&n); err != nil || n != 0 {
		t.Fatalf("a signature or a cookie is in the log (%d rows, %v)", n, err)
	}

	// Another tenant: the endpoint, the delivery and the job are not found.
	for path, code := range map[string]string{"/v1/webhooks/" + id + "/deliveries/" + d["id"].(string): "webhook_not_found"} {
		if r := b.do(t, b.keyB, "GET", path, nil); r.Status != 404 || r.ErrorCode() != code {
			t.Errorf("globex GET %s: %d %s", path, r.Status, r.Raw)
		}
	}
	if r := b.do(t, b.keyB, "GET", "/v1/webhooks/deliveries?job_id=job-log", nil); r.Status != 200 || len(r.Body["deliveries"].([]any)) != 0 {
		t.Errorf("globex lists acme's job deliveries: %s", r.Raw)
	}
	if r := b.do(t, b.keyA, "GET", "/v1/webhooks/"+id+"/deliveries/msg_nope", nil); r.Status != 404 || r.ErrorCode() != "delivery_not_found" {
		t.Errorf("unknown delivery: %d %s", r.Status, r.Raw)
	}
	if r := b.do(t, b.keyA, "GET", "/v1/webhooks/deliveries", nil); r.Status != 400 || r.ErrorCode() != "invalid_parameter" {
		t.Errorf("job deliveries without job_id: %d %s", r.Status, r.Raw)
	}
}

// checkLoggedAttempt compares an attempt of the log with the request the
// receiver got.
func checkLoggedAttempt(t *testing.T, a map[string]any, got received, status int) {
	t.Helper()
	h := a["request_headers"].(map[string]any)
	if h["Webhook-Id"] != got.header.Get("webhook-id") || h["Webhook-Timestamp"] != got.header.Get("webhook-timestamp") ||
		h["Webhook-Signature"] != "v1,[redacted]" || h["Content-Type"] != "application/cloudevents+json" {
		t.Errorf("attempt %v request headers: %v", a["attempt"], h)
	}
	resp, _ := a["response"].(map[string]any)
	if a["status_code"] != float64(status) || a["replay"] != false || resp == nil {
		t.Fatalf("attempt: %v", a)
	}
	rh := resp["headers"].(map[string]any)
	if rh["Set-Cookie"] != "[redacted]" || rh["X-Receiver"] != "r1" {
		t.Errorf("attempt %v response headers: %v", a["attempt"], rh)
	}
}

// TestReplaySendsAgainSignedAfresh: a replay of a failed delivery sends it
// once more with the same webhook-id, signed with the endpoint's current
// secret at the time of sending, and logs the attempt as a replay; a
// pending delivery or a disabled endpoint cannot be replayed, another
// tenant's delivery is not found, and a failed replay is not retried.
func TestReplaySendsAgainSignedAfresh(t *testing.T) {
	t.Parallel()
	// One retry, and a rotated-out secret stops signing at once.
	b := setup(t, opts{cfg: webhooks.Config{Backoff: []time.Duration{50 * time.Millisecond}, SecretGrace: time.Nanosecond}})
	release := make(chan struct{})
	rc := newReceiver(t, func(n int, w http.ResponseWriter, _ *http.Request) {
		switch n {
		case 3: // the first replay: held until the test has tried a second one
			<-release
		case 1, 2, 4:
			w.WriteHeader(http.StatusInternalServerError)
		}
	})
	id, oldSecret := b.register(t, b.keyA, map[string]any{"url": rc.URL})
	b.emit(t, completed("acme", "job-replay"))
	first := rc.next(t, wait)
	rc.next(t, wait)
	d := b.delivery(t, id, statusIs("failed", 2))
	replay := "/v1/webhooks/" + id + "/deliveries/" + d["id"].(string) + "/replay"

	if r := b.do(t, b.keyB, "POST", replay, nil); r.Status != 404 || r.ErrorCode() != "webhook_not_found" {
		t.Fatalf("globex replays acme's delivery: %d %s", r.Status, r.Raw)
	}
	if r := b.do(t, b.keyA, "POST", "/v1/webhooks/"+id+"/deliveries/msg_nope/replay", nil); r.Status != 404 || r.ErrorCode() != "delivery_not_found" {
		t.Fatalf("replay of an unknown delivery: %d %s", r.Status, r.Raw)
	}
	newSecret := b.do(t, b.keyA, "POST", "/v1/webhooks/"+id+"/rotate-secret", nil).Body["secret"].(string)
	asked := time.Now()
	r := b.do(t, b.keyA, "POST", replay, nil)
	if r.Status != http.StatusAccepted || r.Body["status"] != "pending" || r.Body["replay_requested_by"] == "" {
		t.Fatalf("replay: %d %s", r.Status, r.Raw)
	}
	got := rc.next(t, wait) // held by the receiver: the delivery is in flight
	if r := b.do(t, b.keyA, "POST", replay, nil); r.Status != http.StatusConflict || r.ErrorCode() != "delivery_pending" {
		t.Fatalf("replay of a pending delivery: %d %s", r.Status, r.Raw)
	}
	close(release)
	ts, _ := strconv.ParseInt(got.header.Get("webhook-timestamp"), 10, 64)
	if got.header.Get("webhook-id") != first.header.Get("webhook-id") || string(got.body) != string(first.body) ||
		!verify(newSecret, got.header, got.body) || verify(oldSecret, got.header, got.body) || ts < asked.Unix()-1 {
		t.Fatalf("replayed request: id %q ts %d (asked at %d), signed with the new secret %v, the old %v",
			got.header.Get("webhook-id"), ts, asked.Unix(), verify(newSecret, got.header, got.body), verify(oldSecret, got.header, got.body))
	}
	b.delivery(t, id, statusIs("delivered", 3))
	log := b.do(t, b.keyA, "GET", "/v1/webhooks/"+id+"/deliveries/"+d["id"].(string), nil)
	hist := log.Body["history"].([]any)
	if a := hist[2].(map[string]any); a["replay"] != true || a["replayed_by"] != r.Body["replay_requested_by"] || hist[1].(map[string]any)["replay"] != false {
		t.Fatalf("history after the replay: %s", log.Raw)
	}
	if log.Body["replay_requested_by"] != nil {
		t.Errorf("the sent replay is still requested: %s", log.Raw)
	}

	// A replay that fails is not retried.
	if r := b.do(t, b.keyA, "POST", replay, nil); r.Status != http.StatusAccepted {
		t.Fatalf("second replay: %d %s", r.Status, r.Raw)
	}
	rc.next(t, wait)
	b.delivery(t, id, statusIs("failed", 4))
	rc.none(t, 500*time.Millisecond)

	if _, err := b.deps.Postgres.Exec(context.Background(), `UPDATE webhook_endpoints SET disabled_at = now() WHERE id = $1`, id); err != nil {
		t.Fatal(err)
	}
	if r := b.do(t, b.keyA, "POST", replay, nil); r.Status != http.StatusConflict || r.ErrorCode() != "webhook_disabled" {
		t.Fatalf("replay to a disabled endpoint: %d %s", r.Status, r.Raw)
	}
}
