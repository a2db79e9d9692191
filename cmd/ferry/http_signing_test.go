package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ferryhq/ferry/platform/testenv"
)

// The verification examples docs/http-jobs.md shows, kept as programs the
// test runs against the requests Ferry really sent.
const signingExamples = "../../docs/examples/http-signing"

// capturedRequest is one request the receiver got.
type capturedRequest struct {
	header http.Header
	body   []byte
}

// verifier runs one example program over a captured request.
type verifier struct {
	name string
	cmd  func(secret string, req capturedRequest) *exec.Cmd
}

func (v verifier) run(t *testing.T, secret string, req capturedRequest) (ok bool, out string) {
	t.Helper()
	cmd := v.cmd(secret, req)
	cmd.Env = append(os.Environ(), "FERRY_SIGNING_SECRET="+secret,
		"WEBHOOK_ID="+req.header.Get("webhook-id"),
		"WEBHOOK_TIMESTAMP="+req.header.Get("webhook-timestamp"),
		"WEBHOOK_SIGNATURE="+req.header.Get("webhook-signature"))
	cmd.Stdin = bytes.NewReader(req.body)
	b, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if err != nil && !asExit(err, &exit) {
		t.Fatalf("%s: %v\n%s", v.name, err, b)
	}
	return err == nil && strings.TrimSpace(string(b)) == "verified", strings.TrimSpace(string(b))
}

func asExit(err error, target **exec.ExitError) bool {
	e, ok := err.(*exec.ExitError)
	*target = e
	return ok
}

// lookTool fails (never skips) when a language the docs promise is missing.
func lookTool(t *testing.T, name, hint string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("%s is needed to run the %s example of docs/http-jobs.md: %s (scripts/install-deps.sh installs it)", name, name, hint)
	}
	return p
}

// verifiers builds the Go example and finds node and python3.
func verifiers(t *testing.T) []verifier {
	t.Helper()
	node := lookTool(t, "node", "apt-get install nodejs")
	python := lookTool(t, "python3", "apt-get install python3")
	dir := t.TempDir()
	src, err := os.ReadFile(filepath.Join(signingExamples, "verify.go"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "main.go"), src, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module verify\n\ngo 1.22\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "verify")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Dir, build.Env = dir, append(os.Environ(), "GOWORK=off", "GOFLAGS=", "GOTOOLCHAIN=local")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building docs/examples/http-signing/verify.go: %v\n%s", err, out)
	}
	abs := func(name string) string {
		p, err := filepath.Abs(filepath.Join(signingExamples, name))
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	js, py := abs("verify.mjs"), abs("verify.py")
	return []verifier{
		{"go", func(string, capturedRequest) *exec.Cmd { return exec.Command(bin) }},
		{"node", func(string, capturedRequest) *exec.Cmd { return exec.Command(node, js) }},
		{"python", func(string, capturedRequest) *exec.Cmd { return exec.Command(python, py) }},
	}
}

// TestHTTPSigningExamplesAreInTheDocs keeps docs/http-jobs.md showing the
// code the end-to-end test runs.
func TestHTTPSigningExamplesAreInTheDocs(t *testing.T) {
	doc, err := os.ReadFile("../../docs/http-jobs.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"verify.go", "verify.mjs", "verify.py"} {
		src, err := os.ReadFile(filepath.Join(signingExamples, name))
		if err != nil {
			t.Fatal(err)
		}
		_, rest, ok1 := strings.Cut(string(src), "BEGIN verify\n")
		body, _, ok2 := strings.Cut(rest, "END verify")
		body = strings.TrimSpace(body[:strings.LastIndex(body, "\n")+1])
		if !ok1 || !ok2 || len(body) < 200 {
			t.Fatalf("%s: no BEGIN verify … END verify region", name)
		}
		if !bytes.Contains(doc, []byte(body)) {
			t.Errorf("docs/http-jobs.md does not show the verify function of %s as it is:\n%s", name, body)
		}
	}
}

