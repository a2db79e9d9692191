package ssebridge

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/goleak"

	"github.com/ferryhq/ferry/events/schema"
	"github.com/ferryhq/ferry/platform/kafkax"
	"github.com/ferryhq/ferry/platform/service"
	"github.com/ferryhq/ferry/platform/testenv"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// The OpenTelemetry and kotel globals may start background work
		// that lives for the process.
		goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start"),
		goleak.IgnoreAnyFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreAnyFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreAnyFunction("internal/poll.runtime_pollWait"),
	)
}

type bundle struct {
	svc  *Service
	deps *service.Deps
	srv  *httptest.Server
	keyA string // tenant acme
	keyB string // tenant globex
}

// setup starts the service over real Postgres and an embedded Kafka broker
// behind a real HTTP server. listen, if not nil, wraps the server's listener.
func setup(t *testing.T, cfg Config, listen func(net.Listener) net.Listener) *bundle {
	t.Helper()
	deps := testenv.Deps(t, Needs)
	keyA, keyB := testenv.Tenant(t, deps.Postgres, "acme"), testenv.Tenant(t, deps.Postgres, "globex")
	return start(t, deps, keyA, keyB, cfg, listen)
}

// start runs a process of the service over deps behind its own HTTP
// server: setup's, or another replica (a restart) over the same Postgres
// and Kafka.
func start(t *testing.T, deps *service.Deps, keyA, keyB string, cfg Config, listen func(net.Listener) net.Listener) *bundle {
	t.Helper()
	b := &bundle{deps: deps, keyA: keyA, keyB: keyB}
	if cfg.JobGrace == 0 {
		cfg.JobGrace = 3 * time.Second
	}
	var err error
	b.svc, err = New(t.Context(), b.deps, cfg)
	if err != nil {
		t.Fatal(err)
	}
	testenv.Run(t, b.svc)
	// The streams' base context ends first when the test ends, so open
	// streams finish before the server closes.
	ctx, cancel := context.WithCancel(context.Background())
	b.srv = httptest.NewUnstartedServer(testenv.Router(b.deps, b.svc))
	if listen != nil {
		b.srv.Listener = listen(b.srv.Listener)
	}
	b.srv.Config.BaseContext = func(net.Listener) context.Context { return ctx }
	b.srv.Start()
	t.Cleanup(func() {
		cancel()
		b.srv.CloseClientConnections()
		b.srv.Close()
	})
	return b
}

// job builds the lifecycle events of one job.
type job struct {
	id, tenant, queue, typ string
	tags                   []string
}

func (j job) ref(attempt int) schema.JobRef {
	return schema.JobRef{JobID: j.id, TenantID: j.tenant, Attempt: attempt}
}

func (j job) enqueued() schema.Data {
	now := time.Now().UTC()
	return schema.Enqueued{JobRef: j.ref(1), Job: schema.JobSpec{Type: j.typ, Queue: j.queue, Priority: 5, MaxAttempts: 5, Tags: j.tags, Pool: "short"},
		CreatedAt: now, RunAt: now, Reason: schema.ReasonSubmitted}
}
func (j job) started() schema.Data {
	return schema.Started{JobRef: j.ref(1), WorkerID: "w1", DispatchID: "d1", StartedAt: time.Now().UTC()}
}
func (j job) progress(pct float64, msg string) schema.Data {
	return schema.Progress{JobRef: j.ref(1), WorkerID: "w1", DispatchID: "d1", Percent: pct, Message: msg, At: time.Now().UTC()}
}
func (j job) completed() schema.Data {
	now := time.Now().UTC()
	return schema.Completed{JobRef: j.ref(1), WorkerID: "w1", DispatchID: "d1", Result: json.RawMessage(`{"ok": true}`), StartedAt: now, FinishedAt: now}
}
func (j job) failed() schema.Data {
	now := time.Now().UTC()
	return schema.Failed{JobRef: j.ref(1), WorkerID: "w1", DispatchID: "d1", Error: schema.ErrorInfo{Class: schema.ClassAppError, Message: "boom"}, StartedAt: now, FinishedAt: now}
}

