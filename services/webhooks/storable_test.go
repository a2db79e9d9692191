package webhooks_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ferryhq/ferry/events/schema"
)

// TestRegistrationTextIsStorable: NUL in any text field of a registration
// is a 422 naming the field.
func TestRegistrationTextIsStorable(t *testing.T) {
	t.Parallel()
	b := setup(t, opts{serveOnly: true})
	rc := newReceiver(t, nil)
	for field, body := range map[string]string{
		"description":  `{"url":"` + rc.URL + `","description":"a\u0000b"}`,
		"filter.queue": `{"url":"` + rc.URL + `","filter":{"queue":"q\u0000"}}`,
		"filter.type":  `{"url":"` + rc.URL + `","filter":{"type":"t\u0000"}}`,
		"url":          `{"url":"` + rc.URL + `/\u0000"}`,
	} {
		r := b.do(t, b.keyA, "POST", "/v1/webhooks", body)
		f, _ := r.Body["error"].(map[string]any)["fields"].(map[string]any)
		if r.Status != 422 || f[field] == nil || !strings.Contains(f[field].(string), "NUL") {
			t.Errorf("%s: %d %s", field, r.Status, r.Raw)
		}
	}
}

// TestDeliveryLogStoresBinaryAnswers: a receiver answering an error with
// binary bytes (NUL, invalid UTF-8) and a long body gets its attempt
// recorded (sanitized, bounded) and retried, not a record that fails on
// every try.
func TestDeliveryLogStoresBinaryAnswers(t *testing.T) {
	t.Parallel()
	b := setup(t, opts{})
	rc := newReceiver(t, func(n int, w http.ResponseWriter, _ *http.Request) {
		if n <= 2 {
			w.WriteHeader(http.StatusInternalServerError)
			w.Write([]byte("\x00\xff\xfebinary" + strings.Repeat("\x00", 5000)))
		}
	})
	id, _ := b.register(t, b.keyA, map[string]any{"url": rc.URL})
	b.emit(t, completed("acme", "job-bin"))
	for range 3 {
		rc.next(t, wait)
	}
	deadline := time.Now().Add(wait)
	for {
		r := b.do(t, b.keyA, "GET", "/v1/webhooks/"+id+"/deliveries", nil)
		ds, _ := r.Body["deliveries"].([]any)
		if len(ds) == 1 && ds[0].(map[string]any)["status"] == "delivered" && ds[0].(map[string]any)["attempts"] == float64(3) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("deliveries: %s", r.Raw)
		}
		time.Sleep(20 * time.Millisecond)
	}
	rows, err := b.deps.Postgres.Query(t.Context(), `SELECT error FROM webhook_attempts WHERE status_code = 500`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		var e string
		if err := rows.Scan(&e); err != nil {
			t.Fatal(err)
		}
		n++
		if schema.CheckText(e) != nil || !strings.Contains(e, "binary") || len(e) > 1100 {
			t.Errorf("stored attempt error (%d bytes) %.80q", len(e), e)
		}
	}
	if n != 2 {
		t.Fatalf("%d failed attempts stored, want 2", n)
	}
}
