package api_test

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ferryhq/ferry/events/schema"
	"github.com/ferryhq/ferry/services/api"
)

// createTenant creates a tenant through the admin route and returns its
// resource (with api_key and key_id).
func (b *bundle) createTenant(t *testing.T, body string) map[string]any {
	t.Helper()
	r := b.do(t, adminKey, "POST", "/v1/admin/tenants", body)
	if r.Status != http.StatusCreated {
		t.Fatalf("create tenant %s: %d %s", body, r.Status, r.Raw)
	}
	return r.Body
}

func fieldsOf(r resp) map[string]any {
	e, _ := r.Body["error"].(map[string]any)
	f, _ := e["fields"].(map[string]any)
	return f
}

// TestAdminTenantsAndKeys: tenants and keys are managed by the admin key
// only; a new key works at once, a revoked key and a disabled tenant's keys
// answer 401 within seconds, and the key id is the actor of events.
func TestAdminTenantsAndKeys(t *testing.T) {
	b := setup(t, api.Config{})
	// Only the admin key may use admin routes.
	for _, c := range []struct{ method, path string }{
		{"POST", "/v1/admin/tenants"}, {"GET", "/v1/admin/tenants"}, {"GET", "/v1/admin/tenants/acme"},
		{"PATCH", "/v1/admin/tenants/acme"}, {"POST", "/v1/admin/tenants/acme/keys"},
		{"GET", "/v1/admin/tenants/acme/keys"}, {"DELETE", "/v1/admin/keys/key_x"},
	} {
		if r := b.do(t, b.keyA, c.method, c.path, `{}`); r.Status != http.StatusForbidden || r.ErrorCode() != "forbidden" {
			t.Errorf("tenant key on %s %s: %d %s", c.method, c.path, r.Status, r.Raw)
		}
		if r := b.do(t, "", c.method, c.path, `{}`); r.Status != http.StatusUnauthorized {
			t.Errorf("no key on %s %s: %d", c.method, c.path, r.Status)
		}
	}

	created := b.createTenant(t, `{"id":"initech","name":"Initech","weight":3,"rate_limit":{"per_second":50,"burst":100},"max_queued":1000,"max_running":20}`)
	key, keyID := created["api_key"].(string), created["key_id"].(string)
	if created["id"] != "initech" || !strings.HasPrefix(key, "fry_") || !strings.HasPrefix(keyID, "key_") ||
		created["weight"] != 3.0 || created["max_queued"] != 1000.0 || created["disabled"] != false ||
		created["rate_limit"].(map[string]any)["burst"] != 100.0 {
		t.Fatalf("created: %v", created)
	}
	if r := b.do(t, adminKey, "POST", "/v1/admin/tenants", `{"id":"initech","name":"again"}`); r.Status != 409 || r.ErrorCode() != "tenant_exists" {
		t.Fatalf("duplicate: %d %s", r.Status, r.Raw)
	}
	r := b.do(t, adminKey, "POST", "/v1/admin/tenants", `{"id":"Bad Id","weight":0,"rate_limit":{"per_second":0,"burst":1},"max_queued":-1}`)
	if f := fieldsOf(r); r.Status != 422 || f["id"] == nil || f["name"] == nil || f["weight"] == nil || f["rate_limit.per_second"] == nil || f["max_queued"] == nil {
		t.Fatalf("invalid tenant: %d %s", r.Status, r.Raw)
	}
	if r := b.do(t, adminKey, "POST", "/v1/admin/tenants", `{"name":"x","colour":1}`); r.Status != 400 || r.ErrorCode() != "unknown_field" {
		t.Fatalf("unknown field: %d %s", r.Status, r.Raw)
	}
	gen := b.createTenant(t, `{"name":"Generated id"}`)
	if !strings.HasPrefix(gen["id"].(string), "tnt_") || gen["weight"] != 1.0 || gen["rate_limit"] != nil {
		t.Fatalf("generated tenant: %v", gen)
	}

	// The new key works at once.
	if r := b.do(t, key, "POST", "/v1/jobs", `{"type":"noop"}`); r.Status != 202 || r.Body["tenant_id"] != "initech" {
		t.Fatalf("new tenant's key: %d %s", r.Status, r.Raw)
	}
	if r := b.do(t, adminKey, "GET", "/v1/admin/tenants/initech", nil); r.Status != 200 || r.Body["name"] != "Initech" {
		t.Fatalf("get tenant: %d %s", r.Status, r.Raw)
	}
	if r := b.do(t, adminKey, "GET", "/v1/admin/tenants/nope", nil); r.Status != 404 {
		t.Fatalf("get missing tenant: %d", r.Status)
	}
	list := b.do(t, adminKey, "GET", "/v1/admin/tenants?limit=2", nil)
	if list.Status != 200 || len(list.Body["tenants"].([]any)) != 2 || list.Body["next_cursor"] == nil || list.Body["next_cursor"] == "" {
		t.Fatalf("list tenants: %d %s", list.Status, list.Raw)
	}
	rest := b.do(t, adminKey, "GET", "/v1/admin/tenants?cursor="+list.Body["next_cursor"].(string), nil)
	if n := len(list.Body["tenants"].([]any)) + len(rest.Body["tenants"].([]any)); n != 4 { // acme, globex, initech, tnt_…
		t.Fatalf("tenants over two pages: %d (%s)", n, rest.Raw)
	}
	if rest.Status != 200 || rest.Body["next_cursor"] != "" {
		t.Fatalf("last page of tenants: %d %s", rest.Status, rest.Raw)
	}
	if r := b.do(t, adminKey, "GET", "/v1/admin/tenants?limit=4", nil); r.Status != 200 || len(r.Body["tenants"].([]any)) != 4 || r.Body["next_cursor"] != "" {
		t.Fatalf("full last page of tenants: %d %s", r.Status, r.Raw)
	}
	// A tenant id is not a cursor.
	b.badListParams(t, adminKey, "/v1/admin/tenants", "acme", "globex")

	// PATCH changes only what it names; rate_limit null removes the limit.
	p := b.do(t, adminKey, "PATCH", "/v1/admin/tenants/initech", `{"weight":2,"rate_limit":null,"max_payload_bytes":4096}`)
	if p.Status != 200 || p.Body["weight"] != 2.0 || p.Body["rate_limit"] != nil || p.Body["max_payload_bytes"] != 4096.0 ||
		p.Body["max_queued"] != 1000.0 || p.Body["name"] != "Initech" {
		t.Fatalf("patch: %d %s", p.Status, p.Raw)
	}
	if r := b.do(t, adminKey, "PATCH", "/v1/admin/tenants/nope", `{"weight":2}`); r.Status != 404 {
		t.Fatalf("patch missing: %d", r.Status)
	}
	if r := b.do(t, adminKey, "PATCH", "/v1/admin/tenants/initech", `{"max_running":-2}`); r.Status != 422 || fieldsOf(r)["max_running"] == nil {
		t.Fatalf("patch invalid: %d %s", r.Status, r.Raw)
	}

	// A second key; the key id is the actor of the job's events.
	k2 := b.do(t, adminKey, "POST", "/v1/admin/tenants/initech/keys", nil)
	key2, key2ID := k2.Body["api_key"].(string), k2.Body["id"].(string)
	if k2.Status != 201 || !strings.HasPrefix(key2, "fry_") || key2ID == keyID || k2.Body["tenant_id"] != "initech" {
		t.Fatalf("new key: %d %s", k2.Status, k2.Raw)
	}
	if r := b.do(t, adminKey, "POST", "/v1/admin/tenants/nope/keys", nil); r.Status != 404 {
		t.Fatalf("key for missing tenant: %d", r.Status)
	}
	sub := b.do(t, key2, "POST", "/v1/jobs", `{"type":"noop"}`)
	if sub.Status != 202 {
		t.Fatalf("submit with second key: %d %s", sub.Status, sub.Raw)
	}
	ev, err := schema.Decode(b.records(t, "ferry.jobs.enqueued", 1, byKey(sub.Body["id"].(string)))[0])
	if err != nil {
		t.Fatal(err)
	}
	if actor := ev.Data.(schema.Enqueued).Actor; actor != key2ID {
		t.Fatalf("actor %q, want the key id %q", actor, key2ID)
	}
	keys := b.do(t, adminKey, "GET", "/v1/admin/tenants/initech/keys", nil)
	if keys.Status != 200 || len(keys.Body["keys"].([]any)) != 2 || keys.Body["next_cursor"] != "" || strings.Contains(string(keys.Raw), "hash") ||
		strings.Contains(string(keys.Raw), key) || strings.Contains(string(keys.Raw), key2) {
		t.Fatalf("keys: %d %s", keys.Status, keys.Raw)
	}

	// Revoke: 401 within seconds; the other key keeps working.
	start := time.Now()
	if r := b.do(t, adminKey, "DELETE", "/v1/admin/keys/"+key2ID, nil); r.Status != 204 {
		t.Fatalf("revoke: %d %s", r.Status, r.Raw)
	}
	if r := b.do(t, adminKey, "DELETE", "/v1/admin/keys/"+key2ID, nil); r.Status != 204 {
		t.Fatalf("revoke again: %d %s", r.Status, r.Raw)
	}
	if r := b.do(t, adminKey, "DELETE", "/v1/admin/keys/key_nope", nil); r.Status != 404 {
		t.Fatalf("revoke missing: %d", r.Status)
	}
	eventually(t, func() error {
		if r := b.do(t, key2, "GET", "/v1/jobs", nil); r.Status != 401 {
			return fmt.Errorf("revoked key answers %d", r.Status)
		}
		return nil
	})
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("revocation took %v to apply", d)
	}
	t.Logf("revoked key refused after %v", time.Since(start).Round(time.Millisecond))
	if r := b.do(t, key, "GET", "/v1/jobs", nil); r.Status != 200 {
		t.Fatalf("other key after revoke: %d", r.Status)
	}
	keys = b.do(t, adminKey, "GET", "/v1/admin/tenants/initech/keys", nil)
	revoked := 0
	for _, k := range keys.Body["keys"].([]any) {
		if k.(map[string]any)["revoked_at"] != nil {
			revoked++
		}
	}
	if revoked != 1 {
		t.Fatalf("keys after revoke: %s", keys.Raw)
	}

	// Disable: every key of the tenant answers 401; enable: back.
	if r := b.do(t, adminKey, "PATCH", "/v1/admin/tenants/initech", `{"disabled":true}`); r.Status != 200 || r.Body["disabled"] != true || r.Body["disabled_at"] == nil {
		t.Fatalf("disable: %d %s", r.Status, r.Raw)
	}
	eventually(t, func() error {
		if r := b.do(t, key, "GET", "/v1/jobs", nil); r.Status != 401 {
			return fmt.Errorf("disabled tenant's key answers %d", r.Status)
		}
		return nil
	})
	if r := b.do(t, adminKey, "PATCH", "/v1/admin/tenants/initech", `{"disabled":false}`); r.Status != 200 || r.Body["disabled"] != false {
		t.Fatalf("enable: %d %s", r.Status, r.Raw)
	}
	eventually(t, func() error {
		if r := b.do(t, key, "GET", "/v1/jobs", nil); r.Status != 200 {
			return fmt.Errorf("re-enabled tenant's key answers %d", r.Status)
		}
		return nil
	})
}