// produce writes events to their lifecycle topics, one at a time, in order.
func (b *bundle) produce(t *testing.T, events ...schema.Data) {
	t.Helper()
	for _, d := range events {
		lc := d.(schema.Lifecycle)
		rec, err := schema.NewRecord(b.deps.Topics.Lifecycle(lc.EventType()), "ferry/test", d)
		if err != nil {
			t.Fatal(err)
		}
		if err := kafkax.ProduceAll(context.Background(), b.deps.Kafka, rec); err != nil {
			t.Fatal(err)
		}
	}
}

// produceLogged produces events one at a time, each once the previous one
// is in the log. Events of one job travel on different topics, which Kafka
// does not order among themselves; tests that check the order of events
// across topics use it to fix the order of arrival.
func (b *bundle) produceLogged(t *testing.T, events ...schema.Data) {
	t.Helper()
	for _, e := range events {
		n := b.logged(t)
		b.produce(t, e)
		b.waitLogged(t, n+1)
	}
}

func (b *bundle) logged(t *testing.T) int64 { t.Helper(); return int64(b.svc.events.Len()) }
func (b *bundle) held(t *testing.T) int64   { t.Helper(); return int64(b.svc.events.Held()) }

// waitCount waits until done accepts count(), the number of events in the
// log or in its hold.
func waitCount(t *testing.T, what string, count func() int64, want string, done func(int64) bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		got := count()
		if done(got) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s holds %d events, want %s", what, got, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitLogged waits until the log holds at least n events.
func (b *bundle) waitLogged(t *testing.T, n int64) {
	t.Helper()
	waitCount(t, "the log", func() int64 { return b.logged(t) }, fmt.Sprintf("≥ %d", n), func(got int64) bool { return got >= n })
}

// waitHeld waits until exactly n events wait in the hold.
func (b *bundle) waitHeld(t *testing.T, n int64) {
	t.Helper()
	waitCount(t, "the hold", func() int64 { return b.held(t) }, fmt.Sprint(n), func(got int64) bool { return got == n })
}

// frame is one SSE message (or comment, with event "comment").
type frame struct {
	id    string
	event string
	data  string
}

func (f frame) String() string {
	d := f.data
	if len(d) > 60 {
		d = d[:60] + "…"
	}
	return fmt.Sprintf("{%s %s %s}", f.id, f.event, d)
}

func (f frame) seq() int64 { n, _ := strconv.ParseInt(f.id, 10, 64); return n }

func (f frame) payload(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(f.data), &m); err != nil {
		t.Fatalf("data %q: %v", f.data, err)
	}
	return m
}

// sseClient is a real SSE client over HTTP.
type sseClient struct {
	res    *http.Response
	frames chan frame
}

func (b *bundle) open(t *testing.T, key, path, lastID string) *sseClient {
	t.Helper()
	c, status := b.tryOpen(t, key, path, lastID)
	if status != http.StatusOK {
		t.Fatalf("GET %s: status %d", path, status)
	}
	return c
}

func (b *bundle) tryOpen(t *testing.T, key, path, lastID string) (*sseClient, int) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, b.srv.URL+path, nil)
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Accept", "text/event-stream")
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	res, err := b.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != http.StatusOK {
		res.Body.Close()
		return nil, res.StatusCode
	}
	if ct := res.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("Content-Type %q", ct)
	}
	c := &sseClient{res: res, frames: make(chan frame, 4096)}
	t.Cleanup(c.close)
	go c.read()
	return c, res.StatusCode
}

func (c *sseClient) read() {
	defer close(c.frames)
	sc := bufio.NewScanner(c.res.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	var f frame
	var has bool
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if has {
				c.frames <- f
			}
			f, has = frame{}, false
		case strings.HasPrefix(line, ":"):
			c.frames <- frame{event: "comment", data: strings.TrimSpace(line[1:])}
		default:
			k, v, _ := strings.Cut(line, ":")
			v = strings.TrimPrefix(v, " ")
			switch k {
			case "id":
				f.id, has = v, true
			case "event":
				f.event, has = v, true
			case "data":
				f.data, has = v, true
			}
		}
	}
}

