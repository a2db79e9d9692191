package dlq_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ferryhq/ferry/events/schema"
	"github.com/ferryhq/ferry/platform/auth"
	"github.com/ferryhq/ferry/platform/jobs"
	"github.com/ferryhq/ferry/services/dlq"
)

// TestRedriveEditedPayloadHasTheTenantsLimit: an edited payload is held to
// its tenant's max_payload_bytes, not to the deployment's limit, and over
// it gets the answer a submission of the tenant gets (413
// payload_too_large); nothing is re-driven then. Within the limit it
// re-drives, and a tenant without a limit of its own keeps the
// deployment's.
func TestRedriveEditedPayloadHasTheTenantsLimit(t *testing.T) {
	b := setup(t, dlq.Config{})
	small := auth.Settings{MaxPayloadBytes: 64}
	if _, err := auth.UpdateTenant(context.Background(), b.deps.Postgres, "acme", auth.TenantUpdate{Settings: &small}); err != nil {
		t.Fatal(err)
	}
	b.produce(t, dead("acme", "job_l1", 2, "email.send", "mail", schema.ClassPermanent, "no", base),
		dead("globex", "job_l2", 2, "email.send", "mail", schema.ClassPermanent, "no", base))
	b.projected(t, b.keyA, 1)
	b.projected(t, b.keyB, 1)

	payload := json.RawMessage(`{"blob":"` + strings.Repeat("x", 100) + `"}`)
	body := `{"payload":` + string(payload) + `}`
	r := b.do(t, b.keyA, "POST", "/v1/dlq/job_l1/redrive", body)
	errBody, _ := r.Body["error"].(map[string]any)
	fields, _ := errBody["fields"].(map[string]any)
	msg, _ := fields["payload"].(string)
	if r.Status != http.StatusRequestEntityTooLarge || r.ErrorCode() != "payload_too_large" || !strings.Contains(msg, "at most 64 bytes") {
		t.Fatalf("edited payload over the tenant's limit: %d %s", r.Status, r.Raw)
	}
	// The answer a submission of the same payload by the tenant gets.
	_, err := jobs.Validate(jobs.Request{Type: "email.send", Payload: payload}, time.Now(),
		jobs.TenantLimits(small, jobs.Defaults{MaxPayloadBytes: 262144}))
	var inv *jobs.Invalid
	if !errors.As(err, &inv) {
		t.Fatalf("submission of the payload: %v", err)
	}
	if sub := inv.HTTPError(); sub.Status != r.Status || sub.Code != r.ErrorCode() {
		t.Fatalf("submission answers %d %s, re-drive %d %s", sub.Status, sub.Code, r.Status, r.ErrorCode())
	}
	if got := b.do(t, b.keyA, "GET", "/v1/dlq/job_l1", nil); got.Body["redrive"] != nil {
		t.Fatalf("a refused re-drive left a re-drive: %s", got.Raw)
	}

	// globex has no limit of its own: the deployment's 256 KiB.
	if r := b.do(t, b.keyB, "POST", "/v1/dlq/job_l2/redrive", body); r.Status != http.StatusAccepted {
		t.Fatalf("globex re-drive under the deployment's limit: %d %s", r.Status, r.Raw)
	}
	// Within acme's limit the edit re-drives.
	if r := b.do(t, b.keyA, "POST", "/v1/dlq/job_l1/redrive", `{"payload":{"blob":"short"}}`); r.Status != http.StatusAccepted {
		t.Fatalf("acme re-drive within its limit: %d %s", r.Status, r.Raw)
	}
}