// TestRateLimit: the token bucket rejects a request's new jobs all or
// nothing with 429 tenant_rate_limited and Retry-After; replays are free.
func TestRateLimit(t *testing.T) {
	b := setup(t, api.Config{})
	key := b.createTenant(t, `{"id":"limited","name":"Limited","rate_limit":{"per_second":0.5,"burst":3}}`)["api_key"].(string)
	first := b.do(t, key, "POST", "/v1/jobs", `{"type":"noop"}`, "Idempotency-Key", "first")
	if first.Status != 202 {
		t.Fatalf("first: %d %s", first.Status, first.Raw)
	}
	if r := b.do(t, key, "POST", "/v1/jobs/batch", `{"jobs":[{"type":"noop"},{"type":"noop"},{"type":"noop"},{"type":"noop"}]}`); r.Status != 413 || r.ErrorCode() != "batch_exceeds_rate_limit" {
		t.Fatalf("batch above burst: %d %s", r.Status, r.Raw)
	}
	// Two tokens left: a batch of two valid jobs and one invalid one passes.
	r := b.do(t, key, "POST", "/v1/jobs/batch", `{"jobs":[{"type":"noop"},{"type":"noop"},{"type":"noop","priority":42}]}`)
	if r.Status != 202 || r.Body["jobs"].([]any)[2].(map[string]any)["error"] == nil {
		t.Fatalf("batch within the bucket: %d %s", r.Status, r.Raw)
	}
	// The bucket is empty.
	r = b.do(t, key, "POST", "/v1/jobs", `{"type":"noop"}`, "Idempotency-Key", "second")
	if r.Status != 429 || r.ErrorCode() != "tenant_rate_limited" {
		t.Fatalf("over the limit: %d %s", r.Status, r.Raw)
	}
	ra := r.Raw // keep for the message
	hdr := b.retryAfter(t, key, `{"type":"noop"}`)
	if hdr < 1 || hdr > 2 {
		t.Fatalf("Retry-After %d (answer %s), want 1-2 s at 0.5 jobs/s", hdr, ra)
	}
	// A rejected request holds no Idempotency-Key, and a replay costs nothing.
	if r := b.do(t, key, "POST", "/v1/jobs", `{"type":"noop"}`, "Idempotency-Key", "first"); r.Status != 200 || r.Body["id"] != first.Body["id"] {
		t.Fatalf("replay while limited: %d %s", r.Status, r.Raw)
	}
	r = b.do(t, key, "POST", "/v1/jobs/batch", `{"jobs":[{"type":"noop"}]}`)
	if r.Status != 429 || r.ErrorCode() != "tenant_rate_limited" {
		t.Fatalf("batch over the limit: %d %s", r.Status, r.Raw)
	}
	// Another tenant is not affected.
	if r := b.do(t, b.keyA, "POST", "/v1/jobs", `{"type":"noop"}`); r.Status != 202 {
		t.Fatalf("other tenant: %d %s", r.Status, r.Raw)
	}
	// Tokens come back.
	time.Sleep(2100 * time.Millisecond)
	if r := b.do(t, key, "POST", "/v1/jobs", `{"type":"noop"}`, "Idempotency-Key", "second"); r.Status != 202 {
		t.Fatalf("after refill: %d %s", r.Status, r.Raw)
	}
}