func (c *sseClient) close() { c.res.Body.Close() }

// next returns the next event (comments and retry lines skipped); ok is
// false when the server closed the stream.
func (c *sseClient) next(t *testing.T) (frame, bool) {
	t.Helper()
	timeout := time.After(15 * time.Second)
	for {
		select {
		case f, ok := <-c.frames:
			if !ok {
				return f, false
			}
			if f.event == "comment" || f.event == "" {
				continue
			}
			return f, true
		case <-timeout:
			t.Fatal("no event within 15s")
		}
	}
}

// expect reads len(events) events and checks their names and job ids.
func (c *sseClient) expect(t *testing.T, want ...string) []frame {
	t.Helper()
	var got []frame
	for i := range want {
		f, ok := c.next(t)
		if !ok {
			if len(got) > 5 {
				got = got[len(got)-5:]
			}
			t.Fatalf("stream closed after %d of %d events; last events %v", i, len(want), got)
		}
		got = append(got, f)
		name := f.event
		if jobID, _ := f.payload(t)["job_id"].(string); jobID != "" && strings.Contains(want[i], "/") {
			name = jobID + "/" + f.event
		}
		if name != want[i] {
			if len(got) > 5 {
				got = got[len(got)-5:]
			}
			t.Fatalf("event %d is %s (%v), want %s; last events %v", i, name, f, want[i], got)
		}
		if i > 0 && f.seq() <= got[i-1].seq() {
			t.Fatalf("ids not increasing: %s after %s", f.id, got[i-1].id)
		}
	}
	return got
}

func (c *sseClient) expectClosed(t *testing.T) {
	t.Helper()
	if f, ok := c.next(t); ok {
		t.Fatalf("want the stream closed, got %+v", f)
	}
}

func TestJobStreamLiveInOrderThenCloses(t *testing.T) {
	b := setup(t, Config{}, nil)
	j := job{id: "job_live", tenant: "acme", queue: "default", typ: "email", tags: []string{"x"}}
	b.produce(t, j.enqueued())
	c := b.open(t, b.keyA, "/v1/jobs/job_live/events", "")
	c.expect(t, "enqueued")
	b.produceLogged(t, j.started(), j.progress(10, "a"), j.progress(50, "b"), j.progress(90, "c"), j.completed())
	got := c.expect(t, "started", "progress", "progress", "progress", "completed")
	c.expectClosed(t)

	p := got[1].payload(t)
	if p["type"] != "progress" || p["job_id"] != "job_live" || p["tenant_id"] != "acme" || p["attempt"] != float64(1) || p["id"] == "" || p["time"] == "" {
		t.Fatalf("progress payload %v", p)
	}
	if d, _ := p["data"].(map[string]any); d["percent"] != float64(10) || d["message"] != "a" {
		t.Fatalf("progress data %v", p["data"])
	}
	if b.svc.Streams() != 0 {
		t.Fatalf("%d streams still open", b.svc.Streams())
	}
}

