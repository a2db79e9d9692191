package main

import (
	"encoding/json"
	"math"
	"os"
	"os/exec"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestPercentile(t *testing.T) {
	var xs []float64
	for i := 1; i <= 100; i++ {
		xs = append(xs, float64(i))
	}
	for _, c := range []struct{ p, want float64 }{{50, 50}, {95, 95}, {99, 99}, {100, 100}, {0.1, 1}} {
		if got := Percentile(xs, c.p); got != c.want {
			t.Errorf("p%v = %v, want %v", c.p, got, c.want)
		}
	}
	if got := Percentile([]float64{7}, 99); got != 7 {
		t.Errorf("single value p99 = %v", got)
	}
	if !math.IsNaN(Percentile(nil, 50)) {
		t.Error("empty input should give NaN")
	}
	// Nearest rank over 1,000 values: p99 is the 990th.
	xs = xs[:0]
	for i := 1000; i >= 1; i-- { // unsorted on purpose: Summarize sorts
		xs = append(xs, float64(i)/10)
	}
	p := Summarize(xs)
	if p.N != 1000 || p.P50 != 50 || p.P95 != 95 || p.P99 != 99 || p.Max != 100 || p.Min != 0.1 {
		t.Errorf("Summarize = %+v", p)
	}
	if (Summarize(nil) != Percentiles{}) {
		t.Error("Summarize(nil) should be zero")
	}
}

func TestRate(t *testing.T) {
	if got := Rate(1000, 2*time.Second); got != 500 {
		t.Errorf("Rate = %v", got)
	}
	if got := Rate(10, 0); got != 0 {
		t.Errorf("Rate over 0 = %v", got)
	}
}

// The stdout line has exactly docs/benchmark.md's fields, in its order.
func TestLineShape(t *testing.T) {
	r := Result{System: "ferry", Workload: "latency", N: 20000, P99Ms: 4.2, Notes: "x"}
	r.extraRecords = map[string]any{"counters": 1}
	line := r.Line()
	want := []string{"system", "workload", "n", "enqueue_rate", "e2e_jobs_per_s", "p50_ms", "p95_ms", "p99_ms", "max_ms", "lost", "duplicated", "rss_mb", "notes"}
	dec := json.NewDecoder(strings.NewReader(string(line)))
	var keys []string
	if _, err := dec.Token(); err != nil {
		t.Fatal(err)
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, tok.(string))
		var v any
		if err := dec.Decode(&v); err != nil {
			t.Fatal(err)
		}
	}
	if !reflect.DeepEqual(keys, want) {
		t.Errorf("keys = %v\nwant  %v", keys, want)
	}
	if strings.Contains(string(line), "\n") {
		t.Error("a result must be one line")
	}
	// The results file line adds the run's commit and machine.
	var m map[string]any
	info := RunInfo{Commit: "abc1234", Machine: Machine{NProc: 2, MemoryGB: 24, Kernel: "6.1"}, Started: time.Unix(0, 0)}
	if err := json.Unmarshal(r.FileLine(info), &m); err != nil {
		t.Fatal(err)
	}
	if m["commit"] != "abc1234" || m["machine"].(map[string]any)["nproc"] != float64(2) || m["p99_ms"] != 4.2 || m["counters"] != float64(1) {
		t.Errorf("file line = %v", m)
	}
}

func TestSizes(t *testing.T) {
	q := FullSizes.Scaled(10)
	if q.Throughput != 10_000 || q.Delayed != 1000 || q.Retry != 200 || q.SSE != 200 || q.Audit != 10_000 ||
		q.LatencyFor != 2*time.Second || q.LatencyRate != 1000 || q.Delay != 5*time.Second {
		t.Errorf("quick sizes = %+v", q)
	}
	if FullSizes.Scaled(1) != FullSizes {
		t.Error("scale 1 must keep docs/benchmark.md's sizes")
	}
}

func TestSettle(t *testing.T) {
	now := time.Now()
	rows := map[string]JobRow{
		"a": {ID: "a", Status: "succeeded", CreatedAt: now},
		"b": {ID: "b", Status: "succeeded", CreatedAt: now},
		"c": {ID: "c", Status: "running", CreatedAt: now},
	}
	lc := logCheck{completed: Attempts{"a": {1}, "b": {1, 1}}, started: Attempts{"a": {1}, "b": {1, 1}}}
	var r Result
	settle(&r, []string{"a", "b", "c", "d"}, rows, lc)
	if r.Lost != 2 || r.Duplicated != 1 {
		t.Errorf("lost %d duplicated %d, want 2 and 1", r.Lost, r.Duplicated)
	}
}

// A process's CPU includes the children it reaped: Redis's AOF rewrites
// and Postgres's autovacuum workers are such children.
func TestProcStatCountsReapedChildren(t *testing.T) {
	before, ok := readProcStat(os.Getpid())
	if !ok {
		t.Fatal("no /proc/<pid>/stat: the bench measures CPU from /proc and runs on Linux only")
	}
	cmd := exec.Command("sh", "-c", "i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	child := int64((cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()) * clockTicks / time.Second)
	if child < 5 {
		t.Fatalf("the child used %d ticks: too few to tell", child)
	}
	after, _ := readProcStat(os.Getpid())
	if got := after.ticks - before.ticks; got < child-1 {
		t.Fatalf("this process gained %d ticks while its child used %d: its reaped children are not counted", got, child)
	}
}

// TestStageSummaryGaps: a gap is taken per job between its two stages, over
// the jobs that have both, including a stage the caller fills from its own
// clock (the latency workload's "answered").
func TestStageSummaryGaps(t *testing.T) {
	t0 := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	times := stageTimes{
		"received":   {"a": at(0), "b": at(10), "c": at(20)},
		"enqueued":   {"a": at(1), "b": at(11), "c": at(21)},
		"answered":   {"a": at(5), "b": at(30)}, // c's answer never came
		"dispatched": {"a": at(7), "b": at(33), "c": at(40)},
		"started":    {"a": at(9), "b": at(36), "c": at(44)},
	}
	s, detail := stageSummary(latencyStages, latencyGaps, times, t0)
	gap := func(name string) map[string]any { m, _ := detail[name].(map[string]any); return m }
	if g := gap("received→answered"); g["n"] != 2 || g["min_ms"] != 5.0 || g["max_ms"] != 20.0 {
		t.Errorf("received→answered = %v", g)
	}
	if g := gap("answered→dispatched"); g["n"] != 2 || g["min_ms"] != 2.0 || g["max_ms"] != 3.0 {
		t.Errorf("answered→dispatched = %v", g)
	}
	if g := gap("received→started"); g["n"] != 3 || g["p50_ms"] != 24.0 || g["max_ms"] != 26.0 {
		t.Errorf("received→started = %v", g)
	}
	if !strings.Contains(s, "dispatched→started 3.0/4.0/4.0/4") {
		t.Errorf("summary %q lacks dispatched→started p50/p95/p99/max", s)
	}
}
