package main

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/ferryhq/ferry/platform/auth"
)

// consoleSignIn posts key to POST /console/session like the sign-in form,
// with extra headers (pairs), and returns the answer and its session cookie.
func (e *e2e) consoleSignIn(key string, headers ...string) (*http.Response, map[string]any, *http.Cookie) {
	e.t.Helper()
	resp, out := e.cookieCall(nil, "POST", "/console/session", map[string]string{"key": key}, headers...)
	for _, c := range resp.Cookies() {
		if c.Name == auth.SessionCookie {
			return resp, out, c
		}
	}
	return resp, out, nil
}

// withCookie calls path with the session cookie (and headers), no key.
func (e *e2e) withCookie(c *http.Cookie, method, path string, body any, headers ...string) (int, map[string]any) {
	e.t.Helper()
	resp, out := e.cookieCall(c, method, path, body, headers...)
	return resp.StatusCode, out
}

// cookieCall sends a JSON request with cookie c (if any) and headers
// (pairs), returning the response and its decoded JSON body.
func (e *e2e) cookieCall(c *http.Cookie, method, path string, body any, headers ...string) (*http.Response, map[string]any) {
	e.t.Helper()
	var raw []byte
	if body != nil {
		raw, _ = json.Marshal(body)
	}
	req, _ := http.NewRequest(method, e.base+path, bytes.NewReader(raw))
	if c != nil {
		req.AddCookie(c)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&out)
	return resp, out
}

// TestConsoleSessionSecurity: the key is exchanged for an HttpOnly,
// SameSite=Strict cookie (Secure behind TLS); the cookie authenticates the
// /v1 APIs, but a change without the session's CSRF token is refused; a
// cross-origin or non-JSON sign-in and a wrong key are refused; signing out
// ends the session; the pages carry a strict Content-Security-Policy.
func TestConsoleSessionSecurity(t *testing.T) {
	e := startStack(t, nil)
	resp, out, c := e.consoleSignIn(e.key)
	if resp.StatusCode != http.StatusCreated || c == nil {
		t.Fatalf("sign in: %d %v", resp.StatusCode, out)
	}
	if !c.HttpOnly || c.SameSite != http.SameSiteStrictMode || c.Path != "/" || c.Secure {
		t.Fatalf("cookie over plain HTTP: %+v (want HttpOnly, SameSite=Strict, Path=/, not Secure)", c)
	}
	if out["tenant_id"] != "acme" || out["admin"] != false || out["csrf_token"] == "" || strings.Contains(fmt.Sprint(out), e.key) {
		t.Fatalf("sign-in answer: %v", out)
	}
	if _, _, tls := e.consoleSignIn(e.key, "X-Forwarded-Proto", "https"); tls == nil || !tls.Secure {
		t.Fatalf("cookie behind a TLS proxy: %+v (want Secure)", tls)
	}
	csrf := out["csrf_token"].(string)

	if code, _ := e.withCookie(c, "GET", "/v1/jobs", nil); code != http.StatusOK {
		t.Fatalf("GET /v1/jobs with the cookie: %d", code)
	}
	job := map[string]any{"type": "noop"}
	if code, out := e.withCookie(c, "POST", "/v1/jobs", job); code != http.StatusForbidden || errorCode(out) != "csrf_token_invalid" {
		t.Fatalf("POST /v1/jobs with the cookie, no CSRF token: %d %v", code, out)
	}
	if code, out := e.withCookie(c, "POST", "/v1/queues/q/pause", nil, auth.CSRFHeader, "forged"); code != http.StatusForbidden || errorCode(out) != "csrf_token_invalid" {
		t.Fatalf("pause with a wrong CSRF token: %d %v", code, out)
	}
	code, submitted := e.withCookie(c, "POST", "/v1/jobs", job, auth.CSRFHeader, csrf)
	if code != http.StatusAccepted {
		t.Fatalf("POST /v1/jobs with the CSRF token: %d %v", code, submitted)
	}
	consoleIsolation(t, e, submitted["id"].(string))
	if code, _ := e.withCookie(c, "GET", "/console/session", nil); code != http.StatusOK {
		t.Fatalf("GET /console/session: %d", code)
	}

	if r, out, _ := e.consoleSignIn(e.key, "Origin", "https://evil.example"); r.StatusCode != http.StatusForbidden || errorCode(out) != "cross_origin" {
		t.Fatalf("cross-origin sign-in: %d %v", r.StatusCode, out)
	}
	if r, out, c := e.consoleSignIn("fry_wrong"); r.StatusCode != http.StatusUnauthorized || c != nil {
		t.Fatalf("wrong key: %d %v %v", r.StatusCode, out, c)
	}
	req, _ := http.NewRequest("POST", e.base+"/console/session", strings.NewReader("key="+e.key))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if r, err := http.DefaultClient.Do(req); err != nil || r.StatusCode != http.StatusUnsupportedMediaType {
		t.Fatalf("form-encoded sign-in: %v %v", r, err)
	}

	page, err := http.Get(e.base + "/console/")
	if err != nil {
		t.Fatal(err)
	}
	page.Body.Close()
	csp := page.Header.Get("Content-Security-Policy")
	if page.StatusCode != http.StatusOK || !strings.Contains(csp, "default-src 'self'") || !strings.Contains(csp, "script-src 'self';") ||
		strings.Contains(csp, "unsafe-inline") || page.Header.Get("X-Frame-Options") != "DENY" {
		t.Fatalf("console page: %d CSP %q", page.StatusCode, csp)
	}

	if code, out := e.withCookie(c, "DELETE", "/console/session", nil); code != http.StatusForbidden || errorCode(out) != "csrf_token_invalid" {
		t.Fatalf("sign-out without the CSRF token: %d %v", code, out)
	}
	if code, out := e.withCookie(c, "DELETE", "/console/session", nil, auth.CSRFHeader, csrf); code != http.StatusNoContent {
		t.Fatalf("sign out: %d %v", code, out)
	}
	if code, _ := e.withCookie(c, "GET", "/v1/jobs", nil); code != http.StatusUnauthorized {
		t.Fatalf("the signed-out cookie still reads jobs: %d", code)
	}
}

