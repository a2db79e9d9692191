package main

import (
	"bufio"
	"context"
	"net/http"
	"strings"
	"testing"
	"time"
)

// openStream is an SSE stream held open by the test.
type openStream struct {
	events chan string   // event names, as they arrive
	done   chan struct{} // closed when the server ends the stream
	cancel context.CancelFunc
}

// open opens the SSE stream at path with the client's key and reads it in
// the background until the server ends it or the test does.
func (e *e2e) open(path string) *openStream {
	e.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", e.base+path, nil)
	req.Header.Set("Authorization", "Bearer "+e.key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		e.t.Fatalf("GET %s: %v", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		cancel()
		e.t.Fatalf("GET %s: %d", path, resp.StatusCode)
	}
	s := &openStream{events: make(chan string, 64), done: make(chan struct{}), cancel: cancel}
	go func() {
		defer close(s.done)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if name, ok := strings.CutPrefix(sc.Text(), "event: "); ok {
				select {
				case s.events <- name:
				default:
				}
			}
		}
	}()
	e.t.Cleanup(func() { cancel(); <-s.done })
	return s
}

// ended reports whether the server ended s within d.
func (s *openStream) ended(d time.Duration) bool {
	select {
	case <-s.done:
		return true
	case <-time.After(d):
		return false
	}
}

// sees waits up to d for event name on s.
func (s *openStream) sees(name string, d time.Duration) bool {
	deadline := time.After(d)
	for {
		select {
		case ev := <-s.events:
			if ev == name {
				return true
			}
		case <-s.done:
			return false
		case <-deadline:
			return false
		}
	}
}

// TestHostileSSERevokedKey is issue 11 item 10: the open streams of a
// revoked key end within seconds; the tenant's other key streams on, and
// the revoked key cannot reconnect.
func TestHostileSSERevokedKey(t *testing.T) {
	e := startStack(t, nil)
	admin := e.as("admin-e2e")
	code, out := admin.call("POST", "/v1/admin/tenants", map[string]any{"id": "leaky", "name": "leaky"})
	if code != http.StatusCreated {
		t.Fatalf("create tenant: %d %v", code, out)
	}
	doomed, doomedID := e.as(out["api_key"].(string)), out["key_id"].(string)
	code, out = admin.call("POST", "/v1/admin/tenants/leaky/keys", nil)
	if code != http.StatusCreated {
		t.Fatalf("second key: %d %v", code, out)
	}
	kept := e.as(out["api_key"].(string))

	id := doomed.submit(map[string]any{"type": "sleep", "payload": map[string]any{"ms": 60000}})
	streams := []*openStream{doomed.open("/v1/events"), doomed.open("/v1/jobs/" + id + "/events")}
	survivor := kept.open("/v1/events")
	time.Sleep(500 * time.Millisecond) // the streams are registered

	if code, out := admin.call("DELETE", "/v1/admin/keys/"+doomedID, nil); code >= 300 {
		t.Fatalf("revoke: %d %v", code, out)
	}
	revokedAt := time.Now()
	for i, s := range streams {
		if !s.ended(10 * time.Second) {
			t.Fatalf("stream %d of the revoked key still open %v after the revocation", i, time.Since(revokedAt).Round(time.Millisecond))
		}
	}
	t.Logf("streams of the revoked key ended %v after the revocation", time.Since(revokedAt).Round(time.Millisecond))
	// Reconnecting is refused once the key cache (seconds) has expired.
	waitFor(t, 10*time.Second, "401 for the revoked key", func() bool {
		code, _ := doomed.raw("GET", "/v1/events", time.Second)
		return code == http.StatusUnauthorized
	})
	// The tenant's other key streams on.
	kept.submit(map[string]any{"type": "noop"})
	if !survivor.sees("completed", 30*time.Second) {
		t.Fatal("the tenant stream of the key still valid stopped streaming")
	}
	e.othersUnaffected(t)
}

// TestHostileSSEStreamCap: a tenant holding its cap of streams is refused
// one more with 429 too_many_streams; its open streams still stream, a
// closed one frees its slot, and other tenants are not counted against it.
func TestHostileSSEStreamCap(t *testing.T) {
	e := startStack(t, map[string]string{"FERRY_SSE_MAX_STREAMS": "3"})
	hog := e.adminTenant("hog")
	var streams []*openStream
	for range 3 {
		streams = append(streams, hog.open("/v1/events"))
	}
	id := hog.submit(map[string]any{"type": "noop"})
	for _, path := range []string{"/v1/events", "/v1/jobs/" + id + "/events"} {
		code, body := hog.raw("GET", path, 5*time.Second)
		if code != http.StatusTooManyRequests || !strings.Contains(body, `"too_many_streams"`) {
			t.Fatalf("stream past the cap %s: %d %s, want 429 too_many_streams", path, code, body)
		}
	}
	for i, s := range streams {
		if !s.sees("completed", 30*time.Second) {
			t.Fatalf("open stream %d stopped streaming at the cap", i)
		}
	}
	// Closing a stream frees its slot.
	streams[0].cancel()
	<-streams[0].done
	waitFor(t, 10*time.Second, "a freed slot", func() bool {
		code, _ := hog.raw("GET", "/v1/jobs/"+id+"/events", 5*time.Second)
		return code == http.StatusOK
	})
	e.othersUnaffected(t)
}
