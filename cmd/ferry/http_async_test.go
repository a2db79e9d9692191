package main

import (
	"bufio"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ferryhq/ferry/events/schema"
	"github.com/ferryhq/ferry/platform/testenv"
)

// The async receivers docs/http-jobs.md shows, run by the tests as they are.
const asyncExamples = "../../docs/examples/http-async"

// startReceiver runs an example receiver and returns the URL it prints.
func startReceiver(t *testing.T, secret, tool, file string) string {
	t.Helper()
	path, err := filepath.Abs(filepath.Join(asyncExamples, file))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(tool, path)
	cmd.Env = append(os.Environ(), "FERRY_SIGNING_SECRET="+secret, "PORT=0")
	cmd.Stderr = &testLogWriter{t: t, prefix: file + ": "}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	first := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(out).ReadString('\n')
		first <- strings.TrimSpace(line)
		_, _ = io.Copy(io.Discard, out)
	}()
	select {
	case line := <-first:
		url, ok := strings.CutPrefix(line, "listening ")
		if !ok {
			t.Fatalf("%s printed %q, want listening <url>", file, line)
		}
		return url
	case <-time.After(30 * time.Second):
		t.Fatalf("%s did not start", file)
	}
	return ""
}

// testLogWriter logs what a receiver writes to stderr.
type testLogWriter struct {
	t      *testing.T
	prefix string
}

func (w *testLogWriter) Write(b []byte) (int, error) {
	w.t.Log(w.prefix + strings.TrimSpace(string(b)))
	return len(b), nil
}

// TestAsyncReceiversComplete: the Python and Node receivers of
// docs/examples/http-async verify Ferry's signature, answer 202, report
// progress through the callback routes and complete: the job succeeds with
// their result, and its live stream shows the hand-over, every progress
// report and the completion.
func TestAsyncReceiversComplete(t *testing.T) {
	node := lookTool(t, "node", "apt-get install nodejs")
	python := lookTool(t, "python3", "apt-get install python3")
	e := startStack(t, nil)
	secret := rotateSigningSecret(t, e, http.StatusCreated)
	for _, r := range []struct{ name, tool, file string }{
		{"python", python, "receiver.py"},
		{"node", node, "receiver.mjs"},
	} {
		t.Run(r.name, func(t *testing.T) {
			url := startReceiver(t, secret, r.tool, r.file)
			id := e.submit(map[string]any{"type": "http", "payload": map[string]any{
				"method": "POST", "url": url + "/render", "body": map[string]any{"steps": 3, "step_ms": 150},
				"async": true, "lease": "30s",
			}})
			events := e.readSSE("/v1/jobs/"+id+"/events", 60*time.Second)
			var names, messages []string
			handedOver := false
			for _, ev := range events {
				names = append(names, ev.event)
				data, _ := ev.data["data"].(map[string]any)
				if ev.event == "progress" {
					messages = append(messages, data["message"].(string))
					handedOver = handedOver || (data["lease"] == "30s" && data["worker_id"] != "callback")
				}
				if ev.event == "completed" && data["worker_id"] != "callback" {
					t.Errorf("completed by %v, want the callback", data["worker_id"])
				}
			}
			if len(names) == 0 || names[0] != "enqueued" || names[len(names)-1] != "completed" || !handedOver {
				t.Fatalf("stream %v (hand-over seen: %v), want enqueued … progress (the hand-over, with the lease) … completed", names, handedOver)
			}
			for _, want := range []string{"step 1 of 3", "step 2 of 3", "step 3 of 3"} {
				if !slicesContains(messages, want) {
					t.Errorf("progress %q missing from the stream: %v", want, messages)
				}
			}
			job := e.waitStatus(id, "succeeded", 30*time.Second)
			if want := map[string]any{"steps": float64(3), "receiver": r.name}; !reflect.DeepEqual(job["result"], want) || job["attempt"] != float64(1) {
				t.Fatalf("job %v: result %v, want %v at attempt 1", id, job["result"], want)
			}
		})
	}
}

func slicesContains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// asyncRequest is one request a test receiver got.
type asyncRequest struct {
	header http.Header
	at     time.Time
}

func (r asyncRequest) token() string    { return r.header.Get("Ferry-Callback-Token") }
func (r asyncRequest) callback() string { return r.header.Get("Ferry-Callback-Url") }

// asyncReceiver answers each request with answer(n) (n counts requests from
// 1) and hands the requests to the test.
func asyncReceiver(t *testing.T, answer func(n int) int) (string, <-chan asyncRequest) {
	t.Helper()
	got := make(chan asyncRequest, 16)
	var mu sync.Mutex
	n := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		mu.Lock()
		n++
		status := answer(n)
		mu.Unlock()
		got <- asyncRequest{header: r.Header.Clone(), at: time.Now()}
		w.WriteHeader(status)
	}))
	t.Cleanup(srv.Close)
	return srv.URL, got
}