// consoleIsolation: another tenant's session sees none of acme's job id:
// reading, listing, streaming and cancelling it answer as for a missing job.
func consoleIsolation(t *testing.T, e *e2e, id string) {
	t.Helper()
	other := e.adminTenant("globex")
	_, out, c := e.consoleSignIn(other.key)
	if c == nil || out["tenant_id"] != "globex" {
		t.Fatalf("globex sign-in: %v", out)
	}
	waitFor(t, 30*time.Second, "acme's job projected", func() bool { code, _ := e.call("GET", "/v1/jobs/"+id, nil); return code == http.StatusOK })
	csrf := out["csrf_token"].(string)
	for _, r := range []struct{ method, path string }{
		{"GET", "/v1/jobs/" + id}, {"GET", "/v1/jobs/" + id + "/events"}, {"POST", "/v1/jobs/" + id + "/cancel"}, {"GET", "/v1/dlq/" + id},
	} {
		if code, out := e.withCookie(c, r.method, r.path, nil, auth.CSRFHeader, csrf); code != http.StatusNotFound {
			t.Fatalf("globex's session: %s %s answered %d %v, want 404", r.method, r.path, code, out)
		}
	}
	if code, out := e.withCookie(c, "GET", "/v1/jobs", nil); code != http.StatusOK || len(out["jobs"].([]any)) != 0 {
		t.Fatalf("globex's session lists: %d %v", code, out)
	}
}

