package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ferryhq/ferry/platform/devstack"
)

func TestCompareTable(t *testing.T) {
	dir := t.TempDir()
	ferry := filepath.Join(dir, "ferry.jsonl")
	peers := filepath.Join(dir, "peers.jsonl")
	write := func(name string, lines ...string) {
		if err := os.WriteFile(name, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(ferry,
		`{"run":{"commit":"abc"},"sizes":{}}`,
		`{"system":"ferry","workload":"throughput","e2e_jobs_per_s":2000,"lost":0,"duplicated":0}`,
		`{"system":"ferry","workload":"latency","p50_ms":5,"p99_ms":20,"notes":"client POST round trip p50 1.5 p99 9 max 20 ms"}`,
		`{"system":"ferry","workload":"retry","notes":"time to all complete 2.00 s (first submission → last completion)","lost":1}`)
	write(peers,
		`{"system":"river","workload":"throughput","e2e_jobs_per_s":8000}`,
		`{"system":"asynq","workload":"throughput","e2e_jobs_per_s":4000}`,
		`{"system":"river","workload":"latency","p50_ms":3,"p99_ms":10,"notes":"enqueue call p50/p99/max 0.86/5.92/46.42 ms"}`,
		`{"system":"asynq","workload":"latency","p50_ms":2.5,"p99_ms":40,"notes":"enqueue call p50/p99/max 0.30/5.92/46.42 ms"}`,
		`{"system":"asynq","workload":"retry","notes":"time to all-complete 1.00s; handlers done","duplicated":2}`)
	lines, err := readLines(ferry, peers)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	compareTable(&b, lines)
	got := b.String()
	for _, want := range []string{
		"| throughput, e2e jobs/s | 2000 | 8000 | 4000 | 0.25× |",         // rate: ferry ÷ best
		"| latency at 1k/s, submit→start p99 ms | 20 | 10 | 40 | 0.50× |", // time: best ÷ ferry
		"| one submission call, p50 ms | 1.5 | 0.86 | 0.3 | 0.20× |",
		"| retry 2k fail-once, all complete s | 2 | — | 1 | 0.50× |",
		"| delayed 10k at +5 s, lateness p99 ms | — | — | — | — |",
		"ferry: lost 1, duplicated 0 over 3 workloads",
		"asynq: lost 0, duplicated 2 over 3 workloads",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("table lacks %q:\n%s", want, got)
		}
	}
}

func TestCPUTreeCountsThisProcess(t *testing.T) {
	before := cpuTree(os.Getpid())
	x := 0
	for i := range 200_000_000 { // ~0.1 s of CPU, several clock ticks
		x ^= i
	}
	after := cpuTree(os.Getpid())
	if after["ferry"] <= before["ferry"] {
		t.Fatalf("CPU ticks of this process did not grow: %v → %v (x=%d)", before, after, x)
	}
	if got := microsPerJob(before, after, 1)["total"]; got <= 0 {
		t.Fatalf("µs per job = %v, want > 0", got)
	}
	if len(cpuTree(0)) != 0 {
		t.Fatal("cpuTree(0) should be empty")
	}
}

func TestComponent(t *testing.T) {
	for comm, want := range map[string]string{"postgres": "postgres", "redis-server": "redis", "ferry": "ferry", "ferry-bench": "ferry",
		"ferry-kafka": "broker"} {
		if got := component(comm); got != want {
			t.Errorf("component(%q) = %q, want %q", comm, got, want)
		}
	}
}

func TestCPULineNamesEveryProcess(t *testing.T) {
	got := cpuLine(map[string]float64{"ferry": 300, "broker": 40, "postgres": 150, "redis": 100, "total": 590})
	want := "cpu µs per job: ferry 300, broker 40, postgres 150, redis 100, total 590 (the load generator not counted)"
	if got != want {
		t.Fatalf("cpuLine = %q, want %q", got, want)
	}
}

// TestImplausibleCPU: a component (or the sum) that spent more CPU than the
// machine's cores give in the run is named; figures within it are not.
func TestImplausibleCPU(t *testing.T) {
	a := CPUTicks{"ferry": 1000, "postgres": 500, "redis": 100}
	// 10 s on 2 cores: at most 2,000 ticks per component and in all.
	b := CPUTicks{"ferry": 2500, "postgres": 2900, "redis": 300}
	if got := fmt.Sprint(implausibleCPU(a, b, 10*time.Second, 2)); got != "[postgres total]" {
		t.Fatalf("implausibleCPU = %s, want [postgres total]", got)
	}
	b["postgres"] = 800 // 1,500 + 300 + 200: all the 2 cores give, no more
	if got := implausibleCPU(a, b, 10*time.Second, 2); len(got) != 0 {
		t.Fatalf("implausibleCPU = %v for 2,000 ticks in 10 s on 2 cores, want none", got)
	}
}

// TestOtherLoad: what the machine spent beyond the stack and the load
// generator, in % of a core, flagged past disturbingLoad; /proc/stat's
// idle, I/O wait and steal columns are not busy time.
func TestOtherLoad(t *testing.T) {
	if got := parseHostBusy("cpu  100 5 20 9000 70 3 2 400 0 0"); got != 130 {
		t.Fatalf("parseHostBusy = %d, want 130 (user, nice, system, irq, softirq)", got)
	}
	if got := parseHostBusy("cpu0 100 5 20 9000 70 3 2 400 0 0"); got != 0 {
		t.Fatalf("parseHostBusy of a per-core line = %d, want 0", got)
	}
	if hostBusyTicks() <= 0 || selfTicks() < 0 {
		t.Fatal("this machine's /proc/stat and /proc/self/stat should read")
	}
	at := time.Now()
	a := Counters{At: at, CPU: CPUTicks{"ferry": 1000, "redis": 100}, HostBusy: 50_000, Bench: 300}
	// 10 s: the stack spent 1,000 ticks, the load generator 200 and the
	// machine 1,400, so others spent 200 ticks: 20 % of a core.
	b := Counters{At: at.Add(10 * time.Second), CPU: CPUTicks{"ferry": 1800, "redis": 300}, HostBusy: 51_400, Bench: 500}
	got := otherLoad(a, b)
	if got != 20 {
		t.Fatalf("otherLoad = %v, want 20", got)
	}
	if note := otherLoadNote(got); !strings.Contains(note, "DISTURBED") {
		t.Fatalf("note %q does not flag 20 %% of a core", note)
	}
	b.HostBusy = 51_250 // others 50 ticks: 5 %
	if got := otherLoad(a, b); got != 5 || strings.Contains(otherLoadNote(got), "DISTURBED") {
		t.Fatalf("otherLoad = %v (%s), want 5 and no flag", got, otherLoadNote(got))
	}
}

func TestBrokerPIDFindsTheBrokerChild(t *testing.T) {
	if got := brokerPID(os.Getpid()); got != 0 {
		t.Fatalf("brokerPID of the test process = %d before it has a broker child", got)
	}
	// A child whose command name is the broker's, as ferry dev's is.
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Fatal(err)
	}
	fake := filepath.Join(t.TempDir(), devstack.KafkaProcessName)
	if err := os.Symlink(sleep, fake); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(fake, "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	if got := brokerPID(os.Getpid()); got != cmd.Process.Pid {
		t.Fatalf("brokerPID = %d, want the %s child %d", got, devstack.KafkaProcessName, cmd.Process.Pid)
	}
	if _, ok := cpuTree(os.Getpid())["broker"]; !ok {
		t.Fatalf("cpuTree has no broker line: %v", cpuTree(os.Getpid()))
	}
}
