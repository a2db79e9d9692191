package webhooks_test

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/ferryhq/ferry/events/schema"
	"github.com/ferryhq/ferry/platform/kafkax"
	"github.com/ferryhq/ferry/platform/service"
	"github.com/ferryhq/ferry/platform/testenv"
	"github.com/ferryhq/ferry/services/webhooks"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

type bundle struct {
	srv  *httptest.Server
	deps *service.Deps
	cfg  webhooks.Config
	keyA string // tenant acme
	keyB string // tenant globex
}

type opts struct {
	noAllow bool
	// serveOnly serves the API without running the fan-out and delivery
	// loops, as a replica whose loops are stopped would.
	serveOnly bool
	cfg       webhooks.Config
}

func setup(t *testing.T, o opts) *bundle {
	t.Helper()
	common := testenv.Common(t, webhooks.Needs)
	if !o.noAllow {
		common.OutboundAllow = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
	}
	b := &bundle{deps: testenv.Open(t, common, webhooks.Needs)}
	b.keyA, b.keyB = testenv.Tenant(t, b.deps.Postgres, "acme"), testenv.Tenant(t, b.deps.Postgres, "globex")
	cfg := o.cfg
	cfg.SecretKey = make([]byte, 32)
	_, _ = rand.Read(cfg.SecretKey)
	if len(cfg.Backoff) == 0 {
		cfg.Backoff = []time.Duration{50 * time.Millisecond, 50 * time.Millisecond, 50 * time.Millisecond, 50 * time.Millisecond}
	}
	cfg.Jitter = -1
	cfg.Poll = 20 * time.Millisecond
	if cfg.CacheRefresh == 0 {
		cfg.CacheRefresh = 100 * time.Millisecond
	}
	b.cfg = cfg
	svc := b.replica(t)
	b.srv = testenv.Serve(t, b.deps, svc)
	if !o.serveOnly {
		testenv.Run(t, svc)
	}
	return b
}

// replica returns another instance of the service over the same
// connections and configuration.
func (b *bundle) replica(t *testing.T) *webhooks.Service {
	t.Helper()
	svc, err := webhooks.New(t.Context(), b.deps, b.cfg)
	if err != nil {
		t.Fatal(err)
	}
	return svc
}

type resp = testenv.Response

func (b *bundle) do(t *testing.T, key, method, path string, body any) resp {
	t.Helper()
	return testenv.Call(t, b.srv.URL, key, method, path, body)
}

// register creates an endpoint and returns its id and secret.
func (b *bundle) register(t *testing.T, key string, body map[string]any) (id, secret string) {
	t.Helper()
	r := b.do(t, key, "POST", "/v1/webhooks", body)
	if r.Status != http.StatusCreated {
		t.Fatalf("register: %d %v", r.Status, r.Body)
	}
	id, _ = r.Body["id"].(string)
	secret, _ = r.Body["secret"].(string)
	if id == "" || !strings.HasPrefix(secret, "whsec_") {
		t.Fatalf("register answered %v", r.Body)
	}
	return id, secret
}

func (b *bundle) emit(t *testing.T, data schema.Lifecycle) string {
	t.Helper()
	rec, err := schema.NewRecord(b.deps.Topics.Lifecycle(data.EventType()), "ferry/test", data)
	if err != nil {
		t.Fatal(err)
	}
	if err := kafkax.ProduceAll(context.Background(), b.deps.Kafka, rec); err != nil {
		t.Fatal(err)
	}
	id, _ := schema.Header(rec, schema.HeaderID)
	return id
}

func completed(tenant, job string) schema.Completed {
	now := time.Now().UTC()
	return schema.Completed{JobRef: schema.JobRef{JobID: job, TenantID: tenant, Attempt: 1}, WorkerID: "w1",
		DispatchID: "d1", Result: json.RawMessage(`{"ok":true}`), StartedAt: now, FinishedAt: now}
}

func enqueued(tenant, job, queue, typ string) schema.Enqueued {
	now := time.Now().UTC()
	return schema.Enqueued{JobRef: schema.JobRef{JobID: job, TenantID: tenant, Attempt: 1},
		Job:       schema.JobSpec{Type: typ, Queue: queue, Priority: 5, MaxAttempts: 5, Pool: "short"},
		CreatedAt: now, RunAt: now, Reason: schema.ReasonSubmitted}
}

