// Command bench runs the workloads of BENCH.md against Ferry and prints one
// JSON line per workload; it appends them to bench/results/<date>-<commit>.jsonl.
//
// By default it builds ./cmd/ferry, starts `ferry dev` as a child process
// with its own data directory and free ports (durable defaults: Kafka
// acks=all, projections committed with their offsets, Postgres fsync on),
// runs the workloads in order and stops the stack. With -url it targets a
// running stack instead (then -key, -postgres and -kafka are needed too).
//
//	go run ./bench                       # everything, full size (BENCH.md)
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

// Workloads are BENCH.md's, in the order they run.
//
// sse-idle runs first, so the memory it measures is that of the streams on a
// fresh process rather than what earlier workloads left in the heap;
// audit-export runs last and exports the audit rows of throughput's jobs.
var Workloads = []string{"sse-idle", "throughput", "latency", "delayed", "retry", "audit-export"}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		workloads = fs.String("workloads", strings.Join(Workloads, ","), "comma-separated workloads to run")
		quick     = fs.Bool("quick", false, "scale every workload down 10× (smoke test)")
		scale     = fs.Int("scale", 1, "divide every workload's size by this (like -quick, any factor)")
		nThrough  = fs.Int("n-throughput", 0, "jobs of the throughput workload (0: BENCH.md's)")
		clients   = fs.Int("clients", 4, "concurrent batch clients of the throughput workload")
		apiURL    = fs.String("url", "", "target a running stack at this base URL instead of starting ferry dev")
		key       = fs.String("key", "", "API key of the running stack (with -url)")
		pgURL     = fs.String("postgres", "", "Postgres URL of the running stack (with -url)")
		kafka     = fs.String("kafka", "", "Kafka brokers of the running stack (with -url)")
		redisURL  = fs.String("redis", "", "Redis URL of the running stack (with -url; optional)")
		pid       = fs.Int("pid", 0, "pid of the serving process of the running stack, for RSS (with -url; optional)")
		prefix    = fs.String("topic-prefix", "ferry.", "topic prefix")
		repo      = fs.String("repo", "", "repository root (default: found from the working directory)")
		results   = fs.String("results", "", "results directory (default <repo>/bench/results; \"-\" for none)")
		profile   = fs.String("profile", "", "directory for pprof profiles of the throughput workload (default: a temporary directory; \"-\" for none)")
		timeout   = fs.Duration("timeout", 3*time.Minute, "how long a workload may wait for its jobs to complete")
		keep      = fs.Bool("keep", false, "leave the ferry dev data directory behind")
		envs      = fs.String("env", "", "extra environment for ferry dev, comma-separated K=V (e.g. FERRY_SCHEDULER_PREFETCH=500)")
		ref       = fs.String("ref", "", "build ferry from this git ref (git archive) instead of the working tree, e.g. HEAD")
	)
	if err := fs.Parse(args); err != nil {
		return 2
	}
	sizes := FullSizes
	if *quick {
		*scale = 10
	}
	sizes = sizes.Scaled(*scale)
	if *nThrough > 0 {
		sizes.Throughput = *nThrough
	}
	want := map[string]bool{}
	for _, w := range strings.Split(*workloads, ",") {
		w = strings.TrimSpace(w)
		if w == "" {
			continue
		}
		if !contains(Workloads, w) {
			fmt.Fprintf(stderr, "bench: unknown workload %q (have %s)\n", w, strings.Join(Workloads, ", "))
			return 2
		}
		want[w] = true
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	root := *repo
	if root == "" {
		var err error
		if root, err = findRepo(); err != nil {
			fmt.Fprintln(stderr, "bench:", err)
			return 1
		}
	}
	info := RunInfo{Commit: commit(root, *ref), Machine: machine(), Started: time.Now()}

	var t *Target
	if *apiURL != "" {
		if *key == "" || *pgURL == "" || *kafka == "" {
			fmt.Fprintln(stderr, "bench: -url needs -key, -postgres and -kafka")
			return 2
		}
		t = &Target{API: strings.TrimRight(*apiURL, "/"), Key: *key, Tenant: "default", Postgres: *pgURL, Kafka: *kafka, Redis: *redisURL, PID: *pid}
	} else {
		work, err := os.MkdirTemp("", "ferry-bench-")
		if err != nil {
			fmt.Fprintln(stderr, "bench:", err)
			return 1
		}
		if !*keep {
			defer os.RemoveAll(work)
		}
		src := root
		if *ref != "" {
			// A stable directory per commit, so later runs hit the build cache.
			src = filepath.Join(os.TempDir(), "ferry-bench-src-"+info.Commit)
			if err := exportRef(root, *ref, src); err != nil {
				fmt.Fprintln(stderr, "bench:", err)
				return 1
			}
		}
		fmt.Fprintln(stderr, "bench: building ./cmd/ferry in", src)
		bin, err := buildFerry(src, work)
		if err != nil {
			fmt.Fprintln(stderr, "bench:", err)
			return 1
		}
		fmt.Fprintln(stderr, "bench: starting ferry dev in", filepath.Join(work, "data"))
		var extra []string
		if *envs != "" {
			extra = strings.Split(*envs, ",")
		}
		t, err = startDev(ctx, bin, filepath.Join(work, "data"), extra, stderr)
		if err != nil {
			fmt.Fprintln(stderr, "bench:", err)
			return 1
		}
		defer func() {
			if err := t.Stop(); err != nil {
				fmt.Fprintln(stderr, "bench: stopping ferry dev:", err)
			}
		}()
	}
	probe, err := openProbe(ctx, t, *prefix)
	if err != nil {
		fmt.Fprintln(stderr, "bench:", err)
		return 1
	}
	defer probe.Close()

	profDir := *profile
	switch profDir {
	case "-":
		profDir = ""
	case "":
		profDir, _ = os.MkdirTemp("", "ferry-bench-profiles-")
	default:
		_ = os.MkdirAll(profDir, 0o755)
	}
	var out *os.File
	if *results != "-" {
		dir := *results
		if dir == "" {
			dir = filepath.Join(root, "bench", "results")
		}
		_ = os.MkdirAll(dir, 0o755)
		name := filepath.Join(dir, info.Started.UTC().Format("2006-01-02")+"-"+strings.TrimSuffix(info.Commit, "-dirty")+".jsonl")
		out, err = os.OpenFile(name, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			fmt.Fprintln(stderr, "bench:", err)
			return 1
		}
		defer out.Close()
		hdr, _ := json.Marshal(map[string]any{"run": info, "sizes": sizes, "args": args, "target": map[string]any{"started_ferry_dev": *apiURL == "", "worker_concurrency": 100}})
		fmt.Fprintf(out, "%s\n", hdr)
		fmt.Fprintln(stderr, "bench: appending results to", name)
	}

	b := &Bench{
		t: t, probe: probe, sizes: sizes, clients: *clients, timeout: *timeout, profile: profDir, log: stderr,
		runID: randHex(4),
		client: &http.Client{Timeout: 2 * time.Minute, Transport: &http.Transport{
			MaxIdleConns: 1024, MaxIdleConnsPerHost: 1024, IdleConnTimeout: time.Minute,
		}},
		noise: fmt.Sprintf("noisy: shared %d-core machine, other engineers' tests may run concurrently; load generator on the same machine", runtime.NumCPU()),
	}
	funcs := map[string]func(context.Context) Result{
		"throughput": b.throughput, "latency": b.latency, "delayed": b.delayed, "retry": b.retry,
		"sse-idle": b.sseIdle, "audit-export": b.auditExport,
	}
	failed := false
	for _, w := range Workloads {
		if !want[w] || ctx.Err() != nil {
			continue
		}
		// Each workload starts on a settled pipeline: the projections have
		// applied the previous workload's records (BENCH.md measures each
		// workload on its own; River and Asynq have no projections).
		waited, lag, err := probe.settle(ctx, 3*time.Minute)
		settled := fmt.Sprintf("started after %.1f s waiting for the projections to catch up (lag %d records)", waited.Seconds(), lag)
		if err != nil {
			settled = "projection lag unknown: " + err.Error()
		}
		fmt.Fprintf(stderr, "bench: %s … (%s)\n", w, settled)
		start := time.Now()
		r := funcs[w](ctx)
		r.Notes += "; " + settled
		fmt.Fprintf(stderr, "bench: %s done in %s\n", w, time.Since(start).Round(100*time.Millisecond))
		fmt.Fprintf(stdout, "%s\n", r.Line())
		if out != nil {
			fmt.Fprintf(out, "%s\n", r.FileLine(info))
		}
		if r.Lost > 0 || r.Duplicated > 0 {
			failed = true
		}
	}
	if profDir != "" {
		fmt.Fprintln(stderr, "bench: profiles in", profDir, "(go tool pprof -top <file>)")
	}
	if failed {
		fmt.Fprintln(stderr, "bench: a workload lost or duplicated jobs: a failed run (BENCH.md)")
		return 1
	}
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
