package worker_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ferryhq/ferry/events/schema"
	"github.com/ferryhq/ferry/platform/config"
	"github.com/ferryhq/ferry/services/worker"
)

func TestNoopCompletesAndStatusIsAnnounced(t *testing.T) {
	t.Parallel()
	b := newBench(t)
	stop := b.start(worker.Config{Concurrency: 8}, nil)
	d := b.dispatch("noop", nil)

	c := b.completed(d)
	if c.WorkerID != "w-"+t.Name() || c.DispatchID != d.DispatchID || c.TenantID != "tenant-1" || c.Attempt != 1 {
		t.Errorf("completed = %+v", c)
	}
	st := b.waitFor("started", ofJob[schema.Started](d.JobID)).Data.(schema.Started)
	if st.DispatchID != d.DispatchID || st.StartedAt.IsZero() {
		t.Errorf("started = %+v", st)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	var sawRunning, sawStop bool
	for _, ev := range b.all(func(ev schema.Event) bool { _, ok := ev.Data.(schema.WorkerStatus); return ok }) {
		ws := ev.Data.(schema.WorkerStatus)
		if ws.Pool != schema.PoolShort {
			t.Errorf("status pool = %q", ws.Pool)
		}
		if !ws.Stopping && ws.Slots == 8 {
			sawRunning = true
		}
		if ws.Stopping {
			sawStop = true
		}
	}
	if !sawRunning || !sawStop {
		t.Errorf("worker status: running announcement %v, stopping announcement %v", sawRunning, sawStop)
	}
}

func TestSleepReportsProgressThenCompletes(t *testing.T) {
	t.Parallel()
	b := newBench(t)
	b.start(worker.Config{Heartbeat: 150 * time.Millisecond}, nil)
	d := b.dispatch("sleep", map[string]int{"ms": 800})

	c := b.completed(d)
	var res map[string]any
	if err := json.Unmarshal(c.Result, &res); err != nil || res["slept_ms"] != float64(800) {
		t.Errorf("result = %s (%v)", c.Result, err)
	}
	// The final report (100 %) is always sent, possibly just after the
	// completion's acknowledgement on another topic.
	b.waitFor("progress 100%", func(ev schema.Event) bool {
		p, ok := ev.Data.(schema.Progress)
		return ok && p.JobID == d.JobID && p.Percent == 100
	})
	ps := b.all(ofJob[schema.Progress](d.JobID))
	if len(ps) < 3 {
		t.Fatalf("got %d progress events, want several", len(ps))
	}
	last := -1.0
	for _, ev := range ps {
		p := ev.Data.(schema.Progress)
		if p.Percent < last {
			t.Errorf("progress went back from %v to %v", last, p.Percent)
		}
		last = p.Percent
	}
}

// TestSilentJobSendsHeartbeats: a handler that never reports still renews
// its lease: heartbeats (progress events at 0 %) every Heartbeat while it
// runs, from the reporter that starts at the first one, and none after it
// ended.
func TestSilentJobSendsHeartbeats(t *testing.T) {
	t.Parallel()
	b := newBench(t)
	release := make(chan struct{})
	b.start(worker.Config{Heartbeat: 100 * time.Millisecond}, func(r *worker.Registry) {
		r.Register("silent", func(ctx context.Context, job *worker.Job) (any, error) {
			<-release
			return nil, nil
		})
	})
	d := b.dispatch("silent", nil)
	isBeat, beats := ofJob[schema.Progress](d.JobID), 0
	b.waitFor("a second heartbeat", func(ev schema.Event) bool {
		if isBeat(ev) {
			beats++
		}
		return beats >= 2
	})
	close(release)
	c := b.completed(d)
	for _, ev := range b.all(ofJob[schema.Progress](d.JobID)) {
		if p := ev.Data.(schema.Progress); p.Percent != 0 || p.DispatchID != d.DispatchID || p.At.After(c.FinishedAt) {
			t.Errorf("heartbeat %+v (finished at %s)", p, c.FinishedAt)
		}
	}
}

func TestProgressIsCoalesced(t *testing.T) {
	t.Parallel()
	b := newBench(t)
	b.start(worker.Config{}, func(r *worker.Registry) {
		r.Register("chatty", func(ctx context.Context, job *worker.Job) (any, error) {
			for i := range 1000 {
				job.Progress(float64(i)/10, "")
				time.Sleep(200 * time.Microsecond)
			}
			job.Progress(100, "last")
			return nil, nil
		})
	})
	d := b.dispatch("chatty", nil)
	c := b.completed(d)
	b.waitFor("last progress", func(ev schema.Event) bool {
		p, ok := ev.Data.(schema.Progress)
		return ok && p.JobID == d.JobID && p.Message == "last"
	})
	// At most one event per 100ms of running time (plus the last one).
	limit := int(c.FinishedAt.Sub(c.StartedAt)/(100*time.Millisecond)) + 2
	if n := len(b.all(ofJob[schema.Progress](d.JobID))); n > limit {
		t.Errorf("got %d progress events for 1001 reports in %s", n, c.FinishedAt.Sub(c.StartedAt))
		for _, ev := range b.all(ofJob[schema.Progress](d.JobID)) {
			p := ev.Data.(schema.Progress)
			t.Logf("%s %v %q", p.At.Sub(c.StartedAt), p.Percent, p.Message)
		}
	}
}

func TestConcurrencyIsBoundedWithoutHeadOfLineBlocking(t *testing.T) {
	t.Parallel()
	b := newBench(t)
	var running, peak atomic.Int64
	release := make(chan struct{})
	b.start(worker.Config{Concurrency: 64}, func(r *worker.Registry) {
		r.Register("probe", func(ctx context.Context, job *worker.Job) (any, error) {
			n := running.Add(1)
			defer running.Add(-1)
			for {
				p := peak.Load()
				if n <= p || peak.CompareAndSwap(p, n) {
					break
				}
			}
			time.Sleep(20 * time.Millisecond)
			return nil, nil
		})
		r.Register("slow", func(ctx context.Context, job *worker.Job) (any, error) {
			select {
			case <-release:
				return "released", nil
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		})
	})
	slow := b.dispatch("slow", nil)
	b.waitFor("slow started", ofJob[schema.Started](slow.JobID))
	jobs := make([]schema.Dispatch, 200)
	for i := range jobs {
		jobs[i] = b.dispatch("probe", nil)
	}
	for _, d := range jobs {
		b.completed(d)
	}
	if p := peak.Load(); p > 63 { // 64 slots, one held by the slow job
		t.Errorf("peak concurrency %d exceeds 63 free slots", p)
	} else if p < 2 {
		t.Errorf("peak concurrency %d: jobs did not run in parallel", p)
	}
	if len(b.all(ofJob[schema.Completed](slow.JobID))) != 0 {
		t.Fatal("slow job completed before release")
	}
	close(release)
	b.completed(slow)
}

func TestTimeout(t *testing.T) {
	t.Parallel()
	b := newBench(t)
	b.start(worker.Config{}, nil)
	d := b.dispatch("sleep", map[string]int{"ms": 60_000}, withTimeout(200*time.Millisecond))
	f := b.failed(d)
	if f.Error.Class != schema.ClassTimeout || !strings.Contains(f.Error.Message, "200ms") {
		t.Errorf("failed = %+v", f.Error)
	}
}

func TestCancelRunningJob(t *testing.T) {
	t.Parallel()
	b := newBench(t)
	b.start(worker.Config{}, nil)
	d := b.dispatch("sleep", map[string]int{"ms": 60_000})
	b.waitFor("started", ofJob[schema.Started](d.JobID))
	b.cancelJob(d)
	f := b.failed(d)
	if f.Error.Class != schema.ClassCancelled {
		t.Errorf("failed = %+v", f.Error)
	}
	if took := f.FinishedAt.Sub(f.StartedAt); took > 20*time.Second {
		t.Errorf("cancellation took %s", took)
	}
}

func TestFailClasses(t *testing.T) {
	t.Parallel()
	b := newBench(t)
	b.start(worker.Config{}, nil)
	cases := []struct {
		class      string
		want       schema.ErrorClass
		retryAfter string
	}{
		{"", schema.ClassAppError, ""},
		{"app_error", schema.ClassAppError, ""},
		{"permanent", schema.ClassPermanent, ""},
		{"timeout", schema.ClassTimeout, ""},
		{"retryable", schema.ClassRetryable, "3s"},
	}
	for _, c := range cases {
		p := map[string]any{"times": 2, "class": c.class}
		if c.retryAfter != "" {
			p["retry_after"] = c.retryAfter
		}
		for attempt := 1; attempt <= 3; attempt++ {
			d := b.dispatch("fail", p, withAttempt(attempt))
			if attempt == 3 {
				if res := b.completed(d).Result; string(res) != `{"attempt":3}` {
					t.Errorf("class %q: result %s", c.class, res)
				}
				continue
			}
			f := b.failed(d)
			if f.Error.Class != c.want {
				t.Errorf("class %q attempt %d: got %s", c.class, attempt, f.Error.Class)
			}
			if c.retryAfter != "" && f.RetryAfter.D() != 3*time.Second {
				t.Errorf("retry_after = %s", f.RetryAfter.D())
			}
		}
	}
}

func TestPanic(t *testing.T) {
	t.Parallel()
	b := newBench(t)
	b.start(worker.Config{}, func(r *worker.Registry) {
		r.Register("boom", func(context.Context, *worker.Job) (any, error) { panic("kaboom") })
	})
	if f := b.failed(b.dispatch("boom", nil)); f.Error.Class != schema.ClassAppError || !strings.Contains(f.Error.Message, "kaboom") {
		t.Errorf("panic: %+v", f.Error)
	}
}

func TestEffectivelyOnce(t *testing.T) {
	t.Parallel()
	b := newBench(t)
	var runs sync.Map
	count := func(id string) int64 {
		v, _ := runs.LoadOrStore(id, new(atomic.Int64))
		return v.(*atomic.Int64).Load()
	}
	release := make(chan struct{})
	b.start(worker.Config{}, func(r *worker.Registry) {
		r.Register("count", func(ctx context.Context, job *worker.Job) (any, error) {
			v, _ := runs.LoadOrStore(job.ID, new(atomic.Int64))
			v.(*atomic.Int64).Add(1)
			if strings.Contains(string(job.Payload), "hold") {
				<-release
			}
			return nil, nil
		})
	})
	// A completed job dispatched again (late re-dispatch) is dropped.
	done := b.dispatch("count", nil)
	b.completed(done)
	b.dispatch("count", nil, withID(done.JobID))
	// A job dispatched again while it runs is dropped too.
	held := b.dispatch("count", "hold")
	b.waitFor("held started", ofJob[schema.Started](held.JobID))
	b.dispatch("count", "hold", withID(held.JobID))
	// A marker job on every partition shows the duplicates were consumed.
	for range 16 {
		b.completed(b.dispatch("count", nil))
	}
	time.Sleep(500 * time.Millisecond)
	close(release)
	b.completed(held)
	if n := count(done.JobID); n != 1 {
		t.Errorf("completed job ran %d times", n)
	}
	if n := count(held.JobID); n != 1 {
		t.Errorf("running job ran %d times", n)
	}
	if n := len(b.all(ofJob[schema.Started](held.JobID))); n != 1 {
		t.Errorf("held job started %d times", n)
	}
}

func TestHTTPHandler(t *testing.T) {
	t.Parallel()
	var gotJobID, gotAttempt, gotBody string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/ok":
			gotJobID, gotAttempt = r.Header.Get("Ferry-Job-Id"), r.Header.Get("Ferry-Attempt")
			body, _ := io.ReadAll(r.Body)
			gotBody = string(body)
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("X-Secret", "not copied")
			w.WriteHeader(201)
			io.WriteString(w, `{"id":42}`)
		case "/busy":
			w.Header().Set("Retry-After", "7")
			w.WriteHeader(503)
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	b := newBench(t)
	b.deps.Common.OutboundAllow = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
	b.start(worker.Config{}, nil)

	ok := b.dispatch("http", map[string]any{"method": "POST", "url": srv.URL + "/ok", "body": map[string]int{"a": 1}}, withAttempt(2))
	var res struct {
		Status  int               `json:"status"`
		Headers map[string]string `json:"headers"`
		Body    json.RawMessage   `json:"body"`
	}
	if err := json.Unmarshal(b.completed(ok).Result, &res); err != nil {
		t.Fatal(err)
	}
	if res.Status != 201 || string(res.Body) != `{"id":42}` || res.Headers["Content-Type"] != "application/json" || res.Headers["X-Secret"] != "" {
		t.Errorf("result = %+v body %s", res, res.Body)
	}
	if gotJobID != ok.JobID || gotAttempt != "2" || gotBody != `{"a":1}` {
		t.Errorf("request: job id %q attempt %q body %q", gotJobID, gotAttempt, gotBody)
	}

	f := b.failed(b.dispatch("http", map[string]any{"url": srv.URL + "/busy"}))
	if f.Error.Class != schema.ClassRetryable || f.RetryAfter.D() != 7*time.Second {
		t.Errorf("503: %+v retry_after %s", f.Error, f.RetryAfter.D())
	}
	if f := b.failed(b.dispatch("http", map[string]any{"url": srv.URL + "/missing"})); f.Error.Class != schema.ClassPermanent {
		t.Errorf("404: %+v", f.Error)
	}
}

func TestHTTPHandlerRefusesLoopbackWithoutAllowlist(t *testing.T) {
	t.Parallel()
	var hit atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hit.Store(true) }))
	defer srv.Close()
	b := newBench(t)
	b.start(worker.Config{}, nil)
	f := b.failed(b.dispatch("http", map[string]any{"url": srv.URL}))
	if f.Error.Class != schema.ClassPermanent || !strings.Contains(f.Error.Message, "loopback") {
		t.Errorf("failed = %+v", f.Error)
	}
	if hit.Load() {
		t.Error("the guarded request reached the server")
	}
}