// received is one request a receiver got.
type received struct {
	header http.Header
	body   []byte
}

// receiver is a local webhook receiver answering with respond.
type receiver struct {
	*httptest.Server
	ch chan received
}

func newReceiver(t *testing.T, respond func(n int, w http.ResponseWriter, r *http.Request)) *receiver {
	t.Helper()
	rc := &receiver{ch: make(chan received, 100)}
	var mu sync.Mutex
	n := 0
	rc.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		n++
		i := n
		mu.Unlock()
		rc.ch <- received{header: r.Header.Clone(), body: body}
		if respond != nil {
			respond(i, w, r)
		}
	}))
	t.Cleanup(rc.Close)
	return rc
}

func (rc *receiver) next(t *testing.T, within time.Duration) received {
	t.Helper()
	select {
	case r := <-rc.ch:
		return r
	case <-time.After(within):
		t.Fatalf("no delivery within %s", within)
		return received{}
	}
}

func (rc *receiver) none(t *testing.T, within time.Duration) {
	t.Helper()
	select {
	case r := <-rc.ch:
		t.Fatalf("unexpected delivery: %s", r.body)
	case <-time.After(within):
	}
}

// verify is an independent implementation of the Standard Webhooks
// verification a receiver runs: HMAC-SHA256 keyed with the base64-decoded
// secret after whsec_, over "id.timestamp.body", compared against every
// space-separated "v1,<base64>" signature.
func verify(secret string, h http.Header, body []byte) bool {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil {
		return false
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(h.Get("webhook-id") + "." + h.Get("webhook-timestamp") + "."))
	mac.Write(body)
	want := mac.Sum(nil)
	for _, sig := range strings.Fields(h.Get("webhook-signature")) {
		v, b64, ok := strings.Cut(sig, ",")
		if !ok || v != "v1" {
			continue
		}
		got, err := base64.StdEncoding.DecodeString(b64)
		if err == nil && hmac.Equal(got, want) {
			return true
		}
	}
	return false
}

const wait = 20 * time.Second

