package handlers

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ferryhq/ferry/events/schema"
	"github.com/ferryhq/ferry/services/worker/workertype"
)

// fakeSigner hands out fixed keys, or fails.
type fakeSigner struct {
	keys   [][]byte
	err    error
	tenant string
}

func (f *fakeSigner) Keys(_ context.Context, tenant string, _ time.Time) ([][]byte, error) {
	f.tenant = tenant
	return f.keys, f.err
}

// captured is what the receiver saw.
type captured struct {
	header http.Header
	body   []byte
}

func receiver(t *testing.T, hits *atomic.Int32, got chan<- captured) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		b, _ := io.ReadAll(r.Body)
		got <- captured{header: r.Header.Clone(), body: b}
	}))
	t.Cleanup(srv.Close)
	return srv
}

// verifies reports whether sig (one "v1,<base64>" entry) is the HMAC of
// id.ts.body under key, computed independently of package signing.
func verifies(key []byte, id, ts string, body []byte, sig string) bool {
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id + "." + ts + "."))
	mac.Write(body)
	want := "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))
	return hmac.Equal([]byte(want), []byte(sig))
}

func TestHTTPSignsRequests(t *testing.T) {
	var hits atomic.Int32
	got := make(chan captured, 4)
	srv := receiver(t, &hits, got)
	cur, prev := []byte("current-key-0123456789abcdef"), []byte("previous-key-0123456789abcdef")
	signer := &fakeSigner{keys: [][]byte{cur, prev}}
	h := NewHTTP(Options{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}, Signer: signer})
	payload, _ := json.Marshal(map[string]any{
		"url": srv.URL, "body": map[string]any{"n": 1},
		// A payload cannot forge who calls.
		"headers": map[string]string{"webhook-signature": "v1,forged", "webhook-id": "forged", "Ferry-Tenant": "other", "Ferry-Job-Id": "x"},
	})
	j := workertype.NewJob(workertype.Job{ID: "job_abc", TenantID: "t_1", Attempt: 3, Type: "http", Payload: payload}, nil)
	before := time.Now().Unix()
	if _, err := h.Handle(context.Background(), j); err != nil {
		t.Fatal(err)
	}
	c := <-got
	if signer.tenant != "t_1" {
		t.Errorf("keys asked for tenant %q", signer.tenant)
	}
	hd := c.header
	if hd.Get("Ferry-Job-Id") != "job_abc" || hd.Get("Ferry-Attempt") != "3" || hd.Get("Ferry-Tenant") != "t_1" {
		t.Errorf("ferry headers: %v", hd)
	}
	id, ts := hd.Get("webhook-id"), hd.Get("webhook-timestamp")
	if id != "job_abc_a3" {
		t.Errorf("webhook-id = %q", id)
	}
	if n, err := strconv.ParseInt(ts, 10, 64); err != nil || n < before || n > time.Now().Unix() {
		t.Errorf("webhook-timestamp = %q", ts)
	}
	if string(c.body) != `{"n":1}` {
		t.Errorf("body = %s", c.body)
	}
	sigs := strings.Fields(hd.Get("webhook-signature"))
	if len(sigs) != 2 || !verifies(cur, id, ts, c.body, sigs[0]) || !verifies(prev, id, ts, c.body, sigs[1]) {
		t.Errorf("signatures %q do not verify with the current and previous keys", sigs)
	}
	if verifies(cur, id, ts, []byte(`{"n":2}`), sigs[0]) {
		t.Error("signature verifies another body")
	}
}

func TestHTTPUnsignedWithoutSecret(t *testing.T) {
	var hits atomic.Int32
	got := make(chan captured, 1)
	srv := receiver(t, &hits, got)
	h := NewHTTP(Options{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}, Signer: &fakeSigner{}})
	payload, _ := json.Marshal(map[string]any{"url": srv.URL, "body": "text", "headers": map[string]string{"webhook-signature": "v1,forged"}})
	j := workertype.NewJob(workertype.Job{ID: "job_x", TenantID: "t_2", Attempt: 1, Type: "http", Payload: payload}, nil)
	if _, err := h.Handle(context.Background(), j); err != nil {
		t.Fatal(err)
	}
	c := <-got
	if _, ok := c.header["Webhook-Signature"]; ok {
		t.Errorf("a tenant without a secret sent a signature (the payload's forged one?): %q", c.header.Get("webhook-signature"))
	}
	if c.header.Get("webhook-id") != "job_x_a1" || c.header.Get("webhook-timestamp") == "" || c.header.Get("Ferry-Tenant") != "t_2" {
		t.Errorf("headers: %v", c.header)
	}
}

func TestHTTPSecretUnreadableFailsRetryableWithoutSending(t *testing.T) {
	var hits atomic.Int32
	srv := receiver(t, &hits, make(chan captured, 1))
	h := NewHTTP(Options{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}, Signer: &fakeSigner{err: errors.New("postgres down")}})
	payload, _ := json.Marshal(map[string]any{"url": srv.URL})
	_, err := h.Handle(context.Background(), workertype.NewJob(workertype.Job{ID: "job_y", TenantID: "t", Attempt: 1, Type: "http", Payload: payload}, nil))
	if c, _ := workertype.ClassOf(err); c != schema.ClassRetryable || !strings.Contains(err.Error(), "postgres down") {
		t.Fatalf("err = %v (class %s), want retryable", err, c)
	}
	if hits.Load() != 0 {
		t.Fatal("the request was sent unsigned although the secret could not be read")
	}
}