// TestConsoleBrowser drives the console in headless Chromium against the
// whole stack: sign in; a job's page follows it live from queued to
// succeeded; a dead job is re-driven in bulk after a dry run, another with
// an edited payload; a queue is paused and resumed; the audit chain
// verifies; a second tenant sees none of the first's jobs; the admin sees
// the tenants. Screenshots of every page are written as artifacts.
func TestConsoleBrowser(t *testing.T) {
	// One quick webhook retry, so a delivery fails for good within the test.
	e := startStack(t, map[string]string{"FERRY_WEBHOOKS_BACKOFF": "100ms"})
	b := startBrowser(t, e.base)
	b.open("", "#signin")
	b.shot("signin")
	b.signIn(e.key, "acme")
	consoleKeepsNoKey(t, b, e.key)

	live := consoleJobLive(t, e, b)
	consoleQueues(t, e, b)
	consoleJobFilters(t, b, live)
	consoleDeadLetters(t, e, b)
	consoleWebhookReplay(t, e, b)
	consoleAudit(t, b)
	consolePages(t, b)

	b.signOut()
	other := e.adminTenant("globex")
	b.signIn(other.key, "globex")
	b.open("#/jobs", "#jobs-list")
	b.until("globex's job list", `document.getElementById("jobs-list").innerText.includes("No jobs match")`)
	b.open("#/jobs/"+live, "h1")
	b.until("acme's job hidden from globex", `document.getElementById("main").innerText.includes("not found")`)

	b.signOut()
	b.signIn("admin-e2e", "admin")
	b.open("#/admin", "#tenants-list table")
	b.until("tenants listed", `["acme", "globex"].every((id) => document.getElementById("tenants-list").innerText.includes(id))`)
	b.shot("admin")
}

// consoleKeepsNoKey: the key is in no cookie the page can read, nor in
// storage, nor in the URL; a change without the CSRF header is refused
// even from the console's own origin.
func consoleKeepsNoKey(t *testing.T, b *browser, key string) {
	t.Helper()
	seen := eval[string](b, `document.cookie + "|" + JSON.stringify(localStorage) + "|" + JSON.stringify(sessionStorage) + "|" + location.href`)
	if strings.Contains(seen, key) || strings.Contains(seen, auth.SessionCookie) {
		t.Fatalf("the page can read the key or the session: %q", seen)
	}
	status := eval[int](b, `fetch("/v1/jobs", {method: "POST", headers: {"Content-Type": "application/json"}, body: JSON.stringify({type: "noop"})}).then((r) => r.status)`)
	if status != http.StatusForbidden {
		t.Fatalf("a POST without the CSRF header from the page answered %d, want 403", status)
	}
}

// consoleJobLive: with its queue paused, a job's page shows it queued; once
// the queue resumes, the page follows it over SSE to succeeded, with its
// progress reports, without a reload.
func consoleJobLive(t *testing.T, e *e2e, b *browser) string {
	t.Helper()
	if code, out := e.call("POST", "/v1/queues/live/pause", nil); code != http.StatusOK {
		t.Fatalf("pause: %d %v", code, out)
	}
	id := e.submit(map[string]any{"type": "sleep", "queue": "live", "payload": map[string]any{"ms": 600}, "tags": []string{"console"}})
	waitFor(t, 30*time.Second, "job projected", func() bool { code, _ := e.call("GET", "/v1/jobs/"+id, nil); return code == http.StatusOK })
	b.open("#/jobs/"+id, "#job-status")
	b.until("queued job", `document.getElementById("job-status").innerText === "queued"`)
	b.until("enqueued on the timeline", `document.querySelector('#job-timeline li[data-event="enqueued"]') !== null`)
	marker := eval[bool](b, `window.consoleTestMarker = true`) // gone if the page reloads
	if code, out := e.call("POST", "/v1/queues/live/resume", nil); code != http.StatusOK {
		t.Fatalf("resume: %d %v", code, out)
	}
	b.until("succeeded live", `document.getElementById("job-status").innerText === "succeeded"`)
	b.until("timeline complete", `["started", "progress", "completed"].every((t) => document.querySelector('#job-timeline li[data-event="' + t + '"]'))`)
	b.until("progress bar full", `document.getElementById("job-progress").value === 100`)
	if !marker || !eval[bool](b, `window.consoleTestMarker === true`) {
		t.Fatal("the job page reloaded instead of updating live")
	}
	b.shot("job")
	return id
}