func TestReconnectWithLastEventIDMissesNothingTwice(t *testing.T) {
	b := setup(t, Config{}, nil)
	j := job{id: "job_resume", tenant: "acme", queue: "default", typ: "email"}
	b.produceLogged(t, j.enqueued(), j.started(), j.progress(1, "p1"))
	c := b.open(t, b.keyA, "/v1/jobs/job_resume/events", "")
	got := c.expect(t, "enqueued", "started", "progress")
	c.close()

	// While the client is away.
	b.produce(t, j.progress(2, "p2"), j.progress(3, "p3"))
	b.waitLogged(t, 5)
	c = b.open(t, b.keyA, "/v1/jobs/job_resume/events", got[2].id)
	again := c.expect(t, "progress", "progress")
	b.produceLogged(t, j.progress(4, "p4"), j.completed())
	again = append(again, c.expect(t, "progress", "completed")...)
	c.expectClosed(t)
	for i, f := range again {
		if f.seq() <= got[2].seq() {
			t.Fatalf("event %d (id %s) was already sent before the reconnect", i, f.id)
		}
		if i < 3 {
			if m := f.payload(t)["data"].(map[string]any)["message"]; m != fmt.Sprintf("p%d", i+2) {
				t.Fatalf("event %d message %v, want p%d", i, m, i+2)
			}
		}
	}

	// An EventSource reconnecting after the final event is told to stop.
	if _, status := b.tryOpen(t, b.keyA, "/v1/jobs/job_resume/events", again[3].id); status != http.StatusNoContent {
		t.Fatalf("reconnect after the final event: status %d, want 204", status)
	}
}

// TestOutOfOrderTopicsStreamInOrder consumes a job's completed before its
// started (they travel on different topics): the completed waits in the
// hold, and the stream still shows started before completed, then closes.
func TestOutOfOrderTopicsStreamInOrder(t *testing.T) {
	b := setup(t, Config{OrderHold: time.Minute}, nil)
	j := job{id: "job_ooo", tenant: "acme", queue: "default", typ: "email"}
	b.produceLogged(t, j.enqueued())
	c := b.open(t, b.keyA, "/v1/jobs/job_ooo/events", "")
	c.expect(t, "enqueued")
	b.produce(t, j.completed())
	b.waitHeld(t, 1)
	if n := b.logged(t); n != 1 {
		t.Fatalf("log holds %d events before started arrived, want 1", n)
	}
	b.produce(t, j.progress(50, "half"), j.started())
	c.expect(t, "started", "progress", "completed")
	c.expectClosed(t)
	if n := b.held(t); n != 0 {
		t.Fatalf("%d events still held", n)
	}

	// A started consumed before its job's enqueued waits for it too.
	k := job{id: "job_ooo2", tenant: "acme", queue: "bulk", typ: "sms"}
	b.produce(t, k.started())
	b.waitHeld(t, 1)
	b.produce(t, k.enqueued())
	b.waitLogged(t, 6)
	c = b.open(t, b.keyA, "/v1/jobs/job_ooo2/events", "")
	c.expect(t, "enqueued", "started")
}

// TestHeldEventIsLoggedAfterTheHold: an event whose predecessor never
// arrives is logged once the hold has passed, without any further record.
func TestHeldEventIsLoggedAfterTheHold(t *testing.T) {
	b := setup(t, Config{OrderHold: 300 * time.Millisecond}, nil)
	j := job{id: "job_nostart", tenant: "acme", queue: "default", typ: "email"}
	b.produceLogged(t, j.enqueued())
	c := b.open(t, b.keyA, "/v1/jobs/job_nostart/events", "")
	c.expect(t, "enqueued")
	start := time.Now()
	b.produce(t, j.completed())
	c.expect(t, "completed")
	if waited := time.Since(start); waited < 300*time.Millisecond {
		t.Fatalf("completed streamed after %s, before the hold passed", waited)
	}
	c.expectClosed(t)
	if n := b.held(t); n != 0 {
		t.Fatalf("%d events still held", n)
	}
}

func TestFinishedJobReplaysHistoryThenCloses(t *testing.T) {
	b := setup(t, Config{}, nil)
	j := job{id: "job_done", tenant: "acme", queue: "default", typ: "email"}
	b.produceLogged(t, j.enqueued(), j.started(), j.progress(50, ""), j.failed(), j.completed())
	// A late duplicate-looking report after the final event is not shown.
	b.produce(t, j.progress(99, "late"))
	b.waitLogged(t, 5)
	c := b.open(t, b.keyA, "/v1/jobs/job_done/events", "")
	c.expect(t, "enqueued", "started", "progress", "failed", "completed")
	c.expectClosed(t)
}