// retryAfter submits body and returns the Retry-After of its 429.
func (b *bundle) retryAfter(t *testing.T, key, body string) int {
	t.Helper()
	r := b.do(t, key, "POST", "/v1/jobs", body)
	if r.Status != 429 {
		t.Fatalf("want 429, got %d", r.Status)
	}
	n, err := strconv.Atoi(r.Header.Get("Retry-After"))
	if err != nil {
		t.Fatalf("Retry-After %q", r.Header.Get("Retry-After"))
	}
	return n
}

// TestQueueLimit: max_queued counts the tenant's unfinished jobs; past it,
// 429 tenant_queue_full; a cancelled job frees room.
func TestQueueLimit(t *testing.T) {
	b := setup(t, api.Config{})
	key := b.createTenant(t, `{"id":"small","name":"Small","max_queued":3}`)["api_key"].(string)
	var ids []string
	for range 2 {
		r := b.do(t, key, "POST", "/v1/jobs", `{"type":"noop"}`)
		if r.Status != 202 {
			t.Fatalf("submit: %d %s", r.Status, r.Raw)
		}
		ids = append(ids, r.Body["id"].(string))
	}
	// Two fit no more: the whole batch is refused.
	r := b.do(t, key, "POST", "/v1/jobs/batch", `{"jobs":[{"type":"noop"},{"type":"noop"}]}`)
	if r.Status != 429 || r.ErrorCode() != "tenant_queue_full" {
		t.Fatalf("batch past max_queued: %d %s", r.Status, r.Raw)
	}
	if r := b.do(t, key, "POST", "/v1/jobs", `{"type":"noop","delay":"1h"}`); r.Status != 202 {
		t.Fatalf("third: %d %s", r.Status, r.Raw)
	}
	b.projected(t, key, 3)
	time.Sleep(1100 * time.Millisecond) // the cached count expires; the projection's count holds
	if n := b.retryAfter(t, key, `{"type":"noop"}`); n < 1 {
		t.Fatalf("Retry-After %d", n)
	}
	if r := b.do(t, b.keyA, "POST", "/v1/jobs", `{"type":"noop"}`); r.Status != 202 {
		t.Fatalf("other tenant: %d %s", r.Status, r.Raw)
	}
	if r := b.do(t, key, "POST", "/v1/jobs/"+ids[0]+"/cancel", nil); r.Status != 202 {
		t.Fatalf("cancel: %d %s", r.Status, r.Raw)
	}
	eventually(t, func() error {
		if r := b.do(t, key, "POST", "/v1/jobs", `{"type":"noop"}`); r.Status != 202 {
			return fmt.Errorf("after a cancel: %d %s", r.Status, r.Raw)
		}
		return nil
	})
}