func nextRequest(t *testing.T, got <-chan asyncRequest, d time.Duration) asyncRequest {
	t.Helper()
	select {
	case r := <-got:
		return r
	case <-time.After(d):
		t.Fatal("the receiver got no request")
	}
	return asyncRequest{}
}

// report calls a callback route with token and checks the answer.
func report(t *testing.T, base, token, action string, body any, wantStatus int, wantCode string) map[string]any {
	t.Helper()
	r := testenv.Call(t, base, token, "POST", "/"+action, body)
	if r.Status != wantStatus || (wantCode != "" && errorCode(r.Body) != wantCode) {
		t.Fatalf("%s: %d %v, want %d %s", action, r.Status, r.Body, wantStatus, wantCode)
	}
	return r.Body
}

// TestAsyncFencing: only the attempt that holds the job may report. A fail
// with retry_after schedules the retry no sooner; then a late complete of
// attempt 1 changes nothing (409), a repeated outcome is idempotent (200,
// applied false), and tokens of another job, another tenant, or none are
// refused.
func TestAsyncFencing(t *testing.T) {
	e := startStack(t, nil)
	rec := e.record(e.stack.Deps.Topics.Lifecycle(schema.EventFailed))
	url, got := asyncReceiver(t, func(int) int { return http.StatusAccepted })
	submitAsync := func(e *e2e) string {
		return e.submit(map[string]any{"type": "http", "payload": map[string]any{"method": "POST", "url": url, "async": true, "lease": "1m"}})
	}
	id := submitAsync(e)
	first := nextRequest(t, got, 30*time.Second)
	if first.header.Get("Ferry-Attempt") != "1" || first.header.Get("Ferry-Callback-Lease") != "60" ||
		first.callback() != e.base+"/v1/jobs/"+id+"/callback" || !strings.HasPrefix(first.token(), "fcb_") {
		t.Fatalf("async request headers: %v", first.header)
	}
	e.waitStatus(id, "running", 30*time.Second)

	// Tokens that do not grant this job.
	other := submitAsync(e)
	otherReq := nextRequest(t, got, 30*time.Second)
	report(t, first.callback(), otherReq.token(), "heartbeat", nil, http.StatusForbidden, "callback_token_mismatch")
	report(t, e.base+"/v1/jobs/"+other+"/callback", first.token(), "heartbeat", nil, http.StatusForbidden, "callback_token_mismatch")
	globex := e.fairTenant("globex", 1)
	globex.submit(map[string]any{"type": "http", "payload": map[string]any{"url": url, "async": true}})
	report(t, first.callback(), nextRequest(t, got, 30*time.Second).token(), "complete", nil, http.StatusForbidden, "callback_token_mismatch")
	report(t, first.callback(), "", "heartbeat", nil, http.StatusUnauthorized, "invalid_callback_token")
	report(t, first.callback(), e.key, "heartbeat", nil, http.StatusUnauthorized, "invalid_callback_token")
	report(t, first.callback(), first.token()[:len(first.token())-3]+"AAA", "heartbeat", nil, http.StatusUnauthorized, "invalid_callback_token")
	report(t, first.callback(), first.token(), "progress", map[string]any{"percent": 150}, http.StatusUnprocessableEntity, "invalid_callback")
	report(t, first.callback(), first.token(), "fail", map[string]any{"class": "worker_lost"}, http.StatusUnprocessableEntity, "invalid_callback")

	// Attempt 1 reports progress, then fails retryable with retry_after.
	report(t, first.callback(), first.token(), "progress", map[string]any{"percent": 30, "message": "a third"}, http.StatusOK, "")
	waitFor(t, 30*time.Second, "progress projected", func() bool {
		p, _ := e.job(id)["progress"].(map[string]any)
		return p != nil && p["message"] == "a third"
	})
	report(t, first.callback(), first.token(), "heartbeat", nil, http.StatusOK, "")
	failedAt := time.Now()
	if out := report(t, first.callback(), first.token(), "fail", map[string]any{"class": "retryable", "message": "upstream busy", "retry_after": "3s"}, http.StatusOK, ""); out["applied"] != true {
		t.Fatalf("fail: %v", out)
	}
	second := nextRequest(t, got, 60*time.Second)
	if second.header.Get("Ferry-Attempt") != "2" || second.token() == first.token() {
		t.Fatalf("retry request: attempt %q", second.header.Get("Ferry-Attempt"))
	}
	if second.at.Before(failedAt.Add(3 * time.Second)) {
		t.Fatalf("attempt 2 sent %s after the fail, before its retry_after of 3s", second.at.Sub(failedAt))
	}
	if n := rec.Count(func(ev schema.Event) bool {
		f, ok := ev.Data.(schema.Failed)
		return ok && f.JobID == id && f.Attempt == 1 && f.Error.Class == schema.ClassRetryable && f.RetryAfter.D() == 3*time.Second && f.WorkerID == "callback"
	}); n != 1 {
		t.Fatalf("%d failed events of attempt 1 with its class and retry_after", n)
	}

	// Attempt 1 is over: its late reports change nothing; its repeated fail
	// is answered as before.
	report(t, first.callback(), first.token(), "complete", map[string]any{"result": "late"}, http.StatusConflict, "attempt_superseded")
	report(t, first.callback(), first.token(), "heartbeat", nil, http.StatusConflict, "attempt_superseded")
	if out := report(t, first.callback(), first.token(), "fail", map[string]any{"class": "retryable"}, http.StatusOK, ""); out["applied"] != false {
		t.Fatalf("repeated fail: %v", out)
	}

	// Attempt 2 completes, once.
	report(t, second.callback(), second.token(), "complete", map[string]any{"result": map[string]any{"ok": 2}}, http.StatusOK, "")
	if out := report(t, second.callback(), second.token(), "complete", map[string]any{"result": map[string]any{"ok": 2}}, http.StatusOK, ""); out["applied"] != false {
		t.Fatalf("repeated complete: %v", out)
	}
	report(t, second.callback(), second.token(), "fail", nil, http.StatusConflict, "attempt_superseded")
	job := e.waitStatus(id, "succeeded", 30*time.Second)
	report(t, first.callback(), first.token(), "complete", map[string]any{"result": "late"}, http.StatusConflict, "attempt_superseded")
	if job = e.job(id); !reflect.DeepEqual(job["result"], map[string]any{"ok": float64(2)}) || job["attempt"] != float64(2) {
		t.Fatalf("job after the late complete: %v", job)
	}
}

