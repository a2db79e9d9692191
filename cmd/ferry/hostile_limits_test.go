package main

// Hostile: bounded resources. One tenant floods queue names, fills its
// queue, registers endpoints without end, or opens exports it never reads;
// each is refused with a stable code or cut off, and others are unaffected.

import (
	"fmt"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestHostileQueueNameFlood: one tenant submits jobs in 1000 distinct
// queues; past its max_queues the new names are refused (429
// too_many_queues) while its known queues keep working; once its jobs
// finished, the scheduler's queue index is back to the live queues and new
// names are accepted again.
func TestHostileQueueNameFlood(t *testing.T) {
	e := startStack(t, map[string]string{"FERRY_API_DEFAULT_MAX_QUEUES": "100", "FERRY_SCHEDULER_QUEUE_IDLE": "300ms"})
	a := e.adminTenant("flooder")
	// One batch naming 1000 queues is refused whole.
	var flood []map[string]any
	for i := range 1000 {
		flood = append(flood, map[string]any{"type": "noop", "queue": fmt.Sprintf("flood-%04d", i)})
	}
	code, out := a.call("POST", "/v1/jobs/batch", map[string]any{"jobs": flood})
	wantError(t, "batch of 1000 queues", code, out, http.StatusTooManyRequests, "too_many_queues")
	// One by one: the first 100 names are accepted, the rest refused. The
	// jobs wait (delayed), so every accepted queue stays live.
	accepted, refused := 0, 0
	var ids []string
	for i := range 1000 {
		code, out := a.call("POST", "/v1/jobs", map[string]any{"type": "noop", "queue": fmt.Sprintf("q-%04d", i), "delay": "10m"})
		switch {
		case code == http.StatusAccepted:
			accepted++
			ids = append(ids, out["id"].(string))
		case code == http.StatusTooManyRequests && errorCode(out) == "too_many_queues":
			refused++
		default:
			t.Fatalf("queue %d: %d %v", i, code, out)
		}
	}
	if accepted != 100 || refused != 900 {
		t.Fatalf("accepted %d, refused %d of 1000 queue names; want 100 and 900", accepted, refused)
	}
	// A known queue still takes jobs, and runs them.
	a.waitStatus(a.submit(map[string]any{"type": "noop", "queue": "q-0007"}), "succeeded", 60*time.Second)
	rdb := e.stack.Deps.Redis
	if n, err := rdb.SCard(t.Context(), "ferry:sched:pool:short:queues").Result(); err != nil || n < 100 {
		t.Fatalf("scheduler queue index holds %d queues (%v), want the 100 live ones", n, err)
	}
	// Once their jobs are finished (cancelled), the scheduler's index
	// follows the live queues: back to (almost) none.
	for _, id := range ids {
		if code, out := a.call("POST", "/v1/jobs/"+id+"/cancel", nil); code != http.StatusAccepted && code != http.StatusOK {
			t.Fatalf("cancel %s: %d %v", id, code, out)
		}
	}
	for _, id := range ids {
		a.waitStatus(id, "cancelled", 60*time.Second)
	}
	waitFor(t, 30*time.Second, "the queue index to shrink", func() bool {
		n, err := rdb.SCard(t.Context(), "ferry:sched:pool:short:queues").Result()
		return err == nil && n < 10
	})
	// The finished queues count no more: new names are accepted again.
	waitFor(t, 60*time.Second, "a new queue name to be accepted", func() bool {
		code, _ := a.call("POST", "/v1/jobs", map[string]any{"type": "noop", "queue": "fresh-after-drain"})
		return code == http.StatusAccepted
	})
	e.othersUnaffected(t)
}

// TestHostileQueuedCap: a tenant without settings cannot queue without
// bound: past the default max_queued, 429 tenant_queue_full with
// Retry-After; nothing refused is queued.
func TestHostileQueuedCap(t *testing.T) {
	e := startStack(t, map[string]string{"FERRY_API_DEFAULT_MAX_QUEUED": "50"})
	a := e.adminTenant("filler")
	// Jobs far in the future stay queued (scheduled) and count.
	accepted := 0
	for i := range 80 {
		code, out := a.call("POST", "/v1/jobs", map[string]any{"type": "noop", "delay": "1h"})
		switch {
		case code == http.StatusAccepted:
			accepted++
		case code == http.StatusTooManyRequests && errorCode(out) == "tenant_queue_full":
		default:
			t.Fatalf("job %d: %d %v", i, code, out)
		}
	}
	// The count is the projection's plus what this replica accepted since
	// it was read: a read that lags the projection may let a few more in.
	if accepted < 50 || accepted > 60 {
		t.Fatalf("accepted %d of 80 jobs, want about the default max_queued 50", accepted)
	}
	waitFor(t, 30*time.Second, "the projection to count the jobs", func() bool {
		_, out := a.call("GET", "/v1/jobs?status=scheduled&limit=100", nil)
		jobs, _ := out["jobs"].([]any)
		return len(jobs) == accepted
	})
	time.Sleep(1100 * time.Millisecond) // the cached count expires; the projection's holds
	code, out := a.call("POST", "/v1/jobs", map[string]any{"type": "noop"})
	wantError(t, "past max_queued", code, out, http.StatusTooManyRequests, "tenant_queue_full")
	e.othersUnaffected(t)
}

// TestHostileWebhookEndpointCap: a tenant cannot register webhook
// endpoints without bound (409 too_many_endpoints past the default).
func TestHostileWebhookEndpointCap(t *testing.T) {
	e := startStack(t, map[string]string{"FERRY_WEBHOOKS_MAX_ENDPOINTS": "5"})
	a := e.adminTenant("hooker")
	for i := range 5 {
		code, out := a.call("POST", "/v1/webhooks", map[string]any{"url": fmt.Sprintf("http://127.0.0.1:9/hook/%d", i)})
		if code != http.StatusCreated {
			t.Fatalf("endpoint %d: %d %v", i, code, out)
		}
	}
	for i := range 20 {
		code, out := a.call("POST", "/v1/webhooks", map[string]any{"url": fmt.Sprintf("http://127.0.0.1:9/more/%d", i)})
		wantError(t, "endpoint past the cap", code, out, http.StatusConflict, "too_many_endpoints")
	}
	e.othersUnaffected(t)
}

// stalledExport asks for the audit export on a raw connection with a tiny
// receive buffer and never reads the answer.
func (e *e2e) stalledExport(t *testing.T) net.Conn {
	t.Helper()
	host := strings.TrimPrefix(e.base, "http://")
	d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		return rc.Control(func(fd uintptr) { _ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
	}}
	c, err := d.Dial("tcp", host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := fmt.Fprintf(c, "GET /v1/audit/export HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\n\r\n", host, e.key); err != nil {
		t.Fatal(err)
	}
	return c
}

// TestHostileSlowExportReaders: more audit exports than the Postgres pool
// has connections, whose clients never read, do not starve the pool: audit
// reads, authentication, submissions and the projections of other tenants
// go on; past the per-tenant export cap, 429 too_many_exports.
func TestHostileSlowExportReaders(t *testing.T) {
	e := startStack(t, map[string]string{
		"FERRY_POSTGRES_MAX_CONNS":         "8",
		"FERRY_AUDIT_EXPORT_CONCURRENCY":   "12",
		"FERRY_AUDIT_EXPORT_WRITE_TIMEOUT": "2m",
	})
	a := e.adminTenant("exporter")
	blob := strings.Repeat("x", 200_000)
	var last string
	for range 60 { // ~12 MB of audit rows: more than socket buffers hold
		last = a.submit(map[string]any{"type": "noop", "payload": map[string]any{"blob": blob}})
	}
	a.waitStatus(last, "succeeded", 60*time.Second)
	waitFor(t, 60*time.Second, "the audit rows", func() bool {
		_, out := a.call("GET", "/v1/audit/events?job_id="+last, nil)
		evs, _ := out["events"].([]any)
		return len(evs) >= 3
	})
	for range 12 { // the pool has 8 connections
		a.stalledExport(t)
	}
	time.Sleep(3 * time.Second) // every export blocks on its client
	code, out := a.call("GET", "/v1/audit/export", nil)
	wantError(t, "an export past the cap", code, out, http.StatusTooManyRequests, "too_many_exports")
	b := e.adminTenant("reader")
	start := time.Now()
	if code, out := b.call("GET", "/v1/audit/events", nil); code != http.StatusOK {
		t.Fatalf("another tenant's audit read: %d %v", code, out)
	}
	if code, out := a.call("GET", "/v1/audit/events?limit=1", nil); code != http.StatusOK {
		t.Fatalf("the exporter's own audit read: %d %v", code, out)
	}
	b.submit(map[string]any{"type": "noop"})
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("reads and a submission took %v while exports stall", d)
	}
	e.othersUnaffected(t)
}