// TestTenantPayloadLimit: a tenant's max_payload_bytes overrides the
// service default, smaller or larger; batches are bounded too.
func TestTenantPayloadLimit(t *testing.T) {
	b := setup(t, api.Config{MaxPayloadBytes: 1000, MaxBatchJobs: 5})
	small := b.createTenant(t, `{"id":"small","name":"Small","max_payload_bytes":100}`)["api_key"].(string)
	large := b.createTenant(t, `{"id":"large","name":"Large","max_payload_bytes":5000}`)["api_key"].(string)
	payload := func(n int) string { return `{"type":"noop","payload":"` + strings.Repeat("a", n) + `"}` }
	for _, c := range []struct {
		key    string
		body   string
		status int
	}{
		{small, payload(50), 202}, {small, payload(200), 413},
		{b.keyA, payload(200), 202}, {b.keyA, payload(3000), 413},
		{large, payload(3000), 202}, {large, payload(6000), 413},
	} {
		r := b.do(t, c.key, "POST", "/v1/jobs", c.body)
		if r.Status != c.status {
			t.Errorf("%d-byte payload: %d %s, want %d", len(c.body), r.Status, r.Raw, c.status)
			continue
		}
		if c.status == 413 && r.ErrorCode() != "payload_too_large" {
			t.Errorf("413 code %s", r.ErrorCode())
		}
	}
	// In a batch the too-large item is named; the others are accepted.
	r := b.do(t, small, "POST", "/v1/jobs/batch", `{"jobs":[`+payload(10)+`,`+payload(200)+`]}`)
	items := r.Body["jobs"].([]any)
	if r.Status != 202 || items[0].(map[string]any)["id"] == nil ||
		items[1].(map[string]any)["error"].(map[string]any)["code"] != "payload_too_large" {
		t.Fatalf("batch: %d %s", r.Status, r.Raw)
	}
	six := `{"jobs":[` + strings.TrimSuffix(strings.Repeat(`{"type":"noop"},`, 6), ",") + `]}`
	if r := b.do(t, b.keyA, "POST", "/v1/jobs/batch", six); r.Status != 413 || r.ErrorCode() != "batch_too_large" {
		t.Fatalf("batch of 6: %d %s", r.Status, r.Raw)
	}
	// Far past and far future run_at are field errors.
	for _, body := range []string{`{"type":"noop","run_at":"` + time.Now().Add(-2*time.Hour).UTC().Format(time.RFC3339) + `"}`,
		`{"type":"noop","run_at":"` + time.Now().Add(2*365*24*time.Hour).UTC().Format(time.RFC3339) + `"}`} {
		if r := b.do(t, b.keyA, "POST", "/v1/jobs", body); r.Status != 422 || fieldsOf(r)["run_at"] == nil {
			t.Errorf("%s: %d %s", body, r.Status, r.Raw)
		}
	}
}

