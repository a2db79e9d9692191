package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

// peerWorkloads are the workloads the peer harness (River and Asynq, in
// the shared peers directory) runs; sse-idle and audit-export are Ferry's
// own.
var peerWorkloads = []string{"throughput", "latency", "delayed", "retry"}

// peersDir resolves -peers: "" looks for the shared harness beside the
// repository (../shared/peers, as the benchmark's definition places it),
// "-" turns the peers off. It returns "" when there is nothing to run.
func peersDir(flagValue, root string) string {
	switch flagValue {
	case "-":
		return ""
	case "":
		dir := filepath.Join(filepath.Dir(root), "shared", "peers")
		if _, err := os.Stat(filepath.Join(dir, "run.sh")); err != nil {
			return ""
		}
		return dir
	}
	return flagValue
}

// runPeers runs the peer harness's tuned profiles once, for the wanted
// workloads, writing its JSON lines to out. It runs after Ferry's stack has
// stopped, so the peers have the machine Ferry had (run.sh itself waits for
// the machine to go quiet before each run).
func runPeers(dir string, want map[string]bool, out string, log io.Writer) error {
	var wl []string
	for _, w := range peerWorkloads {
		if want[w] {
			wl = append(wl, w)
		}
	}
	if len(wl) == 0 {
		return nil
	}
	cmd := exec.Command("bash", filepath.Join(dir, "run.sh"))
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "PROFILES=tuned", "RUNS=1", "APPEND=0",
		"WORKLOADS="+strings.Join(wl, " "), "RESULTS="+out)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("peer harness %s: %w", dir, err)
	}
	return nil
}

// line is the subset of a results line (Ferry's or a peer's) the
// comparison reads.
type line struct {
	System      string  `json:"system"`
	Workload    string  `json:"workload"`
	Profile     string  `json:"profile"`
	E2EJobsPerS float64 `json:"e2e_jobs_per_s"`
	P50Ms       float64 `json:"p50_ms"`
	P99Ms       float64 `json:"p99_ms"`
	Lost        int     `json:"lost"`
	Duplicated  int     `json:"duplicated"`
	Notes       string  `json:"notes"`
}

// readLines reads every results line of the given files; the last line of
// a (system, workload) wins, so a file with several runs compares its latest.
func readLines(files ...string) (map[string]map[string]line, error) {
	out := map[string]map[string]line{}
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			return nil, err
		}
		sc := bufio.NewScanner(fh)
		sc.Buffer(make([]byte, 1<<20), 1<<22)
		for sc.Scan() {
			var l line
			if json.Unmarshal(sc.Bytes(), &l) != nil || l.System == "" || l.Workload == "" {
				continue // header lines and anything else
			}
			if out[l.System] == nil {
				out[l.System] = map[string]line{}
			}
			out[l.System][l.Workload] = l
		}
		fh.Close()
		if err := sc.Err(); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// figure is one row of the comparison: how to read it from a line, and
// whether more is better.
type figure struct {
	workload, name string
	higherBetter   bool
	read           func(line) float64
}

var (
	// Ferry: "client POST round trip p50 3.1 …"; peers: "enqueue call p50/p99/max 0.86/…".
	ferryPostP50 = regexp.MustCompile(`POST round trip p50 ([0-9.]+)`)
	peerCallP50  = regexp.MustCompile(`enqueue call p50/p99/max ([0-9.]+)/`)
	// Ferry: "time to all complete 2.36 s"; peers: "time to all-complete 1.30s".
	allComplete = regexp.MustCompile(`time to all[ -]complete ([0-9.]+) ?s`)
)

// noteFigure reads the first of the patterns that matches l's notes; NaN
// when none does.
func noteFigure(l line, res ...*regexp.Regexp) float64 {
	for _, re := range res {
		if m := re.FindStringSubmatch(l.Notes); m != nil {
			v, err := strconv.ParseFloat(m[1], 64)
			if err == nil {
				return v
			}
		}
	}
	return math.NaN()
}

var figures = []figure{
	{"throughput", "throughput, e2e jobs/s", true, func(l line) float64 { return l.E2EJobsPerS }},
	{"latency", "latency at 1k/s, submit→start p50 ms", false, func(l line) float64 { return l.P50Ms }},
	{"latency", "latency at 1k/s, submit→start p99 ms", false, func(l line) float64 { return l.P99Ms }},
	{"latency", "one submission call, p50 ms", false, func(l line) float64 { return noteFigure(l, ferryPostP50, peerCallP50) }},
	{"delayed", "delayed 10k at +5 s, lateness p99 ms", false, func(l line) float64 { return l.P99Ms }},
	{"retry", "retry 2k fail-once, all complete s", false, func(l line) float64 { return noteFigure(l, allComplete) }},
}

// compareTable writes the Markdown table of Ferry against River and Asynq,
// with Ferry ÷ the best peer (>1 is better for Ferry on every row: rates
// are divided, times inverted), and lost/duplicated per system.
func compareTable(w io.Writer, lines map[string]map[string]line) {
	systems := []string{"ferry", "river", "asynq"}
	fmt.Fprintln(w, "| figure | Ferry | River tuned | Asynq tuned | Ferry vs best peer |")
	fmt.Fprintln(w, "|---|---|---|---|---|")
	for _, f := range figures {
		vals := make([]float64, len(systems))
		for i, s := range systems {
			vals[i] = math.NaN()
			if l, ok := lines[s][f.workload]; ok {
				vals[i] = f.read(l)
			}
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s |\n", f.name, cell(vals[0]), cell(vals[1]), cell(vals[2]), ratio(f, vals[0], vals[1:]))
	}
	for _, s := range systems {
		var lost, dup int
		for _, l := range lines[s] {
			lost += l.Lost
			dup += l.Duplicated
		}
		fmt.Fprintf(w, "\n%s: lost %d, duplicated %d over %d workloads", s, lost, dup, len(lines[s]))
	}
	fmt.Fprintln(w)
}

func cell(v float64) string {
	switch {
	case math.IsNaN(v):
		return "—"
	case v >= 100:
		return strconv.FormatFloat(math.Round(v), 'f', 0, 64)
	default:
		return strconv.FormatFloat(v, 'g', 3, 64)
	}
}

// ratio is Ferry's figure against the best peer's, phrased so that ≥ 1×
// means Ferry is at or ahead.
func ratio(f figure, ferry float64, peers []float64) string {
	best := math.NaN()
	for _, v := range peers {
		if math.IsNaN(v) {
			continue
		}
		if math.IsNaN(best) || (f.higherBetter && v > best) || (!f.higherBetter && v < best) {
			best = v
		}
	}
	if math.IsNaN(best) || math.IsNaN(ferry) || ferry == 0 || best == 0 {
		return "—"
	}
	r := ferry / best
	if !f.higherBetter {
		r = best / ferry
	}
	return strconv.FormatFloat(r, 'f', 2, 64) + "×"
}
