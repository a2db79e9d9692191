package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"
)

// recorded is one request the fake API received.
type recorded struct {
	Method string
	Path   string
	Query  url.Values
	Header http.Header
	Body   []byte
}

// fakeAPI is an httptest.Server standing in for Ferry's HTTP API: it records
// every request and answers with the handler the test gives it.
type fakeAPI struct {
	*httptest.Server
	mu   sync.Mutex
	reqs []recorded
}

func newFakeAPI(t *testing.T, h func(w http.ResponseWriter, r *http.Request, body []byte)) *fakeAPI {
	t.Helper()
	f := &fakeAPI{}
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		f.mu.Lock()
		f.reqs = append(f.reqs, recorded{r.Method, r.URL.Path, r.URL.Query(), r.Header.Clone(), body})
		f.mu.Unlock()
		h(w, r, body)
	}))
	t.Cleanup(f.Close)
	return f
}

func (f *fakeAPI) requests() []recorded {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]recorded(nil), f.reqs...)
}

func (f *fakeAPI) only(t *testing.T) recorded {
	t.Helper()
	reqs := f.requests()
	if len(reqs) != 1 {
		t.Fatalf("got %d requests, want 1: %+v", len(reqs), reqs)
	}
	return reqs[0]
}

func writeJSON(w http.ResponseWriter, status int, body string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	io.WriteString(w, body)
}

