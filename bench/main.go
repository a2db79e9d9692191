// Command bench runs the workloads of docs/benchmark.md against Ferry and prints one
// JSON line per workload; it appends them to bench/results/<date>-<commit>.jsonl.
//
// By default it builds ./cmd/ferry, starts `ferry dev` as a child process
// with its own data directory and free ports (durable defaults: Kafka
// acks=all, projections committed with their offsets, Postgres fsync on),
// runs the workloads in order and stops the stack. With -url it targets a
// running stack instead (then -key, -postgres and -kafka are needed too).
//
//	go run ./bench                       # everything, full size (docs/benchmark.md)
//	go run ./bench -quick                # 10× smaller smoke run
//	go run ./bench -workloads latency,retry
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Workloads are docs/benchmark.md's, in the order they run.
//
// sse-idle runs first, so the memory it measures is that of the streams on a
// fresh process rather than what earlier workloads left in the heap;
// audit-export exports the audit rows of throughput's jobs; flow runs last,
// as it changes the tenant's flow control (and removes it at the end).
var Workloads = []string{"sse-idle", "throughput", "latency", "delayed", "retry", "audit-export", "flow"}

// OptInWorkloads run only when -workloads names them, after the others:
// console seeds a million rows in each of two tables.
var OptInWorkloads = []string{"console"}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// options are the command line of bench.
type options struct {
	workloads, apiURL, key, pgURL, kafka, redisURL, prefix string
	adminKey                                               string
	repo, results, profile, envs, ref, peers, compare      string
	quick, keep, trace                                     bool
	scale, nThrough, clients, pid                          int
	timeout                                                time.Duration
	argv                                                   []string // as given, for the results header
}

func parseOptions(args []string, stderr io.Writer) (options, bool) {
	o := options{argv: args}
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.workloads, "workloads", strings.Join(Workloads, ","), "comma-separated workloads to run")
	fs.BoolVar(&o.quick, "quick", false, "scale every workload down 10× (smoke test)")
	fs.IntVar(&o.scale, "scale", 1, "divide every workload's size by this (like -quick, any factor)")
	fs.IntVar(&o.nThrough, "n-throughput", 0, "jobs of the throughput workload (0: docs/benchmark.md's)")
	fs.IntVar(&o.clients, "clients", 4, "concurrent batch clients of the throughput workload")
	fs.StringVar(&o.apiURL, "url", "", "target a running stack at this base URL instead of starting ferry dev")
	fs.StringVar(&o.key, "key", "", "API key of the running stack (with -url)")
	fs.StringVar(&o.adminKey, "admin-key", "", "admin key of the running stack (with -url; the flow workload needs it)")
	fs.StringVar(&o.pgURL, "postgres", "", "Postgres URL of the running stack (with -url)")
	fs.StringVar(&o.kafka, "kafka", "", "Kafka brokers of the running stack (with -url)")
	fs.StringVar(&o.redisURL, "redis", "", "Redis URL of the running stack (with -url; optional)")
	fs.IntVar(&o.pid, "pid", 0, "pid of the serving process of the running stack, for RSS and CPU (with -url; optional)")
	fs.StringVar(&o.prefix, "topic-prefix", "ferry.", "topic prefix")
	fs.StringVar(&o.repo, "repo", "", "repository root (default: found from the working directory)")
	fs.StringVar(&o.results, "results", "", "results directory (default <repo>/bench/results; \"-\" for none)")
	fs.StringVar(&o.profile, "profile", "", "directory for pprof profiles of the throughput, latency, delayed and retry workloads (default: a temporary directory; \"-\" for none)")
	fs.BoolVar(&o.trace, "trace", false, "with the profiles, a runtime trace of the serving process over each profiled window (<workload>-trace.out: go tool trace, or -pprof=sched for how long goroutines waited for a processor)")
	fs.DurationVar(&o.timeout, "timeout", 3*time.Minute, "how long a workload may wait for its jobs to complete")
	fs.BoolVar(&o.keep, "keep", false, "leave the ferry dev data directory behind")
	fs.StringVar(&o.envs, "env", "", "extra environment for ferry dev, comma-separated K=V (e.g. FERRY_SCHEDULER_PREFETCH=500)")
	fs.StringVar(&o.ref, "ref", "", "build ferry from this git ref (git archive) instead of the working tree, e.g. HEAD")
	fs.StringVar(&o.peers, "peers", "", "directory of the River/Asynq peer harness, run after Ferry in the same sitting (default: ../shared/peers beside the repository when present; \"-\" for none)")
	fs.StringVar(&o.compare, "compare", "", "only print the comparison table of these results files (comma-separated: Ferry's and the peers'), then exit")
	if err := fs.Parse(args); err != nil {
		return o, false
	}
	if o.quick {
		o.scale = 10
	}
	return o, true
}