func TestGracefulStop(t *testing.T) {
	t.Parallel()
	b := newBench(t)
	stop := b.start(worker.Config{Concurrency: 2, Grace: time.Second}, func(r *worker.Registry) {
		r.Register("stubborn", func(ctx context.Context, job *worker.Job) (any, error) {
			<-ctx.Done()
			return nil, ctx.Err()
		})
	})
	quick := b.dispatch("sleep", map[string]int{"ms": 700})
	stuck := b.dispatch("stubborn", nil)
	b.waitFor("quick started", ofJob[schema.Started](quick.JobID))
	b.waitFor("stuck started", ofJob[schema.Started](stuck.JobID))
	// Both slots are busy: these wait in the worker's queue (or in Kafka).
	var waiting []schema.Dispatch
	for range 4 {
		waiting = append(waiting, b.dispatch("noop", nil))
	}
	time.Sleep(200 * time.Millisecond) // let the worker fetch some of them
	start := time.Now()
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 15*time.Second {
		t.Errorf("stop took %s", took)
	}
	b.completed(quick)
	final := b.waitFor("final status", func(ev schema.Event) bool {
		ws, ok := ev.Data.(schema.WorkerStatus)
		return ok && ws.Stopping && ws.HandedBack != nil
	}).Data.(schema.WorkerStatus)
	ids := func(refs []schema.JobRef) (out []string) {
		for _, r := range refs {
			out = append(out, r.JobID)
		}
		return out
	}(final.HandedBack)
	if !slices.Contains(ids, stuck.JobID) {
		t.Errorf("stuck job not handed back: %v", ids)
	}
	if len(b.all(ofJob[schema.Failed](stuck.JobID)))+len(b.all(ofJob[schema.Completed](stuck.JobID))) != 0 {
		t.Error("handed-back job also reported a terminal event")
	}
	for _, d := range waiting {
		for _, ev := range b.all(ofJob[schema.Started](d.JobID)) {
			if ev.Data.(schema.Started).StartedAt.After(start) {
				t.Errorf("queued job %s started after stop began", d.JobID)
			}
		}
	}
	if len(ids) < 2 {
		t.Logf("only the running job was handed back (no dispatch was queued): %v", ids)
	}
}