// TestHTTPJobsAreSigned: a tenant creates its signing secret, an http job's
// request carries a signature every documented verifier accepts; after a
// rotation it carries two, one per secret, each verifying.
func TestHTTPJobsAreSigned(t *testing.T) {
	vs := verifiers(t)
	got := make(chan capturedRequest, 8)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- capturedRequest{header: r.Header.Clone(), body: b}
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"ok":true}`))
	}))
	defer srv.Close()
	e := startStack(t, nil)

	code, out := e.call("GET", "/v1/http-signing/secret", nil)
	if code != http.StatusNotFound || errorCode(out) != "signing_secret_not_found" {
		t.Fatalf("GET before any secret: %d %v", code, out)
	}
	first := rotateSigningSecret(t, e, http.StatusCreated)
	code, out = e.call("GET", "/v1/http-signing/secret", nil)
	if _, leaked := out["secret"]; code != http.StatusOK || leaked || out["created_at"] == nil || out["previous_secret_expires_at"] != nil {
		t.Fatalf("GET after create: %d %v", code, out)
	}

	req := runHTTPJob(t, e, srv.URL, got, `{"order":42,"note":"é"}`)
	if sigs := strings.Fields(req.header.Get("webhook-signature")); len(sigs) != 1 {
		t.Fatalf("one secret, signatures %q", sigs)
	}
	for _, v := range vs {
		if ok, out := v.run(t, first, req); !ok {
			t.Errorf("%s verifier refused Ferry's request: %s", v.name, out)
		}
		refuseForgeries(t, v, first, req)
	}

	second := rotateSigningSecret(t, e, http.StatusOK)
	if second == first {
		t.Fatal("rotation returned the same secret")
	}
	code, out = e.call("GET", "/v1/http-signing/secret", nil)
	if exp := out["previous_secret_expires_at"]; code != http.StatusOK || exp == nil ||
		parseTime(t, exp).Sub(time.Now()) < 23*time.Hour || parseTime(t, exp).Sub(time.Now()) > 25*time.Hour {
		t.Fatalf("GET after rotation: %d %v", code, out)
	}
	req = runHTTPJob(t, e, srv.URL, got, "plain text body")
	if sigs := strings.Fields(req.header.Get("webhook-signature")); len(sigs) != 2 {
		t.Fatalf("during the grace, signatures %q, want the new and the old", sigs)
	}
	for _, v := range vs {
		for _, secret := range []string{first, second} {
			if ok, out := v.run(t, secret, req); !ok {
				t.Errorf("%s verifier refused the request with one of the two secrets: %s", v.name, out)
			}
		}
		if ok, _ := v.run(t, "whsec_"+strings.Repeat("A", 43)+"=", req); ok {
			t.Errorf("%s verifier accepted an unrelated secret", v.name)
		}
	}

	// Another tenant has no secret of its own, and never sees this one.
	other := e.fairTenant("globex", 1)
	if code, out := other.call("GET", "/v1/http-signing/secret", nil); code != http.StatusNotFound {
		t.Errorf("another tenant's GET: %d %v", code, out)
	}
}

// rotateSigningSecret rotates (or creates) the tenant's secret and returns it.
func rotateSigningSecret(t *testing.T, e *e2e, want int) string {
	t.Helper()
	r := testenv.Call(t, e.base, e.key, "POST", "/v1/http-signing/secret/rotate", nil)
	secret, _ := r.Body["secret"].(string)
	if r.Status != want || !strings.HasPrefix(secret, "whsec_") || r.Header.Get("Cache-Control") != "no-store" {
		t.Fatalf("rotate: %d %v (Cache-Control %q), want %d with a whsec_ secret", r.Status, r.Body, r.Header.Get("Cache-Control"), want)
	}
	return secret
}

// runHTTPJob submits an http job POSTing body to url, waits for it to
// succeed and returns the request the receiver got.
func runHTTPJob(t *testing.T, e *e2e, url string, got <-chan capturedRequest, body string) capturedRequest {
	t.Helper()
	isJSON := json.Valid([]byte(body))
	var payloadBody any = body
	if isJSON {
		payloadBody = json.RawMessage(body)
	}
	id := e.submit(map[string]any{"type": "http", "payload": map[string]any{"method": "POST", "url": url + "/hook", "body": payloadBody}})
	e.waitStatus(id, "succeeded", 30*time.Second)
	var req capturedRequest
	select {
	case req = <-got:
	case <-time.After(5 * time.Second):
		t.Fatal("the receiver got no request")
	}
	h := req.header
	if h.Get("webhook-id") != id+"_a1" || h.Get("Ferry-Job-Id") != id || h.Get("Ferry-Attempt") != "1" || h.Get("Ferry-Tenant") != "acme" {
		t.Fatalf("identifying headers of job %s: %v", id, h)
	}
	if ts, err := strconv.ParseInt(h.Get("webhook-timestamp"), 10, 64); err != nil || time.Since(time.Unix(ts, 0)).Abs() > time.Minute {
		t.Fatalf("webhook-timestamp %q", h.Get("webhook-timestamp"))
	}
	var sent, want any
	if isJSON {
		_ = json.Unmarshal(req.body, &sent)
		_ = json.Unmarshal([]byte(body), &want)
	} else {
		sent, want = string(req.body), body
	}
	if !reflect.DeepEqual(sent, want) {
		t.Fatalf("body sent %q, want %q", req.body, body)
	}
	return req
}

// refuseForgeries checks that v refuses a tampered body, another id and a
// replay outside the timestamp tolerance.
func refuseForgeries(t *testing.T, v verifier, secret string, req capturedRequest) {
	t.Helper()
	tampered := req
	tampered.body = append(bytes.Clone(req.body), ' ')
	if ok, _ := v.run(t, secret, tampered); ok {
		t.Errorf("%s verifier accepted a tampered body", v.name)
	}
	otherID := capturedRequest{header: req.header.Clone(), body: req.body}
	otherID.header.Set("webhook-id", req.header.Get("webhook-id")+"x")
	if ok, _ := v.run(t, secret, otherID); ok {
		t.Errorf("%s verifier accepted another webhook-id", v.name)
	}
	old := capturedRequest{header: req.header.Clone(), body: req.body}
	old.header.Set("webhook-timestamp", strconv.FormatInt(time.Now().Add(-10*time.Minute).Unix(), 10))
	if ok, out := v.run(t, secret, old); ok || !strings.Contains(out, "timestamp") {
		t.Errorf("%s verifier did not refuse a stale timestamp for its age: %q", v.name, out)
	}
}
