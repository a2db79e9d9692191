package webhooks_test

import (
	"fmt"
	"sync"
	"testing"

	"github.com/ferryhq/ferry/services/webhooks"
)

// TestEndpointLimit: a tenant without its own max_webhook_endpoints gets
// the service default; past it, 409 too_many_endpoints, even when the
// requests race; a deleted endpoint frees room; a tenant's own setting
// overrides the default; other tenants are unaffected.
func TestEndpointLimit(t *testing.T) {
	b := setup(t, opts{serveOnly: true, cfg: webhooks.Config{MaxEndpoints: 3}})
	url := func(i int) map[string]any { return map[string]any{"url": fmt.Sprintf("http://127.0.0.1:9/hook/%d", i)} }
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		codes  = map[int]int{}
		errs   = map[string]int{}
		lastID string
	)
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := b.do(t, b.keyA, "POST", "/v1/webhooks", url(i))
			mu.Lock()
			defer mu.Unlock()
			codes[r.Status]++
			if r.Status == 201 {
				lastID = r.Body["id"].(string)
			} else {
				errs[r.ErrorCode()]++
			}
		}()
	}
	wg.Wait()
	if codes[201] != 3 || codes[409] != 5 || errs["too_many_endpoints"] != 5 {
		t.Fatalf("8 racing registrations with a limit of 3: statuses %v, codes %v", codes, errs)
	}
	if r := b.do(t, b.keyB, "POST", "/v1/webhooks", url(100)); r.Status != 201 {
		t.Fatalf("other tenant: %d %s", r.Status, r.Raw)
	}
	if r := b.do(t, b.keyA, "DELETE", "/v1/webhooks/"+lastID, nil); r.Status != 204 {
		t.Fatalf("delete: %d %s", r.Status, r.Raw)
	}
	if r := b.do(t, b.keyA, "POST", "/v1/webhooks", url(9)); r.Status != 201 {
		t.Fatalf("after a delete: %d %s", r.Status, r.Raw)
	}
	if _, err := b.deps.Postgres.Exec(t.Context(), `UPDATE tenants SET settings = settings || '{"max_webhook_endpoints":5}' WHERE id = 'acme'`); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if r := b.do(t, b.keyA, "POST", "/v1/webhooks", url(20+i)); r.Status != 201 {
			t.Fatalf("own limit of 5, endpoint %d: %d %s", 4+i, r.Status, r.Raw)
		}
	}
	if r := b.do(t, b.keyA, "POST", "/v1/webhooks", url(30)); r.Status != 409 || r.ErrorCode() != "too_many_endpoints" {
		t.Fatalf("sixth endpoint: %d %s", r.Status, r.Raw)
	}
}