func TestBuildReadsConfig(t *testing.T) {
	t.Parallel()
	b := newBench(t)
	withPostgres(t, b)
	env := map[string]string{"FERRY_WORKER_CONCURRENCY": "3", "FERRY_WORKER_POOL": "long", "FERRY_OUTBOUND_ALLOW": "10.0.0.0/8",
		"FERRY_DATA_DIR": t.TempDir()}
	l := config.NewLoader(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if cfg := worker.LoadConfig(l).WithDefaults(); cfg.Concurrency != 3 || cfg.Pool != "long" || cfg.Grace != 25*time.Second {
		t.Errorf("config = %+v", cfg)
	}
	// The allowlist is shared by every service: the worker takes it from
	// deps.Common, which config.LoadCommon reads.
	if allow := config.LoadCommon(l).OutboundAllow; len(allow) != 1 || allow[0].String() != "10.0.0.0/8" {
		t.Errorf("FERRY_OUTBOUND_ALLOW = %v", allow)
	}
	comp, err := worker.Build(context.Background(), b.deps, l)
	if err != nil || comp == nil || l.Err() != nil {
		t.Fatalf("Build: %v %v", err, l.Err())
	}
	env["FERRY_WORKER_POOL"] = "medium"
	if _, err := worker.Build(context.Background(), b.deps, l); err == nil {
		t.Error("Build accepted pool medium")
	}
}

func TestBuildPoolsRunsEveryPool(t *testing.T) {
	t.Parallel()
	b := newBench(t)
	withPostgres(t, b)
	dataDir := t.TempDir()
	l := config.NewLoader(func(k string) (string, bool) {
		switch k {
		case "FERRY_WORKER_ID":
			return "dev", true
		case "FERRY_DATA_DIR":
			return dataDir, true
		}
		return "", false
	})
	comp, err := worker.BuildPools(context.Background(), b.deps, l)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	res := make(chan error, 1)
	go func() { res <- comp.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-res; err != nil {
			t.Error(err)
		}
	}()
	for _, pool := range schema.Pools {
		b.waitFor("status of "+pool, func(ev schema.Event) bool {
			ws, ok := ev.Data.(schema.WorkerStatus)
			return ok && ws.Pool == pool && ws.WorkerID == "dev-"+pool
		})
	}
	d := b.dispatch("noop", nil)
	b.completed(d)
}

// A job's started event waits at most StartedDelay for the job's outcome:
// a job still running after it has its started event on Kafka while it
// runs; one that reports progress first has it before that report is
// needed; one that ends first has it produced with its outcome, never lost.
func TestStartedEventWaitsAtMostTheDelay(t *testing.T) {
	t.Parallel()
	b := newBench(t)
	release := make(chan struct{})
	b.start(worker.Config{StartedDelay: time.Hour}, func(r *worker.Registry) {
		r.Register("reports", func(ctx context.Context, job *worker.Job) (any, error) {
			job.Progress(10, "first")
			<-release
			return nil, nil
		})
		r.Register("quick", func(ctx context.Context, job *worker.Job) (any, error) { return nil, nil })
	})
	reports := b.dispatch("reports", nil)
	// An hour's delay: only the progress report can have sent it.
	b.waitFor("started of the job that reported progress", ofJob[schema.Started](reports.JobID))
	close(release)
	b.completed(reports)

	quick := b.dispatch("quick", nil)
	b.completed(quick)
	b.waitFor("started of the job that ended within the delay", ofJob[schema.Started](quick.JobID))
}

func TestStartedEventOfALongJobGoesOutAfterTheDelay(t *testing.T) {
	t.Parallel()
	b := newBench(t)
	release := make(chan struct{})
	defer close(release)
	b.start(worker.Config{StartedDelay: 20 * time.Millisecond}, func(r *worker.Registry) {
		r.Register("long", func(ctx context.Context, job *worker.Job) (any, error) {
			select {
			case <-release:
			case <-ctx.Done():
			}
			return nil, nil
		})
	})
	d := b.dispatch("long", nil)
	ev := b.waitFor("started while the handler runs", ofJob[schema.Started](d.JobID))
	if st := ev.Data.(schema.Started); st.StartedAt.IsZero() || ev.Time.Sub(st.StartedAt) < 20*time.Millisecond {
		t.Errorf("started event at %s for a start at %s: sent before the delay", ev.Time, st.StartedAt)
	}
	if n := len(b.all(ofJob[schema.Completed](d.JobID))); n != 0 {
		t.Fatalf("%d completed events while the handler still runs", n)
	}
}