// run runs `ferry jobs args...` with env (FERRY_DATA_DIR defaults to an
// empty temporary directory so no stray dev-api-key is picked up).
func run(t *testing.T, env map[string]string, args ...string) (int, string, string) {
	t.Helper()
	if env == nil {
		env = map[string]string{}
	}
	if _, ok := env["FERRY_DATA_DIR"]; !ok {
		env["FERRY_DATA_DIR"] = t.TempDir()
	}
	var stdout, stderr bytes.Buffer
	code := Jobs(context.Background(), args, func(k string) string { return env[k] }, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

const fullJob = `{"id":"job_1","tenant_id":"t1","type":"email.send","queue":"mail","priority":2,
"status":"running","attempt":2,"max_attempts":5,"payload":{"to":"a@b.c"},"tags":["x","y"],
"created_at":"2025-01-02T15:04:05Z","started_at":"2025-01-02T15:04:06Z",
"progress":{"percent":40,"message":"copying"},"result":{"ok":true},
"last_error":{"class":"app_error","message":"boom"},"trace_id":"abc"}`

func TestSubmitSendsRequest(t *testing.T) {
	api := newFakeAPI(t, func(w http.ResponseWriter, r *http.Request, _ []byte) {
		writeJSON(w, http.StatusCreated, `{"id":"job_1","type":"email.send","queue":"mail","priority":0,"status":"scheduled","attempt":1,"max_attempts":3,"created_at":"2025-01-02T15:04:05Z"}`)
	})
	code, out, errOut := run(t, nil, "submit", "--url", api.URL+"/", "--key", "k1",
		"--type", "email.send", "--payload", `{"to":"a@b.c"}`, "--queue", "mail",
		"--priority", "0", "--delay", "1h30m", "--max-attempts", "3", "--timeout", "2s",
		"--not-after", "2030-01-02T15:04:05Z", "--tag", "x", "--tag", "y", "--pool", "long",
		"--idempotency-key", "idem-1", "--unique-key", "welcome-7", "--unique-while", "queued", "--unique-ttl", "1h")
	if code != 0 {
		t.Fatalf("exit %d, stderr: %s", code, errOut)
	}
	req := api.only(t)
	if req.Method != http.MethodPost || req.Path != "/v1/jobs" {
		t.Errorf("request %s %s, want POST /v1/jobs", req.Method, req.Path)
	}
	for k, want := range map[string]string{
		"Authorization":   "Bearer k1",
		"Idempotency-Key": "idem-1",
		"Content-Type":    "application/json",
		"Accept":          "application/json",
	} {
		if got := req.Header.Get(k); got != want {
			t.Errorf("header %s = %q, want %q", k, got, want)
		}
	}
	var got map[string]any
	if err := json.Unmarshal(req.Body, &got); err != nil {
		t.Fatalf("body %s: %v", req.Body, err)
	}
	want := map[string]any{
		"type": "email.send", "payload": map[string]any{"to": "a@b.c"}, "queue": "mail",
		"priority": 0.0, "delay": "1h30m", "max_attempts": 3.0, "timeout": "2s",
		"not_after": "2030-01-02T15:04:05Z", "tags": []any{"x", "y"}, "pool": "long",
		"unique": map[string]any{"key": "welcome-7", "while": "queued", "ttl": "1h"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("body\n got %v\nwant %v", got, want)
	}
	for _, s := range []string{"id:", "job_1", "scheduled", "email.send", "mail", "attempt:", "1/3", "2025-01-02T15:04:05Z"} {
		if !strings.Contains(out, s) {
			t.Errorf("output lacks %q:\n%s", s, out)
		}
	}
	if !strings.Contains(out, "priority:") || !strings.Contains(out, " 0\n") {
		t.Errorf("output lacks priority 0:\n%s", out)
	}
}

func TestSubmitMinimalOmitsDefaults(t *testing.T) {
	api := newFakeAPI(t, func(w http.ResponseWriter, r *http.Request, _ []byte) {
		writeJSON(w, http.StatusCreated, `{"id":"job_1","status":"queued"}`)
	})
	code, _, errOut := run(t, nil, "submit", "--url", api.URL, "--type", "noop", "--run-at", "2030-01-02T15:04:05Z")
	if code != 0 {
		t.Fatalf("exit %d, stderr: %s", code, errOut)
	}
	req := api.only(t)
	if got, want := string(req.Body), `{"type":"noop","run_at":"2030-01-02T15:04:05Z"}`; got != want {
		t.Errorf("body %s, want %s", got, want)
	}
	// Without --idempotency-key the client makes up a key: its own retries
	// are deduplicated, and another submission is another job.
	key := req.Header.Get("Idempotency-Key")
	if key == "" {
		t.Error("no Idempotency-Key sent: a retry after a lost answer would make a second job")
	}
	if code, _, errOut := run(t, nil, "submit", "--url", api.URL, "--type", "noop"); code != 0 {
		t.Fatalf("exit %d, stderr: %s", code, errOut)
	}
	if again := api.requests()[1].Header.Get("Idempotency-Key"); again == "" || again == key {
		t.Errorf("second submission's Idempotency-Key %q, first %q: want a fresh key", again, key)
	}
	if code, _, errOut := run(t, nil, "submit", "--url", api.URL, "--type", "noop", "--unique-while", "queued"); code != 2 || !strings.Contains(errOut, "--unique-key") {
		t.Errorf("--unique-while without --unique-key: exit %d, stderr %s", code, errOut)
	}
	if h := req.Header.Get("Authorization"); h != "" {
		t.Errorf("Authorization %q sent without any key", h)
	}
}

func TestSubmitPayloadFromFile(t *testing.T) {
	api := newFakeAPI(t, func(w http.ResponseWriter, r *http.Request, _ []byte) {
		writeJSON(w, http.StatusCreated, `{"id":"job_1","status":"queued"}`)
	})
	file := filepath.Join(t.TempDir(), "payload.json")
	if err := os.WriteFile(file, []byte("{\n  \"n\": [1, 2]\n}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, errOut := run(t, nil, "submit", "--url", api.URL, "--type", "t", "--payload", "@"+file)
	if code != 0 {
		t.Fatalf("exit %d, stderr: %s", code, errOut)
	}
	var body struct{ Payload map[string][]int }
	if err := json.Unmarshal(api.only(t).Body, &body); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(body.Payload, map[string][]int{"n": {1, 2}}) {
		t.Errorf("payload %v", body.Payload)
	}
}

func TestSubmitJSONOutput(t *testing.T) {
	const answer = `{"id":"job_1","status":"queued","deduplicated":true}`
	api := newFakeAPI(t, func(w http.ResponseWriter, r *http.Request, _ []byte) {
		writeJSON(w, http.StatusOK, answer)
	})
	code, out, errOut := run(t, nil, "submit", "--url", api.URL, "--type", "t", "--json")
	if code != 0 {
		t.Fatalf("exit %d, stderr: %s", code, errOut)
	}
	if out != answer+"\n" {
		t.Errorf("stdout %q, want the raw answer", out)
	}
}

func TestUsageErrors(t *testing.T) {
	api := newFakeAPI(t, func(w http.ResponseWriter, r *http.Request, _ []byte) {
		writeJSON(w, http.StatusOK, `{}`)
	})
	cases := [][]string{
		{},
		{"frobnicate"},
		{"submit"},
		{"submit", "--type", "t", "--payload", "{not json"},
		{"submit", "--type", "t", "--payload", "@/does/not/exist.json"},
		{"submit", "--type", "t", "--delay", "soon"},
		{"submit", "--type", "t", "--run-at", "tomorrow"},
		{"submit", "--type", "t", "--priority", "10"},
		{"submit", "--type", "t", "--max-attempts", "0"},
		{"submit", "--type", "t", "--pool", "medium"},
		{"submit", "--type", "t", "--delay", "1s", "--run-at", "2030-01-02T15:04:05Z"},
		{"submit", "--type", "t", "extra"},
		{"submit", "--type", "t", "--bogus"},
		{"get"},
		{"get", "a", "b"},
		{"cancel"},
		{"list", "--limit", "-1"},
		{"list", "extra"},
	}
	for _, args := range cases {
		full := append(append([]string{}, args...), "--url", api.URL)
		if len(args) == 0 || args[0] == "frobnicate" {
			full = args
		}
		code, _, errOut := run(t, nil, full...)
		if code != 2 {
			t.Errorf("%q: exit %d, want 2", args, code)
		}
		if !strings.Contains(errOut, "Usage:") {
			t.Errorf("%q: stderr lacks usage:\n%s", args, errOut)
		}
	}
	if n := len(api.requests()); n != 0 {
		t.Errorf("usage errors sent %d requests", n)
	}
	if code, out, _ := run(t, nil, "help"); code != 0 || !strings.Contains(out, "submit") {
		t.Errorf("help: exit %d, out %q", code, out)
	}
	if code, _, errOut := run(t, nil, "get", "-h"); code != 0 || !strings.Contains(errOut, "--json") && !strings.Contains(errOut, "-json") {
		t.Errorf("get -h: exit %d, stderr %q", code, errOut)
	}
}

func TestGet(t *testing.T) {
	api := newFakeAPI(t, func(w http.ResponseWriter, r *http.Request, _ []byte) {
		writeJSON(w, http.StatusOK, fullJob)
	})
	// Flags after the positional argument work too.
	code, out, errOut := run(t, nil, "get", "job/1", "--url", api.URL, "--key", "k")
	if code != 0 {
		t.Fatalf("exit %d, stderr: %s", code, errOut)
	}
	req := api.only(t)
	if req.Method != http.MethodGet || req.Path != "/v1/jobs/job/1" {
		t.Errorf("request %s %s", req.Method, req.Path)
	}
	if len(req.Body) != 0 {
		t.Errorf("GET sent a body: %s", req.Body)
	}
	for _, s := range []string{
		"id:", "job_1", "status:", "running", "type:", "email.send", "queue:", "mail",
		"priority:", "2", "attempt:", "2/5", "created:", "2025-01-02T15:04:05Z",
		"started:", "2025-01-02T15:04:06Z", "finished:", "progress:", "40% copying",
		"last_error:", "app_error: boom", "result:", `{"ok":true}`, "tags:", "x, y",
	} {
		if !strings.Contains(out, s) {
			t.Errorf("output lacks %q:\n%s", s, out)
		}
	}
}

func TestGetJSON(t *testing.T) {
	api := newFakeAPI(t, func(w http.ResponseWriter, r *http.Request, _ []byte) {
		writeJSON(w, http.StatusOK, fullJob+"\n")
	})
	code, out, errOut := run(t, nil, "get", "--json", "--url", api.URL, "job_1")
	if code != 0 {
		t.Fatalf("exit %d, stderr: %s", code, errOut)
	}
	if out != fullJob+"\n" {
		t.Errorf("stdout %q, want raw body", out)
	}
}

func TestCancel(t *testing.T) {
	api := newFakeAPI(t, func(w http.ResponseWriter, r *http.Request, _ []byte) {
		writeJSON(w, http.StatusAccepted, `{"job":{"id":"job_9","status":"cancelled","attempt":0,"max_attempts":5},"cancel_requested":true}`)
	})
	code, out, errOut := run(t, map[string]string{"FERRY_URL": api.URL, "FERRY_API_KEY": "envkey"}, "cancel", "job_9")
	if code != 0 {
		t.Fatalf("exit %d, stderr: %s", code, errOut)
	}
	req := api.only(t)
	if req.Method != http.MethodPost || req.Path != "/v1/jobs/job_9/cancel" {
		t.Errorf("request %s %s", req.Method, req.Path)
	}
	if got := req.Header.Get("Authorization"); got != "Bearer envkey" {
		t.Errorf("Authorization %q", got)
	}
	// The API answers {"job": …, "cancel_requested": true}: the job is shown.
	if !strings.Contains(out, "cancelled") || !strings.Contains(out, "job_9") {
		t.Errorf("output:\n%s", out)
	}
}

func TestAPIErrorRendering(t *testing.T) {
	api := newFakeAPI(t, func(w http.ResponseWriter, r *http.Request, _ []byte) {
		switch r.URL.Path {
		case "/v1/jobs":
			writeJSON(w, http.StatusBadRequest, `{"error":{"code":"invalid_request","message":"job is invalid","request_id":"req_42","fields":{"type":"is required","priority":"must be 0..9"}}}`)
		case "/v1/jobs/list-fields":
			writeJSON(w, http.StatusUnprocessableEntity, `{"error":{"code":"bad","message":"m","request_id":"r","fields":[{"field":"payload","message":"too large"}]}}`)
		case "/v1/jobs/nope":
			writeJSON(w, http.StatusNotFound, `{"error":{"code":"not_found","message":"job not found","request_id":"req_43"}}`)
		default:
			w.WriteHeader(http.StatusBadGateway)
			io.WriteString(w, "upstream down\n")
		}
	})
	code, out, errOut := run(t, nil, "submit", "--url", api.URL, "--type", "t", "--json")
	if code != 1 {
		t.Errorf("exit %d, want 1", code)
	}
	if out != "" {
		t.Errorf("stdout %q on error", out)
	}
	want := "error: invalid_request: job is invalid\n  priority: must be 0..9\n  type: is required\n  request_id: req_42\n"
	if errOut != want {
		t.Errorf("stderr\n%q\nwant\n%q", errOut, want)
	}

	_, _, errOut = run(t, nil, "get", "--url", api.URL, "list-fields")
	if want := "error: bad: m\n  payload: too large\n  request_id: r\n"; errOut != want {
		t.Errorf("stderr %q, want %q", errOut, want)
	}

	code, _, errOut = run(t, nil, "get", "--url", api.URL, "nope")
	if code != 1 || errOut != "error: not_found: job not found\n  request_id: req_43\n" {
		t.Errorf("exit %d, stderr %q", code, errOut)
	}

	code, _, errOut = run(t, nil, "cancel", "--url", api.URL, "x")
	if code != 1 || errOut != "error: HTTP 502: upstream down\n" {
		t.Errorf("exit %d, stderr %q", code, errOut)
	}

	// Nothing listening.
	dead := httptest.NewServer(http.NotFoundHandler())
	dead.Close()
	code, _, errOut = run(t, nil, "get", "--url", dead.URL, "x")
	if code != 1 || !strings.HasPrefix(errOut, "error: ") {
		t.Errorf("exit %d, stderr %q", code, errOut)
	}
}

func TestKeyResolution(t *testing.T) {
	api := newFakeAPI(t, func(w http.ResponseWriter, r *http.Request, _ []byte) {
		writeJSON(w, http.StatusOK, `{"id":"j","status":"queued"}`)
	})
	dataDir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dataDir, "dev-api-key"), []byte("filekey\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		env  map[string]string
		args []string
		want string
	}{
		{"file", map[string]string{"FERRY_DATA_DIR": dataDir}, nil, "Bearer filekey"},
		{"env over file", map[string]string{"FERRY_DATA_DIR": dataDir, "FERRY_API_KEY": "envkey"}, nil, "Bearer envkey"},
		{"flag over env", map[string]string{"FERRY_DATA_DIR": dataDir, "FERRY_API_KEY": "envkey"}, []string{"--key", "flagkey"}, "Bearer flagkey"},
		{"none", map[string]string{"FERRY_DATA_DIR": t.TempDir()}, nil, ""},
	}
	for _, tc := range cases {
		before := len(api.requests())
		args := append([]string{"get", "j", "--url", api.URL}, tc.args...)
		if code, _, errOut := run(t, tc.env, args...); code != 0 {
			t.Fatalf("%s: exit %d, stderr %s", tc.name, code, errOut)
		}
		if got := api.requests()[before].Header.Get("Authorization"); got != tc.want {
			t.Errorf("%s: Authorization %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestKeyFromDefaultDataDir(t *testing.T) {
	api := newFakeAPI(t, func(w http.ResponseWriter, r *http.Request, _ []byte) {
		writeJSON(w, http.StatusOK, `{"id":"j","status":"queued"}`)
	})
	t.Chdir(t.TempDir())
	if err := os.Mkdir(".ferry", 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(".ferry", "dev-api-key"), []byte("  devkey \n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// FERRY_DATA_DIR unset: defaults to .ferry.
	var stdout, stderr bytes.Buffer
	env := func(k string) string {
		if k == "FERRY_URL" {
			return api.URL
		}
		return ""
	}
	if code := Jobs(context.Background(), []string{"get", "j"}, env, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d, stderr %s", code, stderr.String())
	}
	if got := api.only(t).Header.Get("Authorization"); got != "Bearer devkey" {
		t.Errorf("Authorization %q", got)
	}
}

func TestList(t *testing.T) {
	api := newFakeAPI(t, func(w http.ResponseWriter, r *http.Request, _ []byte) {
		writeJSON(w, http.StatusOK, `{"jobs":[
			{"id":"job_1","status":"running","type":"email.send","queue":"mail","priority":1,"attempt":1,"max_attempts":5,"created_at":"2025-01-02T15:04:05Z"},
			{"id":"job_22","status":"queued","type":"t","queue":"default","priority":5,"attempt":0,"max_attempts":3,"created_at":"2025-01-02T15:04:06Z"}
		],"next_cursor":"c2"}`)
	})
	code, out, errOut := run(t, nil, "list", "--url", api.URL, "--status", "running", "--type", "email.send",
		"--queue", "mail", "--tag", "a", "--tag", "b", "--limit", "2", "--cursor", "c1")
	if code != 0 {
		t.Fatalf("exit %d, stderr: %s", code, errOut)
	}
	req := api.only(t)
	if req.Method != http.MethodGet || req.Path != "/v1/jobs" {
		t.Errorf("request %s %s", req.Method, req.Path)
	}
	wantQ := url.Values{"status": {"running"}, "type": {"email.send"}, "queue": {"mail"},
		"tag": {"a", "b"}, "limit": {"2"}, "cursor": {"c1"}}
	if !reflect.DeepEqual(req.Query, wantQ) {
		t.Errorf("query %v, want %v", req.Query, wantQ)
	}
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if len(lines) != 3 {
		t.Fatalf("want header + 2 rows:\n%s", out)
	}
	if f := strings.Fields(lines[0]); !reflect.DeepEqual(f, []string{"ID", "STATUS", "TYPE", "QUEUE", "PRI", "ATTEMPT", "CREATED"}) {
		t.Errorf("header %q", lines[0])
	}
	if f := strings.Fields(lines[1]); !reflect.DeepEqual(f, []string{"job_1", "running", "email.send", "mail", "1", "1/5", "2025-01-02T15:04:05Z"}) {
		t.Errorf("row %q", lines[1])
	}
	if f := strings.Fields(lines[2]); !reflect.DeepEqual(f, []string{"job_22", "queued", "t", "default", "5", "0/3", "2025-01-02T15:04:06Z"}) {
		t.Errorf("row %q", lines[2])
	}
	// Columns are aligned.
	if strings.Index(lines[0], "STATUS") != strings.Index(lines[2], "queued") {
		t.Errorf("columns not aligned:\n%s", out)
	}
	if !strings.Contains(errOut, "c2") {
		t.Errorf("stderr lacks the next cursor: %q", errOut)
	}
}

// pagedAPI serves three pages of jobs keyed by cursor.
func pagedAPI(t *testing.T) *fakeAPI {
	pages := map[string]string{
		"":   `{"jobs":[{"id":"a","status":"queued"},{"id":"b","status":"queued"}],"next_cursor":"p2"}`,
		"p2": `{"jobs":[{"id":"c","status":"running"}],"next_cursor":"p3"}`,
		"p3": `{"jobs":[{"id":"d","status":"dead"}],"next_cursor":""}`,
	}
	return newFakeAPI(t, func(w http.ResponseWriter, r *http.Request, _ []byte) {
		page, ok := pages[r.URL.Query().Get("cursor")]
		if !ok {
			writeJSON(w, http.StatusBadRequest, `{"error":{"code":"bad_cursor","message":"?"}}`)
			return
		}
		writeJSON(w, http.StatusOK, page)
	})
}

func TestListAll(t *testing.T) {
	api := pagedAPI(t)
	code, out, errOut := run(t, nil, "list", "--all", "--url", api.URL, "--status", "queued", "--limit", "2")
	if code != 0 {
		t.Fatalf("exit %d, stderr: %s", code, errOut)
	}
	reqs := api.requests()
	if len(reqs) != 3 {
		t.Fatalf("%d requests, want 3", len(reqs))
	}
	for i, cur := range []string{"", "p2", "p3"} {
		q := reqs[i].Query
		if got := strings.Join(q["cursor"], ","); got != cur {
			t.Errorf("request %d cursor %q, want %q", i, got, cur)
		}
		if q.Get("status") != "queued" || q.Get("limit") != "2" {
			t.Errorf("request %d lost filters: %v", i, q)
		}
	}
	var ids []string
	for _, l := range strings.Split(strings.TrimRight(out, "\n"), "\n")[1:] {
		ids = append(ids, strings.Fields(l)[0])
	}
	if !reflect.DeepEqual(ids, []string{"a", "b", "c", "d"}) {
		t.Errorf("ids %v\n%s", ids, out)
	}
	if errOut != "" {
		t.Errorf("stderr %q", errOut)
	}
}

func TestListAllJSON(t *testing.T) {
	api := pagedAPI(t)
	code, out, errOut := run(t, nil, "list", "--all", "--json", "--url", api.URL)
	if code != 0 {
		t.Fatalf("exit %d, stderr: %s", code, errOut)
	}
	var got struct {
		Jobs []struct{ ID string }
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("stdout %q: %v", out, err)
	}
	if len(got.Jobs) != 4 || got.Jobs[3].ID != "d" {
		t.Errorf("jobs %+v", got.Jobs)
	}
}

func TestListJSONIsRaw(t *testing.T) {
	api := pagedAPI(t)
	code, out, _ := run(t, nil, "list", "--json", "--url", api.URL)
	if code != 0 || out != `{"jobs":[{"id":"a","status":"queued"},{"id":"b","status":"queued"}],"next_cursor":"p2"}`+"\n" {
		t.Errorf("exit %d, stdout %q", code, out)
	}
	if n := len(api.requests()); n != 1 {
		t.Errorf("%d requests without --all", n)
	}
}

func TestListAllStopsOnRepeatedCursor(t *testing.T) {
	api := newFakeAPI(t, func(w http.ResponseWriter, r *http.Request, _ []byte) {
		writeJSON(w, http.StatusOK, `{"jobs":[{"id":"a"}],"next_cursor":"same"}`)
	})
	code, _, errOut := run(t, nil, "list", "--all", "--url", api.URL)
	if code != 1 || !strings.Contains(errOut, "same") {
		t.Errorf("exit %d, stderr %q", code, errOut)
	}
}

// waitAPI accepts a submission and then reports the given statuses on
// successive GETs.
func waitAPI(t *testing.T, statuses ...string) *fakeAPI {
	var mu sync.Mutex
	n := 0
	return newFakeAPI(t, func(w http.ResponseWriter, r *http.Request, _ []byte) {
		switch {
		case r.Method == http.MethodPost && r.URL.Path == "/v1/jobs":
			writeJSON(w, http.StatusCreated, `{"id":"job_w","type":"t","status":"queued","attempt":1,"max_attempts":5}`)
		case r.Method == http.MethodGet && r.URL.Path == "/v1/jobs/job_w":
			mu.Lock()
			s := statuses[min(n, len(statuses)-1)]
			n++
			mu.Unlock()
			body := map[string]any{"id": "job_w", "type": "t", "status": s, "attempt": 1, "max_attempts": 5}
			if s == "succeeded" {
				body["result"] = map[string]any{"sent": 3}
				body["finished_at"] = "2025-01-02T15:04:09Z"
			}
			b, _ := json.Marshal(body)
			writeJSON(w, http.StatusOK, string(b))
		default:
			t.Errorf("unexpected %s %s", r.Method, r.URL.Path)
			w.WriteHeader(http.StatusTeapot)
		}
	})
}

func TestSubmitWait(t *testing.T) {
	api := waitAPI(t, "queued", "running", "running", "succeeded")
	code, out, errOut := run(t, nil, "submit", "--url", api.URL, "--type", "t", "--wait", "--wait-interval", "1ms")
	if code != 0 {
		t.Fatalf("exit %d, stderr: %s", code, errOut)
	}
	reqs := api.requests()
	if len(reqs) != 5 {
		t.Errorf("%d requests, want 1 POST + 4 GETs", len(reqs))
	}
	for _, r := range reqs[1:] {
		if r.Method != http.MethodGet || r.Path != "/v1/jobs/job_w" {
			t.Errorf("poll %s %s", r.Method, r.Path)
		}
	}
	for _, s := range []string{"job_w", "succeeded", `{"sent":3}`, "2025-01-02T15:04:09Z"} {
		if !strings.Contains(out, s) {
			t.Errorf("output lacks %q:\n%s", s, out)
		}
	}
	if strings.Contains(out, "queued") {
		t.Errorf("printed a non-terminal state:\n%s", out)
	}
}

func TestSubmitWaitJSONAndFailure(t *testing.T) {
	api := waitAPI(t, "running", "dead")
	code, out, _ := run(t, nil, "submit", "--url", api.URL, "--type", "t", "--wait", "--wait-interval", "1ms", "--json")
	if code != 1 {
		t.Errorf("exit %d, want 1 for a dead job", code)
	}
	var j struct{ ID, Status string }
	if err := json.Unmarshal([]byte(out), &j); err != nil || j.Status != "dead" || j.ID != "job_w" {
		t.Errorf("stdout %q (%v)", out, err)
	}
}

func TestSubmitWaitCancelledContext(t *testing.T) {
	api := waitAPI(t, "running")
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		for len(api.requests()) < 3 {
			time.Sleep(time.Millisecond) // let a couple of polls happen
		}
		cancel()
	}()
	var stdout, stderr bytes.Buffer
	env := map[string]string{"FERRY_DATA_DIR": t.TempDir()}
	code := Jobs(ctx, []string{"submit", "--url", api.URL, "--type", "t", "--wait", "--wait-interval", "1ms"},
		func(k string) string { return env[k] }, &stdout, &stderr)
	if code != 1 || !strings.Contains(stderr.String(), "error:") {
		t.Errorf("exit %d, stderr %q", code, stderr.String())
	}
}

// TestBreakersAndConcurrencyFlags: `ferry breakers` lists and resets
// breakers; `ferry jobs submit --concurrency-key` sends the key and limit.
func TestBreakersAndConcurrencyFlags(t *testing.T) {
	api := newFakeAPI(t, func(w http.ResponseWriter, r *http.Request, _ []byte) {
		switch r.URL.Path {
		case "/v1/breakers":
			writeJSON(w, http.StatusOK, `{"breakers":[{"type":"http","state":"open","open_until":"2026-11-25T00:00:30Z","probe_job_id":null,"failures":0,"waiting":7,"config":{}}],"next_cursor":""}`)
		case "/v1/breakers/a/b/reset":
			writeJSON(w, http.StatusOK, `{"type":"a/b","state":"closed","previous_state":"open"}`)
		default:
			writeJSON(w, http.StatusAccepted, `{"id":"job_1","status":"queued","type":"x"}`)
		}
	})
	var out, errOut bytes.Buffer
	if code := Breakers(context.Background(), []string{"list", "--url", api.URL, "--key", "k"}, nil, &out, &errOut); code != 0 ||
		!strings.Contains(out.String(), "http") || !strings.Contains(out.String(), "open") || !strings.Contains(out.String(), "7") {
		t.Fatalf("list: %d %q %q", code, out.String(), errOut.String())
	}
	out.Reset()
	if code := Breakers(context.Background(), []string{"reset", "a/b", "--url", api.URL, "--key", "k"}, nil, &out, &errOut); code != 0 ||
		out.String() != "breaker a/b closed (was open)\n" {
		t.Fatalf("reset: %d %q %q", code, out.String(), errOut.String())
	}
	if code, _, errOut := run(t, nil, "submit", "--url", api.URL, "--key", "k", "--type", "x", "--concurrency-key", "customer-42", "--concurrency-limit", "2"); code != 0 {
		t.Fatalf("submit: %d %s", code, errOut)
	}
	api.mu.Lock()
	last := api.reqs[len(api.reqs)-1]
	api.mu.Unlock()
	if body := string(last.Body); !strings.Contains(body, `"concurrency":{"key":"customer-42","limit":2}`) {
		t.Errorf("submit body %s", body)
	}
	if code, _, _ := run(t, nil, "submit", "--url", api.URL, "--key", "k", "--type", "x", "--concurrency-limit", "2"); code != 2 {
		t.Errorf("--concurrency-limit without a key: exit %d, want 2", code)
	}
}
