package main

import (
	"encoding/json"
	"math"
	"sort"
	"time"
)

// Result is one workload's figures: the JSON line docs/benchmark.md names, in its order.
type Result struct {
	System       string  `json:"system"`
	Workload     string  `json:"workload"`
	N            int     `json:"n"`
	EnqueueRate  float64 `json:"enqueue_rate"`
	E2EJobsPerS  float64 `json:"e2e_jobs_per_s"`
	P50Ms        float64 `json:"p50_ms"`
	P95Ms        float64 `json:"p95_ms"`
	P99Ms        float64 `json:"p99_ms"`
	MaxMs        float64 `json:"max_ms"`
	Lost         int     `json:"lost"`
	Duplicated   int     `json:"duplicated"`
	RSSMB        float64 `json:"rss_mb"`
	Notes        string  `json:"notes"`
	skipped      bool
	failure      string // why the workload could not run as specified (its figures would mislead); the run fails
	extraRecords map[string]any
}

// addRecord adds key to the fields the results file carries beside the
// docs/benchmark.md ones (FileLine).
func (r *Result) addRecord(key string, v any) {
	if r.extraRecords == nil {
		r.extraRecords = map[string]any{}
	}
	r.extraRecords[key] = v
}

// Line is the JSON line of r as docs/benchmark.md shapes it (stdout).
func (r Result) Line() []byte {
	b, _ := json.Marshal(r)
	return b
}

// FileLine is the line appended to bench/results: the docs/benchmark.md fields plus
// the run's commit, machine and time, so every line stands alone.
func (r Result) FileLine(run RunInfo) []byte {
	m := map[string]any{}
	_ = json.Unmarshal(r.Line(), &m)
	m["commit"] = run.Commit
	m["machine"] = run.Machine
	m["time"] = run.Started.UTC().Format(time.RFC3339)
	for k, v := range r.extraRecords {
		m[k] = v
	}
	b, _ := json.Marshal(m)
	return b
}

// RunInfo identifies a benchmark run.
type RunInfo struct {
	Commit  string    `json:"commit"`
	Machine Machine   `json:"machine"`
	Started time.Time `json:"time"`
}

// Machine is where the run happened.
type Machine struct {
	NProc    int     `json:"nproc"`
	MemoryGB float64 `json:"memory_gib"`
	Kernel   string  `json:"kernel"`
	GoArch   string  `json:"goarch"`
}

// Percentiles are nearest-rank percentiles of durations, in milliseconds.
type Percentiles struct {
	N                  int
	P50, P95, P99, Max float64
	Min                float64
}

// Percentile returns the nearest-rank p-th percentile (0 < p ≤ 100) of
// sorted, which must be sorted ascending; NaN when empty.
func Percentile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return math.NaN()
	}
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	rank = max(rank, 1)
	rank = min(rank, len(sorted))
	return sorted[rank-1]
}

// Summarize sorts ds (milliseconds) in place and returns its percentiles.
func Summarize(ds []float64) Percentiles {
	sort.Float64s(ds)
	if len(ds) == 0 {
		return Percentiles{}
	}
	return Percentiles{
		N:   len(ds),
		P50: round(Percentile(ds, 50), 2), P95: round(Percentile(ds, 95), 2), P99: round(Percentile(ds, 99), 2),
		Max: round(ds[len(ds)-1], 2), Min: round(ds[0], 2),
	}
}

// Ms is d in milliseconds.
func Ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func round(v float64, digits int) float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return 0
	}
	p := math.Pow(10, float64(digits))
	return math.Round(v*p) / p
}

// Rate is n per second over d (0 when d is not positive).
func Rate(n int, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return round(float64(n)/d.Seconds(), 1)
}

func (r *Result) setPercentiles(p Percentiles) {
	r.P50Ms, r.P95Ms, r.P99Ms, r.MaxMs = p.P50, p.P95, p.P99, p.Max
}