func TestTenantStreamFilters(t *testing.T) {
	b := setup(t, Config{}, nil)
	a := job{id: "job_a", tenant: "acme", queue: "bulk", typ: "email", tags: []string{"vip"}}
	s := job{id: "job_s", tenant: "acme", queue: "default", typ: "sms"}
	all := b.open(t, b.keyA, "/v1/events", "")
	bulk := b.open(t, b.keyA, "/v1/events?queue=bulk", "")
	sms := b.open(t, b.keyA, "/v1/events?type=sms", "")
	vip := b.open(t, b.keyA, "/v1/events?tag=vip,other", "")
	ends := b.open(t, b.keyA, "/v1/events?event=completed&event=failed", "")
	mixed := b.open(t, b.keyA, "/v1/events?type=email&event=started", "")

	b.produceLogged(t, a.enqueued(), s.enqueued(), a.started(), s.started(), s.failed(), a.completed())
	all.expect(t, "job_a/enqueued", "job_s/enqueued", "job_a/started", "job_s/started", "job_s/failed", "job_a/completed")
	bulk.expect(t, "job_a/enqueued", "job_a/started", "job_a/completed")
	sms.expect(t, "job_s/enqueued", "job_s/started", "job_s/failed")
	vip.expect(t, "job_a/enqueued", "job_a/started", "job_a/completed")
	ends.expect(t, "job_s/failed", "job_a/completed")
	mixed.expect(t, "job_a/started")

	// Tenant streams stay open after a job ends, and resume too.
	resumed := b.open(t, b.keyA, "/v1/events?queue=bulk", "0")
	resumed.expect(t, "job_a/enqueued", "job_a/started", "job_a/completed")

	if _, status := b.tryOpen(t, b.keyA, "/v1/events?event=exploded", ""); status != http.StatusBadRequest {
		t.Fatalf("unknown event filter: status %d, want 400", status)
	}
	if _, status := b.tryOpen(t, b.keyA, "/v1/events", "abc"); status != http.StatusBadRequest {
		t.Fatalf("bad Last-Event-ID: status %d, want 400", status)
	}
}

func TestTenantIsolation(t *testing.T) {
	b := setup(t, Config{JobGrace: 200 * time.Millisecond}, nil)
	mine := job{id: "job_acme", tenant: "acme", queue: "default", typ: "email"}
	theirs := job{id: "job_globex", tenant: "globex", queue: "default", typ: "email"}
	globexAll := b.open(t, b.keyB, "/v1/events", "")
	b.produceLogged(t, mine.enqueued(), mine.started(), theirs.enqueued())
	globexAll.expect(t, "job_globex/enqueued")
	b.waitLogged(t, 3)

	if _, status := b.tryOpen(t, b.keyB, "/v1/jobs/job_acme/events", ""); status != http.StatusNotFound {
		t.Fatalf("another tenant's job: status %d, want 404", status)
	}
	if _, status := b.tryOpen(t, b.keyA, "/v1/jobs/job_nope/events", ""); status != http.StatusNotFound {
		t.Fatalf("unknown job: status %d, want 404", status)
	}
	if _, status := b.tryOpen(t, "fry_wrong", "/v1/events", ""); status != http.StatusUnauthorized {
		t.Fatalf("bad key: status %d, want 401", status)
	}
	// Resuming globex's stream from the start replays only globex's events.
	again := b.open(t, b.keyB, "/v1/events", "0")
	again.expect(t, "job_globex/enqueued")
	b.produce(t, theirs.started())
	again.expect(t, "job_globex/started")
}

func TestRetentionResets(t *testing.T) {
	b := setup(t, Config{}, nil)
	j := job{id: "job_old", tenant: "acme", queue: "default", typ: "email"}
	b.produce(t, j.enqueued(), j.started())
	b.waitLogged(t, 2)
	first := b.open(t, b.keyA, "/v1/jobs/job_old/events", "").expect(t, "enqueued", "started")[0]
	if n := b.svc.events.Prune(time.Now().Add(time.Hour)); n != 2 {
		t.Fatalf("retention evicted %d events, want 2", n)
	}
	head := b.svc.events.Head()
	c := b.open(t, b.keyA, "/v1/events", first.id)
	f := c.expect(t, "reset")[0]
	if f.seq() != head {
		t.Fatalf("reset id %s, want the head %d", f.id, head)
	}
	b.produce(t, job{id: "job_new", tenant: "acme"}.enqueued())
	c.expect(t, "job_new/enqueued")
}