// wanted is the set of workloads -workloads names.
func (o options) wanted() (map[string]bool, error) {
	want := map[string]bool{}
	for _, w := range strings.Split(o.workloads, ",") {
		w = strings.TrimSpace(w)
		if w == "" {
			continue
		}
		if !contains(Workloads, w) && !contains(OptInWorkloads, w) {
			return nil, fmt.Errorf("unknown workload %q (have %s)", w, strings.Join(append(Workloads, OptInWorkloads...), ", "))
		}
		want[w] = true
	}
	return want, nil
}

func run(args []string, stdout, stderr io.Writer) int {
	o, ok := parseOptions(args, stderr)
	if !ok {
		return 2
	}
	if o.compare != "" {
		return printComparison(stdout, stderr, strings.Split(o.compare, ",")...)
	}
	want, err := o.wanted()
	if err != nil {
		fmt.Fprintln(stderr, "bench:", err)
		return 2
	}
	if o.apiURL != "" && (o.key == "" || o.pgURL == "" || o.kafka == "") {
		fmt.Fprintln(stderr, "bench: -url needs -key, -postgres and -kafka")
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	root := o.repo
	if root == "" {
		if root, err = findRepo(); err != nil {
			fmt.Fprintln(stderr, "bench:", err)
			return 1
		}
	}
	info := RunInfo{Commit: commit(root, o.ref), Machine: machine(), Started: time.Now()}
	resultsFile, code := runFerry(ctx, o, want, root, info, stdout, stderr)
	if code != 0 || ctx.Err() != nil {
		return code
	}
	return runPeersAndCompare(o, want, root, resultsFile, stdout, stderr)
}

// runFerry starts (or targets) the stack, runs the wanted workloads and
// stops the stack; it returns the results file written ("" for none).
func runFerry(ctx context.Context, o options, want map[string]bool, root string, info RunInfo, stdout, stderr io.Writer) (string, int) {
	t, stopTarget, err := o.target(ctx, root, info, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "bench:", err)
		return "", 1
	}
	defer stopTarget()
	probe, err := openProbe(ctx, t, o.prefix)
	if err != nil {
		fmt.Fprintln(stderr, "bench:", err)
		return "", 1
	}
	defer probe.Close()
	sizes := FullSizes.Scaled(o.scale)
	if o.nThrough > 0 {
		sizes.Throughput = o.nThrough
	}
	out, name, err := o.openResults(root, info, sizes, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "bench:", err)
		return "", 1
	}
	if out != nil {
		defer out.Close()
	}
	b := newBench(t, probe, sizes, o, stderr)
	if !b.runAll(ctx, want, info, out, stdout) {
		fmt.Fprintln(stderr, "bench: a workload lost or duplicated jobs, or could not run as specified: a failed run (docs/benchmark.md)")
		return name, 1
	}
	return name, 0
}