// consoleQueues pauses and resumes a queue from the Queues page.
func consoleQueues(t *testing.T, e *e2e, b *browser) {
	t.Helper()
	paused := func() bool {
		_, out := e.call("GET", "/v1/queues", nil)
		for _, q := range out["queues"].([]any) {
			if q := q.(map[string]any); q["name"] == "live" {
				return q["paused"] == true
			}
		}
		t.Fatalf("queue live not listed: %v", out)
		return false
	}
	b.open("#/queues", `[data-queue-action="live"]`)
	b.do("pause", chromedp.Click(`[data-queue-action="live"]`))
	b.until("paused", `document.querySelector('[data-queue-state="live"]').innerText === "paused"`)
	if !paused() {
		t.Fatal("the console paused queue live but the scheduler says it is not paused")
	}
	b.shot("queues")
	b.do("resume", chromedp.Click(`[data-queue-action="live"]`))
	b.until("resumed", `document.querySelector('[data-queue-state="live"]').innerText === "active"`)
	if paused() {
		t.Fatal("the console resumed queue live but the scheduler says it is paused")
	}
}

// deadJob submits a job that fails permanently and waits for its entry.
func (e *e2e) deadJob(tag string) string {
	e.t.Helper()
	id := e.submit(map[string]any{"type": "fail", "queue": "console", "max_attempts": 1, "tags": []string{tag},
		"payload": map[string]any{"times": 5, "class": "app_error"}})
	waitFor(e.t, 30*time.Second, "DLQ entry of "+id, func() bool { code, _ := e.call("GET", "/v1/dlq/"+id, nil); return code == http.StatusOK })
	return id
}

// consoleDeadLetters: the tag filter; a bulk re-drive of it previewed by a
// dry run (which re-drives nothing), then run — taking only the entry
// listed before it, not the one its re-driven job makes when it dies
// again; then one entry re-driven with an edited payload, whose new job
// succeeds.
func consoleDeadLetters(t *testing.T, e *e2e, b *browser) {
	t.Helper()
	first := e.deadJob("bulk")
	other := e.deadJob("other")
	b.open("#/dlq", "#dlq-list table")
	b.until("both entries listed", fmt.Sprintf(`[%s, %s].every((id) => document.querySelector('#dlq-list [data-entry="' + id + '"]'))`, jsString(first), jsString(other)))
	b.do("filter by tag", chromedp.SetValue(`#dlq-filter input[name="tag"]`, "bulk"), chromedp.Click(`#dlq-filter button[type="submit"]`))
	b.until("tag filter applied", fmt.Sprintf(`location.hash.includes("tag=bulk") && document.querySelector('#dlq-list [data-entry=%s]') !== null && document.querySelector('#dlq-list [data-entry=%s]') === null`,
		jsString(first), jsString(other)))
	b.do("dry run", chromedp.Click("#dlq-dry-run"))
	b.until("dry-run preview", `document.getElementById("dlq-preview-count")?.innerText.startsWith("1 entry would be re-driven")`)
	b.shot("dlq")
	if _, out := e.call("GET", "/v1/dlq/"+first, nil); out["redrive"] != nil {
		t.Fatalf("the dry run re-drove: %v", out)
	}
	b.do("bulk re-drive", chromedp.Click("#dlq-redrive-all"))
	b.until("bulk result", `document.getElementById("dlq-bulk-result")?.innerText === "Re-driven: 1"`)
	_, entry := e.call("GET", "/v1/dlq/"+first, nil)
	rd, _ := entry["redrive"].(map[string]any)
	if rd == nil || rd["job_id"] == "" {
		t.Fatalf("entry after the bulk re-drive: %v", entry)
	}
	if _, out := e.call("GET", "/v1/dlq/"+other, nil); out["redrive"] != nil {
		t.Fatalf("the bulk re-drive of tag bulk took an entry without it: %v", out)
	}

	second := e.deadJob("edit")
	b.open("#/dlq/"+second, "#dlq-payload")
	b.do("edit the payload", chromedp.SetValue("#dlq-payload", `{"times": 0, "class": "app_error"}`), chromedp.Click("#dlq-redrive-one"))
	b.until("re-driven job page", `location.hash.startsWith("#/jobs/") && !location.hash.includes(`+jsString(second)+`)`)
	b.until("re-driven job succeeded", `document.getElementById("job-status")?.innerText === "succeeded"`)
}