// firstConnSmall gives the first accepted connection (the stalled client's)
// a tiny send buffer.
type firstConnSmall struct {
	net.Listener
	once sync.Once
}

func (l *firstConnSmall) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		l.once.Do(func() { _ = tc.SetWriteBuffer(4096) })
	}
	return c, err
}

func TestStalledClientIsCutOffWithoutDelayingOthers(t *testing.T) {
	b := setup(t, Config{Buffer: 64, WriteTimeout: time.Second}, func(l net.Listener) net.Listener { return &firstConnSmall{Listener: l} })

	// A client that sends its request and never reads, with tiny TCP
	// buffers on both ends.
	d := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		return c.Control(func(fd uintptr) { _ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 2048) })
	}}
	raw, err := d.Dial("tcp", b.srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	_ = raw.(*net.TCPConn).SetReadBuffer(2048)
	fmt.Fprintf(raw, "GET /v1/events HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n\r\n", b.keyA)

	healthy := b.open(t, b.keyA, "/v1/events", "")
	deadline := time.Now().Add(10 * time.Second)
	for b.svc.Streams() < 2 {
		if time.Now().After(deadline) {
			t.Fatal("stalled client never connected")
		}
		time.Sleep(10 * time.Millisecond)
	}

	j := job{id: "job_flood", tenant: "acme", queue: "default", typ: "email"}
	msg := strings.Repeat("m", 2000)
	var evs []schema.Data
	const n = 600
	b.produceLogged(t, j.enqueued(), j.started())
	for i := range n {
		evs = append(evs, j.progress(float64(i)/n*100, msg))
	}
	var wg sync.WaitGroup
	wg.Go(func() { b.produce(t, evs...) })
	want := make([]string, len(evs)+2)
	want[0], want[1] = "enqueued", "started"
	for i := 2; i < len(want); i++ {
		want[i] = "progress"
	}
	healthy.expect(t, want...)
	wg.Wait()

	// The stalled client is disconnected (overflow, or the write timeout
	// if the server is blocked writing to it); the healthy one stays.
	deadline = time.Now().Add(15 * time.Second)
	for b.svc.Streams() != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("%d streams open, want only the healthy one", b.svc.Streams())
		}
		time.Sleep(20 * time.Millisecond)
	}
	b.produce(t, j.completed())
	healthy.expect(t, "completed")
}

func TestBurstCatchesUpFromTheLog(t *testing.T) {
	// No hold: the burst's progress events are logged without a started.
	b := setup(t, Config{Buffer: 4, OrderHold: -1}, nil)
	c := b.open(t, b.keyA, "/v1/events", "")
	j := job{id: "job_burst", tenant: "acme", queue: "default", typ: "email"}
	b.produce(t, j.enqueued())
	c.expect(t, "job_burst/enqueued")
	// 20 events logged at once reach the hub in one publish, which
	// overflows the 4-event buffer: the client catches up from the log.
	b.appendBurst(t, j, 20)
	want := make([]string, 20)
	for i := range want {
		want[i] = "job_burst/progress"
	}
	c.expect(t, want...)
	b.produceLogged(t, j.started(), j.completed())
	c.expect(t, "job_burst/started", "job_burst/completed")
}

