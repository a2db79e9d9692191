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
	if r.status != http.StatusCreated {
		t.Fatalf("create tenant %s: %d %s", body, r.status, r.raw)
	}
	return r.body
}

func fieldsOf(r resp) map[string]any {
	e, _ := r.body["error"].(map[string]any)
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
		if r := b.do(t, b.keyA, c.method, c.path, `{}`); r.status != http.StatusForbidden || errCode(r) != "forbidden" {
			t.Errorf("tenant key on %s %s: %d %s", c.method, c.path, r.status, r.raw)
		}
		if r := b.do(t, "", c.method, c.path, `{}`); r.status != http.StatusUnauthorized {
			t.Errorf("no key on %s %s: %d", c.method, c.path, r.status)
		}
	}

	created := b.createTenant(t, `{"id":"initech","name":"Initech","weight":3,"rate_limit":{"per_second":50,"burst":100},"max_queued":1000,"max_running":20}`)
	key, keyID := created["api_key"].(string), created["key_id"].(string)
	if created["id"] != "initech" || !strings.HasPrefix(key, "fry_") || !strings.HasPrefix(keyID, "key_") ||
		created["weight"] != 3.0 || created["max_queued"] != 1000.0 || created["disabled"] != false ||
		created["rate_limit"].(map[string]any)["burst"] != 100.0 {
		t.Fatalf("created: %v", created)
	}
	if r := b.do(t, adminKey, "POST", "/v1/admin/tenants", `{"id":"initech","name":"again"}`); r.status != 409 || errCode(r) != "tenant_exists" {
		t.Fatalf("duplicate: %d %s", r.status, r.raw)
	}
	r := b.do(t, adminKey, "POST", "/v1/admin/tenants", `{"id":"Bad Id","weight":0,"rate_limit":{"per_second":0,"burst":1},"max_queued":-1}`)
	if f := fieldsOf(r); r.status != 422 || f["id"] == nil || f["name"] == nil || f["weight"] == nil || f["rate_limit.per_second"] == nil || f["max_queued"] == nil {
		t.Fatalf("invalid tenant: %d %s", r.status, r.raw)
	}
	if r := b.do(t, adminKey, "POST", "/v1/admin/tenants", `{"name":"x","colour":1}`); r.status != 400 || errCode(r) != "unknown_field" {
		t.Fatalf("unknown field: %d %s", r.status, r.raw)
	}
	gen := b.createTenant(t, `{"name":"Generated id"}`)
	if !strings.HasPrefix(gen["id"].(string), "tnt_") || gen["weight"] != 1.0 || gen["rate_limit"] != nil {
		t.Fatalf("generated tenant: %v", gen)
	}

	// The new key works at once.
	if r := b.do(t, key, "POST", "/v1/jobs", `{"type":"noop"}`); r.status != 202 || r.body["tenant_id"] != "initech" {
		t.Fatalf("new tenant's key: %d %s", r.status, r.raw)
	}
	if r := b.do(t, adminKey, "GET", "/v1/admin/tenants/initech", nil); r.status != 200 || r.body["name"] != "Initech" {
		t.Fatalf("get tenant: %d %s", r.status, r.raw)
	}
	if r := b.do(t, adminKey, "GET", "/v1/admin/tenants/nope", nil); r.status != 404 {
		t.Fatalf("get missing tenant: %d", r.status)
	}
	list := b.do(t, adminKey, "GET", "/v1/admin/tenants?limit=2", nil)
	if list.status != 200 || len(list.body["tenants"].([]any)) != 2 || list.body["next_cursor"] == nil {
		t.Fatalf("list tenants: %d %s", list.status, list.raw)
	}
	rest := b.do(t, adminKey, "GET", "/v1/admin/tenants?cursor="+list.body["next_cursor"].(string), nil)
	if n := len(list.body["tenants"].([]any)) + len(rest.body["tenants"].([]any)); n != 4 { // acme, globex, initech, tnt_…
		t.Fatalf("tenants over two pages: %d (%s)", n, rest.raw)
	}

	// PATCH changes only what it names; rate_limit null removes the limit.
	p := b.do(t, adminKey, "PATCH", "/v1/admin/tenants/initech", `{"weight":2,"rate_limit":null,"max_payload_bytes":4096}`)
	if p.status != 200 || p.body["weight"] != 2.0 || p.body["rate_limit"] != nil || p.body["max_payload_bytes"] != 4096.0 ||
		p.body["max_queued"] != 1000.0 || p.body["name"] != "Initech" {
		t.Fatalf("patch: %d %s", p.status, p.raw)
	}
	if r := b.do(t, adminKey, "PATCH", "/v1/admin/tenants/nope", `{"weight":2}`); r.status != 404 {
		t.Fatalf("patch missing: %d", r.status)
	}
	if r := b.do(t, adminKey, "PATCH", "/v1/admin/tenants/initech", `{"max_running":-2}`); r.status != 422 || fieldsOf(r)["max_running"] == nil {
		t.Fatalf("patch invalid: %d %s", r.status, r.raw)
	}

	// A second key; the key id is the actor of the job's events.
	k2 := b.do(t, adminKey, "POST", "/v1/admin/tenants/initech/keys", nil)
	key2, key2ID := k2.body["api_key"].(string), k2.body["id"].(string)
	if k2.status != 201 || !strings.HasPrefix(key2, "fry_") || key2ID == keyID || k2.body["tenant_id"] != "initech" {
		t.Fatalf("new key: %d %s", k2.status, k2.raw)
	}
	if r := b.do(t, adminKey, "POST", "/v1/admin/tenants/nope/keys", nil); r.status != 404 {
		t.Fatalf("key for missing tenant: %d", r.status)
	}
	sub := b.do(t, key2, "POST", "/v1/jobs", `{"type":"noop"}`)
	if sub.status != 202 {
		t.Fatalf("submit with second key: %d %s", sub.status, sub.raw)
	}
	ev, err := schema.Decode(b.records(t, "ferry.jobs.enqueued", 1, byKey(sub.body["id"].(string)))[0])
	if err != nil {
		t.Fatal(err)
	}
	if actor := ev.Data.(schema.Enqueued).Actor; actor != key2ID {
		t.Fatalf("actor %q, want the key id %q", actor, key2ID)
	}
	keys := b.do(t, adminKey, "GET", "/v1/admin/tenants/initech/keys", nil)
	if keys.status != 200 || len(keys.body["keys"].([]any)) != 2 || strings.Contains(string(keys.raw), "hash") ||
		strings.Contains(string(keys.raw), key) || strings.Contains(string(keys.raw), key2) {
		t.Fatalf("keys: %d %s", keys.status, keys.raw)
	}

	// Revoke: 401 within seconds; the other key keeps working.
	start := time.Now()
	if r := b.do(t, adminKey, "DELETE", "/v1/admin/keys/"+key2ID, nil); r.status != 204 {
		t.Fatalf("revoke: %d %s", r.status, r.raw)
	}
	if r := b.do(t, adminKey, "DELETE", "/v1/admin/keys/"+key2ID, nil); r.status != 204 {
		t.Fatalf("revoke again: %d %s", r.status, r.raw)
	}
	if r := b.do(t, adminKey, "DELETE", "/v1/admin/keys/key_nope", nil); r.status != 404 {
		t.Fatalf("revoke missing: %d", r.status)
	}
	eventually(t, func() error {
		if r := b.do(t, key2, "GET", "/v1/jobs", nil); r.status != 401 {
			return fmt.Errorf("revoked key answers %d", r.status)
		}
		return nil
	})
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("revocation took %v to apply", d)
	}
	t.Logf("revoked key refused after %v", time.Since(start).Round(time.Millisecond))
	if r := b.do(t, key, "GET", "/v1/jobs", nil); r.status != 200 {
		t.Fatalf("other key after revoke: %d", r.status)
	}
	keys = b.do(t, adminKey, "GET", "/v1/admin/tenants/initech/keys", nil)
	revoked := 0
	for _, k := range keys.body["keys"].([]any) {
		if k.(map[string]any)["revoked_at"] != nil {
			revoked++
		}
	}
	if revoked != 1 {
		t.Fatalf("keys after revoke: %s", keys.raw)
	}

	// Disable: every key of the tenant answers 401; enable: back.
	if r := b.do(t, adminKey, "PATCH", "/v1/admin/tenants/initech", `{"disabled":true}`); r.status != 200 || r.body["disabled"] != true || r.body["disabled_at"] == nil {
		t.Fatalf("disable: %d %s", r.status, r.raw)
	}
	eventually(t, func() error {
		if r := b.do(t, key, "GET", "/v1/jobs", nil); r.status != 401 {
			return fmt.Errorf("disabled tenant's key answers %d", r.status)
		}
		return nil
	})
	if r := b.do(t, adminKey, "PATCH", "/v1/admin/tenants/initech", `{"disabled":false}`); r.status != 200 || r.body["disabled"] != false {
		t.Fatalf("enable: %d %s", r.status, r.raw)
	}
	eventually(t, func() error {
		if r := b.do(t, key, "GET", "/v1/jobs", nil); r.status != 200 {
			return fmt.Errorf("re-enabled tenant's key answers %d", r.status)
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
	if first.status != 202 {
		t.Fatalf("first: %d %s", first.status, first.raw)
	}
	if r := b.do(t, key, "POST", "/v1/jobs/batch", `{"jobs":[{"type":"noop"},{"type":"noop"},{"type":"noop"},{"type":"noop"}]}`); r.status != 413 || errCode(r) != "batch_exceeds_rate_limit" {
		t.Fatalf("batch above burst: %d %s", r.status, r.raw)
	}
	// Two tokens left: a batch of two valid jobs and one invalid one passes.
	r := b.do(t, key, "POST", "/v1/jobs/batch", `{"jobs":[{"type":"noop"},{"type":"noop"},{"type":"noop","priority":42}]}`)
	if r.status != 202 || r.body["jobs"].([]any)[2].(map[string]any)["error"] == nil {
		t.Fatalf("batch within the bucket: %d %s", r.status, r.raw)
	}
	// The bucket is empty.
	r = b.do(t, key, "POST", "/v1/jobs", `{"type":"noop"}`, "Idempotency-Key", "second")
	if r.status != 429 || errCode(r) != "tenant_rate_limited" {
		t.Fatalf("over the limit: %d %s", r.status, r.raw)
	}
	ra := r.raw // keep for the message
	hdr := b.retryAfter(t, key, `{"type":"noop"}`)
	if hdr < 1 || hdr > 2 {
		t.Fatalf("Retry-After %d (answer %s), want 1-2 s at 0.5 jobs/s", hdr, ra)
	}
	// A rejected request holds no Idempotency-Key, and a replay costs nothing.
	if r := b.do(t, key, "POST", "/v1/jobs", `{"type":"noop"}`, "Idempotency-Key", "first"); r.status != 200 || r.body["id"] != first.body["id"] {
		t.Fatalf("replay while limited: %d %s", r.status, r.raw)
	}
	r = b.do(t, key, "POST", "/v1/jobs/batch", `{"jobs":[{"type":"noop"}]}`)
	if r.status != 429 || errCode(r) != "tenant_rate_limited" {
		t.Fatalf("batch over the limit: %d %s", r.status, r.raw)
	}
	// Another tenant is not affected.
	if r := b.do(t, b.keyA, "POST", "/v1/jobs", `{"type":"noop"}`); r.status != 202 {
		t.Fatalf("other tenant: %d %s", r.status, r.raw)
	}
	// Tokens come back.
	time.Sleep(2100 * time.Millisecond)
	if r := b.do(t, key, "POST", "/v1/jobs", `{"type":"noop"}`, "Idempotency-Key", "second"); r.status != 202 {
		t.Fatalf("after refill: %d %s", r.status, r.raw)
	}
}

// retryAfter submits body and returns the Retry-After of its 429.
func (b *bundle) retryAfter(t *testing.T, key, body string) int {
	t.Helper()
	req, _ := http.NewRequest("POST", b.srv.URL+"/v1/jobs", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+key)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 429 {
		t.Fatalf("want 429, got %d", res.StatusCode)
	}
	n, err := strconv.Atoi(res.Header.Get("Retry-After"))
	if err != nil {
		t.Fatalf("Retry-After %q", res.Header.Get("Retry-After"))
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
		if r.status != 202 {
			t.Fatalf("submit: %d %s", r.status, r.raw)
		}
		ids = append(ids, r.body["id"].(string))
	}
	// Two fit no more: the whole batch is refused.
	r := b.do(t, key, "POST", "/v1/jobs/batch", `{"jobs":[{"type":"noop"},{"type":"noop"}]}`)
	if r.status != 429 || errCode(r) != "tenant_queue_full" {
		t.Fatalf("batch past max_queued: %d %s", r.status, r.raw)
	}
	if r := b.do(t, key, "POST", "/v1/jobs", `{"type":"noop","delay":"1h"}`); r.status != 202 {
		t.Fatalf("third: %d %s", r.status, r.raw)
	}
	b.projected(t, key, 3)
	time.Sleep(1100 * time.Millisecond) // the cached count expires; the projection's count holds
	if n := b.retryAfter(t, key, `{"type":"noop"}`); n < 1 {
		t.Fatalf("Retry-After %d", n)
	}
	if r := b.do(t, b.keyA, "POST", "/v1/jobs", `{"type":"noop"}`); r.status != 202 {
		t.Fatalf("other tenant: %d %s", r.status, r.raw)
	}
	if r := b.do(t, key, "POST", "/v1/jobs/"+ids[0]+"/cancel", nil); r.status != 202 {
		t.Fatalf("cancel: %d %s", r.status, r.raw)
	}
	eventually(t, func() error {
		if r := b.do(t, key, "POST", "/v1/jobs", `{"type":"noop"}`); r.status != 202 {
			return fmt.Errorf("after a cancel: %d %s", r.status, r.raw)
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
		if r.status != c.status {
			t.Errorf("%d-byte payload: %d %s, want %d", len(c.body), r.status, r.raw, c.status)
			continue
		}
		if c.status == 413 && errCode(r) != "payload_too_large" {
			t.Errorf("413 code %s", errCode(r))
		}
	}
	// In a batch the too-large item is named; the others are accepted.
	r := b.do(t, small, "POST", "/v1/jobs/batch", `{"jobs":[`+payload(10)+`,`+payload(200)+`]}`)
	items := r.body["jobs"].([]any)
	if r.status != 202 || items[0].(map[string]any)["id"] == nil ||
		items[1].(map[string]any)["error"].(map[string]any)["code"] != "payload_too_large" {
		t.Fatalf("batch: %d %s", r.status, r.raw)
	}
	six := `{"jobs":[` + strings.TrimSuffix(strings.Repeat(`{"type":"noop"},`, 6), ",") + `]}`
	if r := b.do(t, b.keyA, "POST", "/v1/jobs/batch", six); r.status != 413 || errCode(r) != "batch_too_large" {
		t.Fatalf("batch of 6: %d %s", r.status, r.raw)
	}
	// Far past and far future run_at are field errors.
	for _, body := range []string{`{"type":"noop","run_at":"` + time.Now().Add(-2*time.Hour).UTC().Format(time.RFC3339) + `"}`,
		`{"type":"noop","run_at":"` + time.Now().Add(2*365*24*time.Hour).UTC().Format(time.RFC3339) + `"}`} {
		if r := b.do(t, b.keyA, "POST", "/v1/jobs", body); r.status != 422 || fieldsOf(r)["run_at"] == nil {
			t.Errorf("%s: %d %s", body, r.status, r.raw)
		}
	}
}
