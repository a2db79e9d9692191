package main

import (
	"bufio"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ferryhq/ferry/events/schema"
)

// sseEvent is one message of a Server-Sent Event stream.
type sseEvent struct {
	id, event string
	data      map[string]any
}

// readSSE reads a stream until the server closes it or d passes.
func (e *e2e) readSSE(path string, d time.Duration) []sseEvent {
	e.t.Helper()
	req, _ := http.NewRequest("GET", e.base+path, nil)
	req.Header.Set("Authorization", "Bearer "+e.key)
	client := &http.Client{Timeout: d}
	resp, err := client.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		b, _ := io.ReadAll(resp.Body)
		e.t.Fatalf("GET %s: %d %s", path, resp.StatusCode, b)
	}
	var out []sseEvent
	var cur sseEvent
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if cur.event != "" {
				out = append(out, cur)
			}
			cur = sseEvent{}
		case strings.HasPrefix(line, "id: "):
			cur.id = strings.TrimPrefix(line, "id: ")
		case strings.HasPrefix(line, "event: "):
			cur.event = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			_ = json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &cur.data)
		}
	}
	return out
}

// TestLiveJobStream: a real job's SSE stream, opened right after submission,
// shows enqueued, started, progress…, completed in lifecycle order, each
// once, and the server then closes it.
func TestLiveJobStream(t *testing.T) {
	e := startStack(t, nil)
	id := e.submit(map[string]any{"type": "sleep", "payload": map[string]any{"ms": 1200}})
	events := e.readSSE("/v1/jobs/"+id+"/events", 30*time.Second)
	var names []string
	seen := map[string]bool{}
	last := schema.Position{}
	for _, ev := range events {
		names = append(names, ev.event)
		ceID, _ := ev.data["id"].(string)
		if seen[ceID] {
			t.Errorf("event %s delivered twice", ceID)
		}
		seen[ceID] = true
		attempt, _ := ev.data["attempt"].(float64)
		pos := schema.PositionOf(schema.EventType(ev.event), int(attempt))
		if last.Advances(pos) {
			t.Errorf("%s after a later event: stream %v", ev.event, names)
		}
		last = pos
	}
	if len(names) < 4 || names[0] != "enqueued" || names[1] != "started" || names[len(names)-1] != "completed" {
		t.Fatalf("stream = %v, want enqueued, started, progress…, completed", names)
	}
	for _, n := range names[2 : len(names)-1] {
		if n != "progress" {
			t.Fatalf("stream = %v: only progress between started and completed", names)
		}
	}
}

// TestLiveWebhook: a completed job produces one delivery to a registered
// endpoint, signed as Standard Webhooks specifies.
func TestLiveWebhook(t *testing.T) {
	type delivery struct {
		header http.Header
		body   []byte
	}
	var mu sync.Mutex
	var got []delivery
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, delivery{r.Header.Clone(), b})
		mu.Unlock()
	}))
	defer receiver.Close()

	e := startStack(t, nil)
	code, hook := e.call("POST", "/v1/webhooks", map[string]any{"url": receiver.URL + "/ferry", "event_types": []string{"completed"}})
	if code != http.StatusCreated {
		t.Fatalf("register webhook: %d %v", code, hook)
	}
	secret := hook["secret"].(string)
	id := e.submit(map[string]any{"type": "noop"})
	e.waitStatus(id, "succeeded", 20*time.Second)
	waitFor(t, 30*time.Second, "webhook delivery", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) > 0
	})
	time.Sleep(time.Second) // a second delivery would show up now
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 1 {
		t.Fatalf("%d deliveries, want 1", len(got))
	}
	d := got[0]
	var body map[string]any
	if err := json.Unmarshal(d.body, &body); err != nil || body["type"] != "ferry.job.completed.v1" || body["subject"] != id {
		t.Fatalf("delivery body: %s", d.body)
	}
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil {
		t.Fatal(err)
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(d.header.Get("webhook-id") + "." + d.header.Get("webhook-timestamp") + "."))
	mac.Write(d.body)
	want := "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))
	if !strings.Contains(" "+d.header.Get("webhook-signature")+" ", " "+want+" ") {
		t.Fatalf("webhook-signature %q does not verify (want %s)", d.header.Get("webhook-signature"), want)
	}
}