// target starts ferry dev (or describes the running stack of -url) and
// returns how to stop it.
func (o options) target(ctx context.Context, root string, info RunInfo, stderr io.Writer) (*Target, func(), error) {
	if o.apiURL != "" {
		return &Target{API: strings.TrimRight(o.apiURL, "/"), Key: o.key, AdminKey: o.adminKey, Tenant: "default", Postgres: o.pgURL,
			Kafka: o.kafka, Redis: o.redisURL, PID: o.pid}, func() {}, nil
	}
	work, err := os.MkdirTemp("", "ferry-bench-")
	if err != nil {
		return nil, nil, err
	}
	cleanup := func() {
		if !o.keep {
			os.RemoveAll(work)
		}
	}
	src := root
	if o.ref != "" {
		// A stable directory per commit, so later runs hit the build cache.
		src = filepath.Join(os.TempDir(), "ferry-bench-src-"+info.Commit)
		if err := exportRef(root, o.ref, src); err != nil {
			cleanup()
			return nil, nil, err
		}
	}
	fmt.Fprintln(stderr, "bench: building ./cmd/ferry in", src)
	bin, err := buildFerry(src, work)
	if err != nil {
		cleanup()
		return nil, nil, err
	}
	fmt.Fprintln(stderr, "bench: starting ferry dev in", filepath.Join(work, "data"))
	// sse-idle opens all its streams for one tenant: lift the per-tenant
	// cap (FERRY_SSE_MAX_STREAMS, 100) to the workload's size. Later -env
	// entries win.
	extra := []string{fmt.Sprintf("FERRY_SSE_MAX_STREAMS=%d", max(FullSizes.Scaled(o.scale).SSE, 1))}
	if o.envs != "" {
		extra = append(extra, strings.Split(o.envs, ",")...)
	}
	t, err := startDev(ctx, bin, filepath.Join(work, "data"), extra, stderr)
	if err != nil {
		cleanup()
		return nil, nil, err
	}
	return t, func() {
		if err := t.Stop(); err != nil {
			fmt.Fprintln(stderr, "bench: stopping ferry dev:", err)
		}
		cleanup()
	}, nil
}

// openResults opens bench/results/<date>-<commit>.jsonl for appending and
// writes the run's header line; nil and "" with -results -.
func (o options) openResults(root string, info RunInfo, sizes Sizes, stderr io.Writer) (*os.File, string, error) {
	if o.results == "-" {
		return nil, "", nil
	}
	dir := o.results
	if dir == "" {
		dir = filepath.Join(root, "bench", "results")
	}
	_ = os.MkdirAll(dir, 0o755)
	name := filepath.Join(dir, info.Started.UTC().Format("2006-01-02")+"-"+strings.TrimSuffix(info.Commit, "-dirty")+".jsonl")
	out, err := os.OpenFile(name, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, "", err
	}
	hdr, _ := json.Marshal(map[string]any{"run": info, "sizes": sizes, "args": o.argv, "target": map[string]any{"started_ferry_dev": o.apiURL == "", "worker_concurrency": 100}})
	fmt.Fprintf(out, "%s\n", hdr)
	fmt.Fprintln(stderr, "bench: appending results to", name)
	return out, name, nil
}

func newBench(t *Target, probe *Probe, sizes Sizes, o options, stderr io.Writer) *Bench {
	profDir := o.profile
	switch profDir {
	case "-":
		profDir = ""
	case "":
		profDir, _ = os.MkdirTemp("", "ferry-bench-profiles-")
	default:
		_ = os.MkdirAll(profDir, 0o755)
	}
	return &Bench{
		t: t, probe: probe, sizes: sizes, clients: o.clients, timeout: o.timeout, profile: profDir, trace: o.trace, log: stderr,
		runID: randHex(4),
		client: &http.Client{Timeout: 2 * time.Minute, Transport: &http.Transport{
			MaxIdleConns: 1024, MaxIdleConnsPerHost: 1024, IdleConnTimeout: time.Minute,
		}},
		noise: fmt.Sprintf("noisy: shared %d-core machine, other engineers' tests may run concurrently; load generator on the same machine", runtime.NumCPU()),
	}
}

// runAll runs the wanted workloads in order, each on a settled pipeline;
// false when one lost or duplicated a job, or failed (Result.failure).
func (b *Bench) runAll(ctx context.Context, want map[string]bool, info RunInfo, out *os.File, stdout io.Writer) bool {
	funcs := map[string]func(context.Context) Result{
		"throughput": b.throughput, "latency": b.latency, "delayed": b.delayed, "retry": b.retry,
		"sse-idle": b.sseIdle, "audit-export": b.auditExport, "flow": b.flowCost, "console": b.console,
	}
	ok := true
	for _, w := range append(append([]string{}, Workloads...), OptInWorkloads...) {
		if !want[w] || ctx.Err() != nil {
			continue
		}
		// Each workload starts on a settled pipeline: the projections have
		// applied the previous workload's records (docs/benchmark.md measures each
		// workload on its own; River and Asynq have no projections).
		waited, lag, err := b.probe.settle(ctx, 3*time.Minute)
		settled := fmt.Sprintf("started after %.1f s waiting for the projections to catch up (lag %d records)", waited.Seconds(), lag)
		if err != nil {
			settled = "projection lag unknown: " + err.Error()
		}
		fmt.Fprintf(b.log, "bench: %s … (%s)\n", w, settled)
		start := time.Now()
		r := funcs[w](ctx)
		r.Notes += "; " + settled
		fmt.Fprintf(b.log, "bench: %s done in %s\n", w, time.Since(start).Round(100*time.Millisecond))
		fmt.Fprintf(stdout, "%s\n", r.Line())
		if out != nil {
			fmt.Fprintf(out, "%s\n", r.FileLine(info))
		}
		if r.failure != "" {
			fmt.Fprintf(b.log, "bench: %s FAILED: %s\n", w, r.failure)
			ok = false
		}
		if r.Lost > 0 || r.Duplicated > 0 {
			ok = false
		}
	}
	if b.profile != "" {
		fmt.Fprintln(b.log, "bench: profiles in", b.profile, "(go tool pprof -top <file>)")
	}
	return ok
}

