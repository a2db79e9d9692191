package audit_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferryhq/ferry/events/schema"
	"github.com/ferryhq/ferry/services/audit"
)

// bigJobs returns n jobs' records of tenant, each enqueued event carrying
// a payload of size bytes, so an export is far larger than socket buffers.
func (b *bundle) bigJobs(tenant string, n, size int, t0 time.Time) []*kgo.Record {
	payload, _ := json.Marshal(map[string]string{"blob": strings.Repeat("x", size)})
	var recs []*kgo.Record
	for i := range n {
		ref := schema.JobRef{JobID: fmt.Sprintf("job_big%03d", i), TenantID: tenant, Attempt: 1}
		spec := schema.JobSpec{Type: "big", Queue: "default", MaxAttempts: 1, Pool: "short", Payload: payload}
		recs = append(recs, b.rec("ferry/api", schema.Enqueued{JobRef: ref, Job: spec, CreatedAt: t0, RunAt: t0, Reason: schema.ReasonSubmitted}, t0, ""))
	}
	return recs
}

// stalledExport opens a raw connection asking for key's export and never
// reads the answer (with a tiny receive buffer, so the server blocks soon).
func (b *bundle) stalledExport(t *testing.T, key string) net.Conn {
	t.Helper()
	u, _ := url.Parse(b.srv.URL)
	// The receive buffer is set before connecting, so the window the
	// server sees stays small.
	d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		return rc.Control(func(fd uintptr) { _ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
	}}
	c, err := d.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := fmt.Fprintf(c, "GET /v1/audit/export HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\n\r\n", u.Host, key); err != nil {
		t.Fatal(err)
	}
	return c
}

// timedGet answers path for key, failing the test when it takes over max.
func (b *bundle) timedGet(t *testing.T, key, path string, max time.Duration) resp {
	t.Helper()
	start := time.Now()
	r := b.get(key, path)
	if d := time.Since(start); d > max {
		t.Fatalf("GET %s took %v (status %d), want under %v", path, d.Round(time.Millisecond), r.Status, max)
	}
	return r
}

// TestExportSlowReaders: more exports than the pool has connections, whose
// clients never read, neither starve the pool (other tenants' and the same
// tenant's audit reads answer at once, the projection keeps applying) nor
// live forever (the write timeout cuts them).
func TestExportSlowReaders(t *testing.T) {
	t.Parallel()
	// A write timeout far above the reads' bound: the reads must not wait
	// for the stalled exports to be cut.
	b := setup(t, audit.Config{ExportBatch: 5, ExportConcurrency: 50, ExportWriteTimeout: time.Minute})
	t0 := time.Now().UTC().Add(-time.Hour).Truncate(time.Second)
	b.produce(b.bigJobs("acme", 80, 150_000, t0)...) // 12 MB: more than socket buffers hold
	b.produce(b.jobEvents("globex", "job_g", t0)...)
	b.start()
	b.waitRows(80 + 7)
	for range 12 { // the pool has 8 connections
		b.stalledExport(t, b.keyA)
	}
	time.Sleep(3 * time.Second) // let every export block on its client
	if r := b.timedGet(t, b.keyB, "/v1/audit/events", 5*time.Second); r.Status != http.StatusOK {
		t.Fatalf("globex events: %d %s", r.Status, r.Raw)
	}
	if r := b.timedGet(t, b.keyA, "/v1/audit/events?limit=1", 5*time.Second); r.Status != http.StatusOK {
		t.Fatalf("acme events: %d %s", r.Status, r.Raw)
	}
	// The projection still writes.
	b.produce(b.jobEvents("globex", "job_h", t0)...)
	b.waitRows(80 + 14)
	// A full export by a reading client still works meanwhile.
	r := b.timedGet(t, b.keyA, "/v1/audit/export", 30*time.Second)
	sc := bufio.NewScanner(strings.NewReader(string(r.Raw)))
	sc.Buffer(nil, 1<<20)
	n := 0
	for sc.Scan() {
		n++
	}
	if r.Status != http.StatusOK || n != 80 {
		t.Fatalf("export after the stalled ones: %d, %d lines", r.Status, n)
	}
}

// TestExportConcurrencyLimit: a tenant's exports past ExportConcurrency get
// 429 too_many_exports with Retry-After, others' exports are not counted,
// and a slot comes back when a stalled export is cut.
func TestExportConcurrencyLimit(t *testing.T) {
	t.Parallel()
	b := setup(t, audit.Config{ExportBatch: 5, ExportConcurrency: 1, ExportWriteTimeout: 2 * time.Second})
	t0 := time.Now().UTC().Add(-time.Hour).Truncate(time.Second)
	b.produce(b.bigJobs("acme", 40, 100_000, t0)...)
	b.start()
	b.waitRows(40)
	b.stalledExport(t, b.keyA)
	time.Sleep(300 * time.Millisecond)
	r := b.get(b.keyA, "/v1/audit/export")
	if r.Status != http.StatusTooManyRequests || r.ErrorCode() != "too_many_exports" || r.Header.Get("Retry-After") == "" {
		t.Fatalf("second export: %d %v %s", r.Status, r.Header, r.Raw)
	}
	if r := b.get(b.keyB, "/v1/audit/export"); r.Status != http.StatusOK {
		t.Fatalf("other tenant's export: %d %s", r.Status, r.Raw)
	}
	// The write timeout cuts the stalled export and frees its slot.
	deadline := time.Now().Add(15 * time.Second)
	for {
		r = b.get(b.keyA, "/v1/audit/export")
		if r.Status == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("export slot never freed: %d %s", r.Status, r.Raw)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestExportLargeRowsPaged: pages end at a byte budget as well as a row
// count; an export of rows larger than one page's budget still holds every
// row once, in order.
func TestExportLargeRowsPaged(t *testing.T) {
	t.Parallel()
	b := setup(t, audit.Config{ExportBatch: 1000})
	t0 := time.Now().UTC().Add(-time.Hour).Truncate(time.Second)
	recs := b.bigJobs("acme", 60, 150_000, t0) // 9 MB: three pages of the 4 MiB budget
	b.produce(recs...)
	b.start()
	b.waitRows(60)
	r := b.get(b.keyA, "/v1/audit/export")
	sc := bufio.NewScanner(strings.NewReader(string(r.Raw)))
	sc.Buffer(nil, 1<<20)
	var got []string
	for sc.Scan() {
		var e event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatal(err)
		}
		got = append(got, e.EventID)
	}
	want := idsOf(recs)
	if r.Status != http.StatusOK || strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("export: %d, %d rows, want %d in order", r.Status, len(got), len(want))
	}
}