func TestClientTooFarBehindGetsOverflow(t *testing.T) {
	b := setup(t, Config{Buffer: 4, MaxLag: 8, OrderHold: -1}, nil)
	c := b.open(t, b.keyA, "/v1/events", "")
	j := job{id: "job_lag", tenant: "acme", queue: "default", typ: "email"}
	b.produce(t, j.enqueued())
	first := c.expect(t, "job_lag/enqueued")[0]
	b.appendBurst(t, j, 20)
	var f frame
	var ok bool
	for f, ok = c.next(t); ok && f.event != "overflow"; f, ok = c.next(t) {
	}
	if !ok {
		t.Fatal("stream closed without an overflow event")
	}
	if f.seq() < first.seq()+8 {
		t.Fatalf("overflow id %s, want the last id sent (≥ %d)", f.id, first.seq()+8)
	}
	c.expectClosed(t)
	// Resuming from the overflow id gets the rest.
	c = b.open(t, b.keyA, "/v1/events", f.id)
	rest := 20 - int(f.seq()-first.seq())
	want := make([]string, rest)
	for i := range want {
		want[i] = "job_lag/progress"
	}
	c.expect(t, want...)
}

// appendBurst logs n progress events of j in one append, as one fetch
// of a backlog would.
func (b *bundle) appendBurst(t *testing.T, j job, n int) {
	t.Helper()
	recs := make([]*kgo.Record, n)
	for i := range recs {
		rec, err := schema.NewRecord(b.deps.Topics.Lifecycle(schema.EventProgress), "ferry/test", j.progress(float64(i), fmt.Sprint(i)))
		if err != nil {
			t.Fatal(err)
		}
		recs[i] = rec
	}
	b.svc.events.Append(recs)
}

func TestManyIdleStreams(t *testing.T) {
	const n = 200 // one tenant's: above the default cap of streams per tenant
	b := setup(t, Config{KeepAlive: 300 * time.Millisecond, MaxStreams: n}, nil)
	clients := make([]*sseClient, n)
	for i := range clients {
		clients[i] = b.open(t, b.keyA, "/v1/events", "")
	}
	if got := b.svc.Streams(); got != n {
		t.Fatalf("%d streams open, want %d", got, n)
	}
	// Keep-alive comments flow on idle streams.
	timeout := time.After(10 * time.Second)
	for {
		select {
		case f := <-clients[0].frames:
			if f.event != "comment" || f.data != "keep-alive" {
				continue
			}
		case <-timeout:
			t.Fatal("no keep-alive comment")
		}
		break
	}
	time.Sleep(time.Second)
	if got := b.svc.Streams(); got != n {
		t.Fatalf("%d streams open after idling, want %d", got, n)
	}
	b.produce(t, job{id: "job_one", tenant: "acme"}.enqueued())
	for _, c := range clients {
		c.expect(t, "job_one/enqueued")
	}
}

// TestLogWritesNothingToPostgres: the log lives in memory, fed from Kafka:
// the old Postgres log's tables are dropped, and its consumer stores no
// offsets.
func TestLogWritesNothingToPostgres(t *testing.T) {
	b := setup(t, Config{}, nil)
	j := job{id: "job_pg", tenant: "acme", queue: "default", typ: "email"}
	b.produceLogged(t, j.enqueued(), j.started(), j.completed())
	b.open(t, b.keyA, "/v1/jobs/job_pg/events", "").expect(t, "enqueued", "started", "completed")
	var tables []string
	err := b.deps.Postgres.QueryRow(context.Background(), `
		SELECT COALESCE(array_agg(n), '{}') FROM unnest(ARRAY['sse_events', 'sse_jobs', 'sse_held', 'sse_state']) n
		WHERE to_regclass(n) IS NOT NULL`).Scan(&tables)
	if err != nil {
		t.Fatal(err)
	}
	if len(tables) > 0 {
		t.Fatalf("tables of the old Postgres log still exist: %v", tables)
	}
	var offsetsTable bool
	if err := b.deps.Postgres.QueryRow(context.Background(), `SELECT to_regclass('ferry_offsets') IS NOT NULL`).Scan(&offsetsTable); err != nil {
		t.Fatal(err)
	}
	if !offsetsTable {
		return // no projection ever ran here: nothing can be stored
	}
	var offsets int
	if err := b.deps.Postgres.QueryRow(context.Background(),
		`SELECT count(*) FROM ferry_offsets WHERE consumer_group = 'ferry-sse-log'`).Scan(&offsets); err != nil {
		t.Fatal(err)
	}
	if offsets != 0 {
		t.Fatalf("%d offsets stored for ferry-sse-log", offsets)
	}
}