// runPeersAndCompare runs the peer harness after Ferry (when present) and
// prints Ferry beside River and Asynq; the table also goes to a .md file
// next to the results.
func runPeersAndCompare(o options, want map[string]bool, root, resultsFile string, stdout, stderr io.Writer) int {
	dir := peersDir(o.peers, root)
	if dir == "" || resultsFile == "" {
		return 0
	}
	peersFile := strings.TrimSuffix(resultsFile, ".jsonl") + "-peers.jsonl"
	fmt.Fprintln(stderr, "bench: running the peer harness", dir, "(River and Asynq, tuned) →", peersFile)
	if err := runPeers(dir, want, peersFile, stderr); err != nil {
		fmt.Fprintln(stderr, "bench:", err)
		return 1
	}
	md, err := os.Create(strings.TrimSuffix(resultsFile, ".jsonl") + "-compare.md")
	if err != nil {
		fmt.Fprintln(stderr, "bench:", err)
		return 1
	}
	defer md.Close()
	return printComparison(io.MultiWriter(stderr, md), stderr, resultsFile, peersFile)
}

// printComparison prints the Ferry-vs-peers table of the given results files.
func printComparison(w, stderr io.Writer, files ...string) int {
	lines, err := readLines(files...)
	if err != nil {
		fmt.Fprintln(stderr, "bench:", err)
		return 1
	}
	compareTable(w, lines)
	return 0
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if x == y {
			return true
		}
	}
	return false
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// findRepo walks up from the working directory to the go.work.
func findRepo() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.work")); err == nil {
			if _, err := os.Stat(filepath.Join(d, "cmd", "ferry")); err == nil {
				return d, nil
			}
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("no Ferry repository (go.work with cmd/ferry) above %s; pass -repo", dir)
		}
	}
}

// exportRef writes the tree of ref into dir, unless a previous run did.
func exportRef(root, ref, dir string) error {
	if _, err := os.Stat(filepath.Join(dir, "go.work")); err == nil {
		return nil
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dir), filepath.Base(dir)+".tmp-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	cmd := exec.Command("sh", "-c", `git -C "$1" archive --format=tar "$2" | tar -x -C "$3"`, "sh", root, ref, tmp)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("git archive %s: %v\n%s", ref, err, out)
	}
	if err := os.Rename(tmp, dir); err != nil && !os.IsExist(err) {
		if _, serr := os.Stat(filepath.Join(dir, "go.work")); serr != nil {
			return err
		}
	}
	return nil
}

func commit(root, ref string) string {
	rev := "HEAD"
	if ref != "" {
		rev = ref
	}
	out, err := exec.Command("git", "-C", root, "rev-parse", "--short", rev).Output()
	if err != nil {
		return "unknown"
	}
	c := strings.TrimSpace(string(out))
	if ref != "" {
		return c
	}
	if st, err := exec.Command("git", "-C", root, "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(strings.TrimSpace(string(st))) > 0 {
		c += "-dirty"
	}
	return c
}

func machine() Machine {
	m := Machine{NProc: runtime.NumCPU(), GoArch: runtime.GOARCH}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "MemTotal:"); ok {
				f := strings.Fields(v)
				if len(f) > 0 {
					kb, _ := strconv.ParseFloat(f[0], 64)
					m.MemoryGB = round(kb/1024/1024, 1)
				}
			}
		}
	}
	return m
}