// TestDefaultLimits: a tenant without settings is bounded by the service's
// default max_queued and max_queues; a tenant's own settings override them;
// a refused request creates nothing and others are unaffected.
func TestDefaultLimits(t *testing.T) {
	b := setup(t, api.Config{DefaultMaxQueued: 4, DefaultMaxQueues: 2})
	plain := b.createTenant(t, `{"id":"plain","name":"Plain"}`)["api_key"].(string)
	bigKey := b.createTenant(t, `{"id":"big2","name":"Big","max_queues":3,"max_queued":10}`)["api_key"].(string)
	sub := func(key, queue string) resp {
		return b.do(t, key, "POST", "/v1/jobs", `{"type":"noop","queue":"`+queue+`"}`)
	}
	for _, q := range []string{"a", "b", "a"} {
		if r := sub(plain, q); r.Status != 202 {
			t.Fatalf("queue %s: %d %s", q, r.Status, r.Raw)
		}
	}
	r := sub(plain, "c")
	if r.Status != 429 || r.ErrorCode() != "too_many_queues" {
		t.Fatalf("third queue past the default max_queues: %d %s", r.Status, r.Raw)
	}
	// A batch that would add two names is refused whole.
	r = b.do(t, bigKey, "POST", "/v1/jobs/batch", `{"jobs":[{"type":"noop","queue":"x"},{"type":"noop","queue":"y"},{"type":"noop","queue":"z"},{"type":"noop","queue":"w"}]}`)
	if r.Status != 429 || r.ErrorCode() != "too_many_queues" {
		t.Fatalf("batch of 4 queues past max_queues 3: %d %s", r.Status, r.Raw)
	}
	for _, q := range []string{"x", "y", "z"} {
		if r := sub(bigKey, q); r.Status != 202 {
			t.Fatalf("own max_queues 3, queue %s: %d %s", q, r.Status, r.Raw)
		}
	}
	// Known queues still take jobs, up to the default max_queued.
	if r := sub(plain, "b"); r.Status != 202 {
		t.Fatalf("fourth job: %d %s", r.Status, r.Raw)
	}
	if r := sub(plain, "b"); r.Status != 429 || r.ErrorCode() != "tenant_queue_full" {
		t.Fatalf("fifth job past the default max_queued: %d %s", r.Status, r.Raw)
	}
	b.projected(t, plain, 4)
	if r := b.do(t, b.keyA, "POST", "/v1/jobs", `{"type":"noop","queue":"other"}`); r.Status != 202 {
		t.Fatalf("other tenant: %d %s", r.Status, r.Raw)
	}
	got := b.do(t, adminKey, "GET", "/v1/admin/tenants/big2", nil)
	if got.Body["max_queues"] != float64(3) || got.Body["max_webhook_endpoints"] != float64(0) {
		t.Fatalf("tenant resource: %s", got.Raw)
	}
	if r := b.do(t, adminKey, "PATCH", "/v1/admin/tenants/big2", `{"max_queues":-1}`); r.Status != 422 || fieldsOf(r)["max_queues"] == nil {
		t.Fatalf("negative max_queues: %d %s", r.Status, r.Raw)
	}
}