func TestSignedDeliveryAndEventTypeFilter(t *testing.T) {
	t.Parallel()
	b := setup(t, opts{})
	rc := newReceiver(t, nil)
	id, secret := b.register(t, b.keyA, map[string]any{"url": rc.URL + "/hook", "event_types": []string{"completed"}, "description": "ci"})

	b.emit(t, enqueued("acme", "job-1", "default", "email")) // filtered out by event_types
	eventID := b.emit(t, completed("acme", "job-1"))

	got := rc.next(t, wait)
	if !verify(secret, got.header, got.body) {
		t.Fatalf("signature does not verify: %q", got.header.Get("webhook-signature"))
	}
	if verify("whsec_"+base64.StdEncoding.EncodeToString([]byte("wrong secret 0123456789abcdefghi")), got.header, got.body) {
		t.Fatal("a wrong secret verifies")
	}
	if !strings.HasPrefix(got.header.Get("webhook-id"), "msg_") {
		t.Errorf("webhook-id = %q", got.header.Get("webhook-id"))
	}
	var ce map[string]any
	if err := json.Unmarshal(got.body, &ce); err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]any{"specversion": "1.0", "id": eventID, "type": "ferry.job.completed.v1",
		"subject": "job-1", "tenant": "acme", "source": "ferry/test", "datacontenttype": "application/json"} {
		if ce[k] != want {
			t.Errorf("body %s = %v, want %v", k, ce[k], want)
		}
	}
	if data, _ := ce["data"].(map[string]any); data["job_id"] != "job-1" {
		t.Errorf("data = %v", ce["data"])
	}
	rc.none(t, 500*time.Millisecond) // neither the enqueued event nor a duplicate

	// The delivery log.
	var d map[string]any
	deadline := time.Now().Add(wait)
	for {
		r := b.do(t, b.keyA, "GET", "/v1/webhooks/"+id+"/deliveries", nil)
		ds, _ := r.Body["deliveries"].([]any)
		if len(ds) == 1 {
			d = ds[0].(map[string]any)
			if d["status"] == "delivered" {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("deliveries: %v", r.Body)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if d["event_id"] != eventID || d["event_type"] != "completed" || d["attempts"] != float64(1) ||
		d["last_status_code"] != float64(200) || d["delivered_at"] == nil || d["id"] != got.header.Get("webhook-id") {
		t.Errorf("delivery = %v", d)
	}

	// The secret is not stored in clear.
	var sealed []byte
	if err := b.deps.Postgres.QueryRow(context.Background(), `SELECT secret_enc FROM webhook_endpoints WHERE id = $1`, id).Scan(&sealed); err != nil {
		t.Fatal(err)
	}
	raw, _ := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if bytes.Contains(sealed, []byte(secret)) || bytes.Contains(sealed, raw) || bytes.Contains(sealed, []byte(strings.TrimPrefix(secret, "whsec_"))) {
		t.Fatal("secret stored in clear")
	}
	var n int
	if err := b.deps.Postgres.QueryRow(context.Background(), `SELECT count(*) FROM webhook_endpoints WHERE position($1 in secret_enc::text) > 0 OR position($2 in url || description) > 0`,
		secret, secret).Scan(&n); err != nil || n != 0 {
		t.Fatalf("secret found in table (%d, %v)", n, err)
	}
	// GET and list never show it.
	if r := b.do(t, b.keyA, "GET", "/v1/webhooks/"+id, nil); r.Status != 200 || r.Body["secret"] != nil || r.Body["status"] != "active" {
		t.Errorf("get: %d %v", r.Status, r.Body)
	}
}

func TestRetryKeepsWebhookID(t *testing.T) {
	t.Parallel()
	b := setup(t, opts{})
	rc := newReceiver(t, func(n int, w http.ResponseWriter, _ *http.Request) {
		if n <= 3 {
			http.Error(w, "try later", http.StatusInternalServerError)
		}
	})
	id, secret := b.register(t, b.keyA, map[string]any{"url": rc.URL})
	b.emit(t, completed("acme", "job-r"))

	var ids []string
	for i := 0; i < 4; i++ {
		got := rc.next(t, wait)
		if !verify(secret, got.header, got.body) {
			t.Fatalf("attempt %d: signature does not verify", i+1)
		}
		ids = append(ids, got.header.Get("webhook-id"))
	}
	for _, x := range ids[1:] {
		if x != ids[0] {
			t.Fatalf("webhook-id changed across retries: %v", ids)
		}
	}
	rc.none(t, 300*time.Millisecond)
	deadline := time.Now().Add(wait)
	for {
		r := b.do(t, b.keyA, "GET", "/v1/webhooks/"+id+"/deliveries", nil)
		ds, _ := r.Body["deliveries"].([]any)
		if len(ds) == 1 {
			d := ds[0].(map[string]any)
			if d["status"] == "delivered" && d["attempts"] == float64(4) {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("deliveries: %v", r.Body)
		}
		time.Sleep(20 * time.Millisecond)
	}
	var attempts int
	if err := b.deps.Postgres.QueryRow(context.Background(), `SELECT count(*) FROM webhook_attempts`).Scan(&attempts); err != nil || attempts != 4 {
		t.Fatalf("attempt rows = %d, %v", attempts, err)
	}
}

func TestPrivateURLRefusedUnlessAllowlisted(t *testing.T) {
	t.Parallel()
	t.Run("guarded", func(t *testing.T) {
		t.Parallel()
		b := setup(t, opts{noAllow: true})
		for _, u := range []string{"http://127.0.0.1:8080/x", "https://10.1.2.3/x", "http://169.254.169.254/latest/meta-data",
			"http://[::1]/x", "http://localhost:9/x", "http://192.168.1.1/"} {
			r := b.do(t, b.keyA, "POST", "/v1/webhooks", map[string]any{"url": u})
			if r.Status != http.StatusUnprocessableEntity || r.ErrorCode() != "url_not_allowed" {
				t.Errorf("%s: %d %v", u, r.Status, r.Body)
			}
		}
		for _, u := range []string{"ftp://example.com/", "not a url", "", "http:///nohost"} {
			r := b.do(t, b.keyA, "POST", "/v1/webhooks", map[string]any{"url": u})
			if r.Status != http.StatusUnprocessableEntity || r.ErrorCode() != "invalid_url" {
				t.Errorf("%q: %d %v", u, r.Status, r.Body)
			}
		}
		r := b.do(t, b.keyA, "POST", "/v1/webhooks", map[string]any{"url": "https://93.184.215.14/x", "event_types": []string{"nope"}})
		if r.Status != http.StatusUnprocessableEntity || r.ErrorCode() != "validation_failed" {
			t.Errorf("bad event type: %d %v", r.Status, r.Body)
		}
		// A public literal address is accepted.
		b.register(t, b.keyA, map[string]any{"url": "https://93.184.215.14/x"})
	})
	t.Run("allowlisted", func(t *testing.T) {
		t.Parallel()
		b := setup(t, opts{})
		b.register(t, b.keyA, map[string]any{"url": "http://127.0.0.1:8080/x"})
		r := b.do(t, b.keyA, "POST", "/v1/webhooks", map[string]any{"url": "https://10.1.2.3/x"})
		if r.Status != http.StatusUnprocessableEntity || r.ErrorCode() != "url_not_allowed" {
			t.Errorf("10.1.2.3 outside the allowlist: %d %v", r.Status, r.Body)
		}
	})
}

func TestSlowEndpointDoesNotDelayOthers(t *testing.T) {
	t.Parallel()
	b := setup(t, opts{cfg: webhooks.Config{Concurrency: 4, EndpointConcurrency: 1, Timeout: 30 * time.Second}})
	release := make(chan struct{})
	slow := newReceiver(t, func(_ int, w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	fast := newReceiver(t, nil)
	b.register(t, b.keyA, map[string]any{"url": slow.URL})
	b.register(t, b.keyA, map[string]any{"url": fast.URL})
	const n = 6
	for i := 0; i < n; i++ {
		b.emit(t, completed("acme", "job-s"+string(rune('a'+i))))
	}
	first := slow.next(t, wait)
	_ = first
	// Every event reaches the fast endpoint while the slow one still holds
	// its first request.
	for i := 0; i < n; i++ {
		fast.next(t, wait)
	}
	select {
	case <-slow.ch:
		t.Fatal("slow endpoint got a second request beyond its in-flight cap")
	default:
	}
	close(release)
	for i := 1; i < n; i++ {
		slow.next(t, wait)
	}
}

func TestTenantIsolation(t *testing.T) {
	t.Parallel()
	b := setup(t, opts{})
	rc := newReceiver(t, nil)
	id, _ := b.register(t, b.keyA, map[string]any{"url": rc.URL})
	for _, c := range []struct{ method, path string }{
		{"GET", "/v1/webhooks/" + id}, {"GET", "/v1/webhooks/" + id + "/deliveries"},
		{"POST", "/v1/webhooks/" + id + "/rotate-secret"}, {"DELETE", "/v1/webhooks/" + id},
	} {
		if r := b.do(t, b.keyB, c.method, c.path, nil); r.Status != http.StatusNotFound {
			t.Errorf("globex %s %s: %d %v", c.method, c.path, r.Status, r.Body)
		}
	}
	if r := b.do(t, b.keyB, "GET", "/v1/webhooks", nil); len(r.Body["webhooks"].([]any)) != 0 {
		t.Errorf("globex list: %v", r.Body)
	}
	if r := b.do(t, b.keyA, "GET", "/v1/webhooks", nil); len(r.Body["webhooks"].([]any)) != 1 {
		t.Errorf("acme list: %v", r.Body)
	}
	// globex's events never reach acme's endpoint.
	b.emit(t, completed("globex", "job-g"))
	eventID := b.emit(t, completed("acme", "job-a"))
	got := rc.next(t, wait)
	var ce map[string]any
	_ = json.Unmarshal(got.body, &ce)
	if ce["id"] != eventID || ce["tenant"] != "acme" {
		t.Fatalf("got %s", got.body)
	}
	rc.none(t, 500*time.Millisecond)
	// acme deletes it: gone for acme too.
	if r := b.do(t, b.keyA, "DELETE", "/v1/webhooks/"+id, nil); r.Status != http.StatusNoContent {
		t.Fatalf("delete: %d", r.Status)
	}
	if r := b.do(t, b.keyA, "GET", "/v1/webhooks/"+id, nil); r.Status != http.StatusNotFound {
		t.Fatalf("get after delete: %d", r.Status)
	}
}

// TestEndpointChangeReachesOtherReplicaAtOnce registers an endpoint through
// one replica and has another, whose periodic refresh is an hour away, fan
// the next event out: the fan-out notices the change inside its own
// transaction, so no event produced after the registration answered is
// missed.
func TestEndpointChangeReachesOtherReplicaAtOnce(t *testing.T) {
	t.Parallel()
	b := setup(t, opts{serveOnly: true, cfg: webhooks.Config{CacheRefresh: time.Hour}})
	other := b.replica(t) // loaded before the endpoint exists
	testenv.Run(t, other)
	rc := newReceiver(t, nil)
	id, _ := b.register(t, b.keyA, map[string]any{"url": rc.URL})
	eventID := b.emit(t, completed("acme", "job-1"))
	got := rc.next(t, wait)
	var ce map[string]any
	_ = json.Unmarshal(got.body, &ce)
	if ce["id"] != eventID {
		t.Fatalf("got %s", got.body)
	}
	// Deleted through the first replica: the next event is not sent.
	if r := b.do(t, b.keyA, "DELETE", "/v1/webhooks/"+id, nil); r.Status != http.StatusNoContent {
		t.Fatalf("delete: %d", r.Status)
	}
	b.emit(t, completed("acme", "job-2"))
	rc.none(t, time.Second)
}

func TestRotateSecretSignsWithBoth(t *testing.T) {
	t.Parallel()
	b := setup(t, opts{})
	rc := newReceiver(t, nil)
	id, oldSecret := b.register(t, b.keyA, map[string]any{"url": rc.URL})
	r := b.do(t, b.keyA, "POST", "/v1/webhooks/"+id+"/rotate-secret", nil)
	newSecret, _ := r.Body["secret"].(string)
	if r.Status != http.StatusOK || !strings.HasPrefix(newSecret, "whsec_") || newSecret == oldSecret || r.Body["previous_secret_expires_at"] == nil {
		t.Fatalf("rotate: %d %v", r.Status, r.Body)
	}
	b.emit(t, completed("acme", "job-rot"))
	got := rc.next(t, wait)
	if sigs := strings.Fields(got.header.Get("webhook-signature")); len(sigs) != 2 {
		t.Fatalf("want two signatures, got %q", got.header.Get("webhook-signature"))
	}
	if !verify(newSecret, got.header, got.body) || !verify(oldSecret, got.header, got.body) {
		t.Fatal("the new and the old secret must both verify")
	}
}

func TestGoneDisablesEndpoint(t *testing.T) {
	t.Parallel()
	b := setup(t, opts{})
	rc := newReceiver(t, func(_ int, w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusGone) })
	id, _ := b.register(t, b.keyA, map[string]any{"url": rc.URL})
	b.emit(t, completed("acme", "job-1"))
	rc.next(t, wait)
	deadline := time.Now().Add(wait)
	for {
		r := b.do(t, b.keyA, "GET", "/v1/webhooks/"+id, nil)
		if r.Body["status"] == "disabled" {
			if !strings.Contains(r.Body["disabled_reason"].(string), "410") {
				t.Errorf("reason: %v", r.Body["disabled_reason"])
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not disabled: %v", r.Body)
		}
		time.Sleep(20 * time.Millisecond)
	}
	b.emit(t, completed("acme", "job-2"))
	rc.none(t, 500*time.Millisecond)

	// Re-enabled, it receives new events again.
	if r := b.do(t, b.keyA, "POST", "/v1/webhooks/"+id+"/enable", nil); r.Status != 200 || r.Body["status"] != "active" {
		t.Fatalf("enable: %d %v", r.Status, r.Body)
	}
	b.emit(t, completed("acme", "job-3"))
	got := rc.next(t, wait)
	if !strings.Contains(string(got.body), "job-3") {
		t.Fatalf("got %s", got.body)
	}
}

func TestQueueAndTypeFilter(t *testing.T) {
	t.Parallel()
	b := setup(t, opts{})
	rc := newReceiver(t, nil)
	b.register(t, b.keyA, map[string]any{"url": rc.URL, "event_types": []string{"completed"},
		"filter": map[string]any{"queue": "emails", "type": "send"}})
	b.emit(t, enqueued("acme", "job-other", "default", "send"))
	b.emit(t, enqueued("acme", "job-match", "emails", "send"))
	time.Sleep(300 * time.Millisecond) // let the fan-out see the enqueued events first
	b.emit(t, completed("acme", "job-other"))
	b.emit(t, completed("acme", "job-match"))
	got := rc.next(t, wait)
	var ce map[string]any
	_ = json.Unmarshal(got.body, &ce)
	if ce["subject"] != "job-match" || ce["type"] != "ferry.job.completed.v1" {
		t.Fatalf("got %s", got.body)
	}
	rc.none(t, 500*time.Millisecond)
}

// pages follows next_cursor from path (which holds a limit) to the last
// page and returns the ids of key's items, in order.
func (b *bundle) pages(t *testing.T, key, path, items string) (ids []string, pages int) {
	t.Helper()
	next := ""
	for pages = 1; ; pages++ {
		p := path
		if next != "" {
			p += "&cursor=" + url.QueryEscape(next)
		}
		r := b.do(t, key, "GET", p, nil)
		list, ok := r.Body[items].([]any)
		cur, present := r.Body["next_cursor"].(string)
		if r.Status != http.StatusOK || !ok || !present {
			t.Fatalf("GET %s: %d %s", p, r.Status, r.Raw)
		}
		for _, it := range list {
			ids = append(ids, it.(map[string]any)["id"].(string))
		}
		if cur == "" {
			return ids, pages
		}
		if pages > 100 {
			t.Fatal("pagination does not end")
		}
		next = cur
	}
}

func TestListsPaginate(t *testing.T) {
	t.Parallel()
	b := setup(t, opts{})
	rc := newReceiver(t, nil)
	var want []string
	for range 5 {
		id, _ := b.register(t, b.keyA, map[string]any{"url": rc.URL})
		want = append(want, id)
	}
	b.register(t, b.keyB, map[string]any{"url": rc.URL})
	got, pages := b.pages(t, b.keyA, "/v1/webhooks?limit=2", "webhooks")
	if strings.Join(got, ",") != strings.Join(want, ",") || pages != 3 {
		t.Fatalf("webhooks in %d pages: %v, want %v", pages, got, want)
	}

	// Deliveries of one endpoint: newest first, no gaps or repeats.
	for i := range 3 {
		b.emit(t, completed("acme", fmt.Sprintf("job-p%d", i)))
	}
	deadline := time.Now().Add(wait)
	var deliveries []string
	for {
		deliveries, pages = b.pages(t, b.keyA, "/v1/webhooks/"+want[0]+"/deliveries?limit=2", "deliveries")
		if len(deliveries) == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("deliveries: %v", deliveries)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if pages != 2 || deliveries[0] == deliveries[1] || deliveries[1] == deliveries[2] || deliveries[0] == deliveries[2] {
		t.Fatalf("deliveries in %d pages: %v", pages, deliveries)
	}

	// Pagination parameters answer as on every list route.
	for _, path := range []string{"/v1/webhooks", "/v1/webhooks/" + want[0] + "/deliveries"} {
		for q, code := range map[string]string{"limit=0": "invalid_parameter", "limit=201": "invalid_parameter", "limit=x": "invalid_parameter",
			"cursor=" + want[1]: "invalid_cursor", "cursor=12": "invalid_cursor", "cursor=e30": "invalid_cursor"} {
			r := b.do(t, b.keyA, "GET", path+"?"+q, nil)
			e, _ := r.Body["error"].(map[string]any)
			fields, _ := e["fields"].(map[string]any)
			if r.Status != http.StatusBadRequest || r.ErrorCode() != code || (code == "invalid_parameter" && fields["limit"] == nil) {
				t.Errorf("%s?%s: %d %s", path, q, r.Status, r.Raw)
			}
		}
	}
}