// TestReplicaReadsBackKafkaAndResetsForeignIDs: a process started after a
// job ran (a restart, or another replica) reads the recent past back from
// Kafka, so the job's stream replays its history in order; an id another
// process handed out is not a position in its log: the client is told to
// re-sync.
func TestReplicaReadsBackKafkaAndResetsForeignIDs(t *testing.T) {
	b := setup(t, Config{}, nil)
	j := job{id: "job_rep", tenant: "acme", queue: "bulk", typ: "email", tags: []string{"t"}}
	b.produceLogged(t, j.enqueued(), j.started(), j.progress(50, "half"), j.completed())
	first := b.open(t, b.keyA, "/v1/jobs/job_rep/events", "").expect(t, "enqueued", "started", "progress", "completed")

	r := start(t, b.deps, b.keyA, b.keyB, Config{JobGrace: 10 * time.Second}, nil)
	got := r.open(t, r.keyA, "/v1/jobs/job_rep/events", "").expect(t, "enqueued", "started", "progress", "completed")
	for i := range got {
		if got[i].payload(t)["id"] != first[i].payload(t)["id"] {
			t.Fatalf("replica event %d is %v, first process's %v", i, got[i], first[i])
		}
	}
	// Ids are per process and increase across processes.
	if got[0].seq() <= first[len(first)-1].seq() {
		t.Fatalf("replica ids start at %d, not after the first process's %d", got[0].seq(), first[len(first)-1].seq())
	}
	// Filters apply to the replayed events too.
	r.open(t, r.keyA, "/v1/events?queue=bulk&event=completed", "0").expect(t, "job_rep/completed")

	// The first process's id on the replica: reset at the replica's head.
	c := r.open(t, r.keyA, "/v1/events", first[1].id)
	if f := c.expect(t, "reset")[0]; f.seq() != r.svc.events.Head() {
		t.Fatalf("reset id %s, want the replica's head %d", f.id, r.svc.events.Head())
	}
	k := job{id: "job_rep2", tenant: "acme", queue: "bulk", typ: "email"}
	b.produce(t, k.enqueued())
	c.expect(t, "job_rep2/enqueued")
}

// TestLogSizeBoundsTheLog: the log keeps its newest LogSize events; a
// position before them gets a reset, a job with nothing left answers 404.
func TestLogSizeBoundsTheLog(t *testing.T) {
	const size = 4
	b := setup(t, Config{LogSize: size, JobGrace: 200 * time.Millisecond}, nil)
	all := b.open(t, b.keyA, "/v1/events", "")
	var ids []string
	for i := range size + 3 {
		id := fmt.Sprintf("job_size%d", i)
		b.produce(t, job{id: id, tenant: "acme", queue: "default", typ: "email"}.enqueued())
		ids = append(ids, all.expect(t, id+"/enqueued")[0].id)
	}
	if n := b.logged(t); n != size {
		t.Fatalf("log holds %d events, want %d", n, size)
	}
	if _, status := b.tryOpen(t, b.keyA, "/v1/jobs/job_size0/events", ""); status != http.StatusNotFound {
		t.Fatalf("job evicted from the log: status %d, want 404", status)
	}
	// The newest evicted id is still a position: what follows is all there.
	b.open(t, b.keyA, "/v1/events", ids[2]).expect(t, "job_size3/enqueued", "job_size4/enqueued", "job_size5/enqueued", "job_size6/enqueued")
	c := b.open(t, b.keyA, "/v1/events", ids[1])
	if f := c.expect(t, "reset")[0]; f.id != ids[len(ids)-1] {
		t.Fatalf("reset id %s, want the head %s", f.id, ids[len(ids)-1])
	}
}