func jsString(s string) string { b, _ := json.Marshal(s); return string(b) }

// consoleJobFilters: the Jobs page's creation-time range keeps the cursor
// listing and filters: a window that ends before the job hides it, one
// around it shows it.
func consoleJobFilters(t *testing.T, b *browser, id string) {
	t.Helper()
	// setField sets a datetime-local field to now + ms in the browser's own
	// time zone, as a person picking the time would.
	setField := func(name string, ms int) {
		eval[bool](b, fmt.Sprintf(`((ms) => { const d = new Date(Date.now() + ms); d.setMinutes(d.getMinutes() - d.getTimezoneOffset());
			document.querySelector('#jobs-filter input[name="%s"]').value = d.toISOString().slice(0, 16); return true; })(%d)`, name, ms))
	}
	row := fmt.Sprintf(`document.querySelector('#jobs-list a[href="#/jobs/' + %s + '"]')`, jsString(id))
	b.open("#/jobs?tag=console", "#jobs-list table")
	b.until("the job listed", row+` !== null`)
	setField("to", -3_600_000)
	b.do("created before an hour ago", chromedp.Click(`#jobs-filter button[type="submit"]`))
	b.until("window before the job", `location.hash.includes("to=") && document.getElementById("jobs-list")?.innerText.includes("No jobs match") === true`)
	setField("from", -3_600_000)
	setField("to", 3_600_000)
	b.do("created within the last hour", chromedp.Click(`#jobs-filter button[type="submit"]`))
	b.until("window around the job", `location.hash.includes("from=") && `+row+` !== null`)
}