// TestAsyncMissedLease: a receiver that takes the job and never reports
// loses it when its lease runs out: worker_lost, the same attempt sent
// again under a new token; the lost dispatch's report then changes nothing.
func TestAsyncMissedLease(t *testing.T) {
	e := startStack(t, nil)
	rec := e.record(e.stack.Deps.Topics.Lifecycle(schema.EventFailed))
	// The first request is taken and forgotten; the second answered at once.
	url, got := asyncReceiver(t, func(n int) int {
		if n == 1 {
			return http.StatusAccepted
		}
		return http.StatusOK
	})
	id := e.submit(map[string]any{"type": "http", "payload": map[string]any{"url": url, "async": true, "lease": "2s"}})
	lost := nextRequest(t, got, 30*time.Second)
	again := nextRequest(t, got, 60*time.Second)
	if lost.header.Get("Ferry-Attempt") != "1" || again.header.Get("Ferry-Attempt") != "1" || again.token() == lost.token() {
		t.Fatalf("after the missed lease: attempts %q then %q, tokens differ: %v",
			lost.header.Get("Ferry-Attempt"), again.header.Get("Ferry-Attempt"), again.token() != lost.token())
	}
	if again.at.Before(lost.at.Add(2 * time.Second)) {
		t.Fatalf("sent again %s after the hand-over, within its 2s lease", again.at.Sub(lost.at))
	}
	job := e.waitStatus(id, "succeeded", 30*time.Second)
	report(t, lost.callback(), lost.token(), "complete", map[string]any{"result": "late"}, http.StatusConflict, "attempt_superseded")
	if res, _ := job["result"].(map[string]any); job["attempt"] != float64(1) || res["status"] != float64(200) {
		t.Fatalf("job %v", job)
	}
	if n := rec.Count(func(ev schema.Event) bool { f, ok := ev.Data.(schema.Failed); return ok && f.JobID == id }); n != 0 {
		t.Fatalf("%d failed events: a lost lease is re-dispatched without one", n)
	}
}

// TestAsyncReceiverIsInTheDocs keeps docs/http-jobs.md showing the work
// function of the Python receiver the end-to-end test runs.
func TestAsyncReceiverIsInTheDocs(t *testing.T) {
	doc, err := os.ReadFile("../../docs/http-jobs.md")
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile(filepath.Join(asyncExamples, "receiver.py"))
	if err != nil {
		t.Fatal(err)
	}
	start := strings.Index(string(src), "def work(")
	end := strings.Index(string(src)[max(start, 0):], "\n\n\n")
	if start < 0 || end < 0 {
		t.Fatal("receiver.py has no work function")
	}
	if fn := string(src)[start : start+end]; !strings.Contains(string(doc), fn) {
		t.Errorf("docs/http-jobs.md does not show receiver.py's work function as it is:\n%s", fn)
	}
	for _, link := range []string{"examples/http-async/receiver.py", "examples/http-async/receiver.mjs"} {
		if !strings.Contains(string(doc), link) {
			t.Errorf("docs/http-jobs.md does not link %s", link)
		}
	}
}