// consoleWebhookReplay: a job's page lists the webhook deliveries its
// events caused; the delivery's log (reached with the keyboard) shows the
// request and each failed attempt's response; a replay sends it again,
// signed afresh, and the log shows the replayed attempt delivered.
func consoleWebhookReplay(t *testing.T, e *e2e, b *browser) {
	t.Helper()
	var mu sync.Mutex
	var got []*http.Request
	var bodies [][]byte
	rc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		got, bodies = append(got, r), append(bodies, body)
		n := len(got)
		mu.Unlock()
		if n <= 2 { // the attempt and its one retry fail
			w.Header().Set("Set-Cookie", "sid=receiver-secret")
			http.Error(w, "receiver is down for maintenance", http.StatusServiceUnavailable)
		}
	}))
	t.Cleanup(rc.Close)
	code, hook := e.call("POST", "/v1/webhooks", map[string]any{"url": rc.URL + "/ferry", "event_types": []string{"completed"}, "filter": map[string]any{"queue": "hooks"}})
	if code != http.StatusCreated {
		t.Fatalf("register a webhook: %d %v", code, hook)
	}
	id := e.submit(map[string]any{"type": "noop", "queue": "hooks"})
	waitFor(t, 60*time.Second, "the delivery failed twice", func() bool {
		_, out := e.call("GET", "/v1/webhooks/deliveries?job_id="+id, nil)
		ds, _ := out["deliveries"].([]any)
		return len(ds) == 1 && ds[0].(map[string]any)["status"] == "failed" && ds[0].(map[string]any)["attempts"] == 2.0
	})
	b.open("#/jobs/"+id, "#job-webhooks a[data-delivery]")
	b.do("open the delivery with the keyboard", chromedp.Focus("#job-webhooks a[data-delivery]"), chromedp.KeyEvent(kb.Enter))
	b.until("delivery log", `document.querySelectorAll('#webhook-attempts li[data-attempt]').length === 2`)
	page := eval[string](b, `document.getElementById("webhook-delivery-log").textContent`) // closed <details> too
	for _, want := range []string{"receiver is down for maintenance", "v1,[redacted]", `"type":"ferry.job.completed.v1"`, "HTTP 503"} {
		if !strings.Contains(page, want) {
			t.Errorf("the delivery log does not show %q:\n%s", want, page)
		}
	}
	if strings.Contains(page, "receiver-secret") {
		t.Errorf("the delivery log shows the receiver's cookie:\n%s", page)
	}
	b.do("replay", chromedp.Click("#webhook-replay"))
	b.until("replay delivered", `document.getElementById("webhook-delivery-status")?.innerText === "delivered" && document.querySelector('#webhook-attempts li[data-replay="true"]') !== null`)
	b.shot("webhook-delivery")
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 3 || got[2].Header.Get("webhook-id") != got[0].Header.Get("webhook-id") || !webhookSigned(hook["secret"].(string), got[2].Header, bodies[2]) {
		t.Fatalf("the receiver got %d requests; the replay must be the same webhook-id, signed with the endpoint's secret", len(got))
	}
}

// webhookSigned checks a Standard Webhooks signature as a receiver does.
func webhookSigned(secret string, h http.Header, body []byte) bool {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil {
		return false
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(h.Get("webhook-id") + "." + h.Get("webhook-timestamp") + "."))
	mac.Write(body)
	want := base64.StdEncoding.EncodeToString(mac.Sum(nil))
	return slices.Contains(strings.Fields(h.Get("webhook-signature")), "v1,"+want)
}

// consoleAudit verifies the audit chain from the Audit page.
func consoleAudit(t *testing.T, b *browser) {
	t.Helper()
	b.open("#/audit", "#audit-verify-run")
	b.until("audit rows", `document.querySelector("#audit-list table") !== null`)
	b.do("verify", chromedp.Click("#audit-verify-run"))
	b.until("verified", `document.getElementById("audit-verify-result").innerText.includes("ok")`)
	if got := b.text("#audit-verify-result"); strings.Contains(got, " 0 rows") {
		t.Fatalf("verify checked no rows: %q", got)
	}
	b.shot("audit")
}

// consolePages screenshots the remaining pages at laptop and phone width.
func consolePages(t *testing.T, b *browser) {
	t.Helper()
	b.open("#/overview", "#overview-queues table")
	b.until("overview stats", `document.getElementById("stat-dlq-size") !== null`)
	b.shot("overview")
	b.open("#/jobs", "#jobs-list table")
	b.shot("jobs")
	b.open("#/webhooks", "#webhook-create")
	b.do("add a webhook", chromedp.SendKeys(`#webhook-create input[name="url"]`, "http://127.0.0.1:9/hooks"), chromedp.Click(`#webhook-create button[type="submit"]`))
	b.until("secret shown once", `document.getElementById("webhook-secret").innerText.includes("whsec_")`)
	b.shot("webhooks")
	b.open("#/schedules", "#schedules-list")
	b.until("schedules page", `document.getElementById("schedules-list").innerText !== ""`)
	b.do("phone width", chromedp.EmulateViewport(390, 844))
	b.open("#/jobs", "#jobs-list table")
	b.shot("jobs-phone")
	b.do("laptop width", chromedp.EmulateViewport(1280, 900))
}
