package main

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ferryhq/ferry/platform/devstack"
)

// clockTicks is USER_HZ, the unit of utime and stime in /proc/<pid>/stat.
// Linux fixes it at 100 for user space on every architecture Ferry runs on.
const clockTicks = 100

// CPUTicks is CPU time (user + system, in clock ticks) per component of
// the stack: the process tree under the serving process, grouped by what
// each process is. `ferry dev` runs the api, scheduler, workers and
// projections in one process ("ferry"); the embedded Kafka broker
// ("broker"), Postgres (postmaster and every backend) and Redis are its
// children.
type CPUTicks map[string]int64

// cpuComponents are the components a CPU line names, in its order.
var cpuComponents = []string{"ferry", "broker", "postgres", "redis"}

// component names a process of the stack by its command name.
func component(comm string) string {
	switch {
	case comm == devstack.KafkaProcessName:
		return "broker"
	case strings.HasPrefix(comm, "postgres"), strings.HasPrefix(comm, "postmaster"):
		return "postgres"
	case strings.HasPrefix(comm, "redis"):
		return "redis"
	default:
		return "ferry"
	}
}

// procStat is what cpuTree needs of one /proc/<pid>/stat.
type procStat struct {
	ppid  int
	comm  string
	ticks int64
}

// readProcStat parses /proc/<pid>/stat. The command name is in parentheses
// and may itself contain spaces or parentheses, so fields are counted from
// the last ')'.
func readProcStat(pid int) (procStat, bool) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return procStat{}, false
	}
	s := string(b)
	open, closing := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || closing < open {
		return procStat{}, false
	}
	f := strings.Fields(s[closing+1:])
	// f[0] is field 3 (state): ppid is field 4, utime 14, stime 15, cutime
	// 16, cstime 17.
	if len(f) < 15 {
		return procStat{}, false
	}
	ppid, _ := strconv.Atoi(f[1])
	var ticks int64
	for _, i := range []int{11, 12, 13, 14} {
		n, _ := strconv.ParseInt(f[i], 10, 64)
		ticks += n
	}
	return procStat{ppid: ppid, comm: s[open+1 : closing], ticks: ticks}, true
}

// cpuTree sums the CPU time of root and every living descendant by
// component, each with the time of its children it has reaped (cutime,
// cstime): Redis's AOF rewrites and snapshots are forked children, and
// Postgres's autovacuum workers exit after each run, so without it their
// CPU would vanish from the figures. A process that exited between two
// snapshots and was not reaped by one of these takes its time with it
// (Postgres backends live as long as their pooled connections, so in
// practice the tree is stable during a workload). Empty when root is 0 or
// /proc is unreadable.
func cpuTree(root int) CPUTicks {
	out := CPUTicks{}
	if root <= 0 {
		return out
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return out
	}
	stats := map[int]procStat{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, ok := readProcStat(pid); ok {
			stats[pid] = st
		}
	}
	for pid, st := range stats {
		if descends(stats, pid, root) {
			out[component(st.comm)] += st.ticks
		}
	}
	return out
}

// descends reports whether pid is root or one of its descendants.
func descends(stats map[int]procStat, pid, root int) bool {
	for range 64 { // the stack's tree is shallow; the bound guards against cycles
		if pid == root {
			return true
		}
		st, ok := stats[pid]
		if !ok || st.ppid <= 1 {
			return false
		}
		pid = st.ppid
	}
	return false
}

// microsPerJob is the CPU each component spent between a and b, in µs per
// job of n.
func microsPerJob(a, b CPUTicks, n int) map[string]float64 {
	out := map[string]float64{}
	if n == 0 {
		return out
	}
	var total int64
	for k, v := range b {
		d := v - a[k]
		if d < 0 {
			d = 0
		}
		out[k] = round(float64(d)*1e6/clockTicks/float64(n), 1)
		total += d
	}
	out["total"] = round(float64(total)*1e6/clockTicks/float64(n), 1)
	return out
}

// implausibleCPU names the components (and "total") that spent more CPU
// between a and b than cores can give in elapsed. Such a figure is a
// /proc sum gone wrong, not load (one fresh-stack run reported Postgres at
// 2.4 cores' worth on 2, docs/performance.md Round 11), and the run's CPU
// line must not be compared with others.
func implausibleCPU(a, b CPUTicks, elapsed time.Duration, cores int) []string {
	limit := elapsed.Seconds() * float64(cores) * clockTicks
	var bad []string
	var total int64
	for _, k := range slices.Sorted(maps.Keys(b)) {
		d := max(b[k]-a[k], 0)
		total += d
		if float64(d) > limit {
			bad = append(bad, k)
		}
	}
	if float64(total) > limit {
		bad = append(bad, "total")
	}
	return bad
}

// cpuLine formats microsPerJob's result: every component of cpuComponents
// (0 when it ran no process of its own, as the broker of a stack that
// reaches an external Kafka), then the total.
func cpuLine(cpu map[string]float64) string {
	parts := make([]string, 0, len(cpuComponents))
	for _, c := range cpuComponents {
		parts = append(parts, fmt.Sprintf("%s %.0f", c, cpu[c]))
	}
	return fmt.Sprintf("cpu µs per job: %s, total %.0f (the load generator not counted)", strings.Join(parts, ", "), cpu["total"])
}

// brokerPID returns the pid of the embedded broker child of root, 0 when
// root has none (a stack on an external Kafka, or a ferry dev that still
// runs its broker in process).
func brokerPID(root int) int {
	entries, err := os.ReadDir("/proc")
	if err != nil || root <= 0 {
		return 0
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, ok := readProcStat(pid); ok && st.ppid == root && component(st.comm) == "broker" {
			return pid
		}
	}
	return 0
}

// hostBusyTicks is the CPU time every process of the machine spent so far
// (user, nice, system, irq and softirq of /proc/stat's first line, in clock
// ticks): idle, I/O wait and steal (other virtual machines) do not count.
// 0 when /proc/stat is unreadable.
func hostBusyTicks() int64 {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	return parseHostBusy(line)
}

// parseHostBusy reads the busy ticks of a "cpu  user nice system idle
// iowait irq softirq steal ..." line; 0 when it is not one.
func parseHostBusy(line string) int64 {
	f := strings.Fields(line)
	if len(f) < 8 || f[0] != "cpu" {
		return 0
	}
	var busy int64
	for _, i := range []int{1, 2, 3, 6, 7} {
		n, _ := strconv.ParseInt(f[i], 10, 64)
		busy += n
	}
	return busy
}

// selfTicks is the CPU time of this process, the load generator.
func selfTicks() int64 {
	st, _ := readProcStat(os.Getpid())
	return st.ticks
}

// disturbingLoad is the share of one core that processes outside the stack
// and the load generator may take during a workload before its figures are
// flagged: more is someone else's build, test or forgotten stack, and the
// run should be repeated on a quiet machine before it is compared.
const disturbingLoad = 15.0

// otherLoad is the CPU that processes other than the stack (a and b's CPU)
// and the load generator spent between a and b, in % of one core.
func otherLoad(a, b Counters) float64 {
	secs := b.At.Sub(a.At).Seconds()
	if secs <= 0 || a.HostBusy == 0 || b.HostBusy == 0 {
		return 0
	}
	var stack int64
	for k, v := range b.CPU {
		stack += max(v-a.CPU[k], 0)
	}
	other := (b.HostBusy - a.HostBusy) - stack - (b.Bench - a.Bench)
	return round(max(float64(other), 0)*100/clockTicks/secs, 1)
}

// otherLoadNote says how much other load ran beside the workload, flagged
// when it may have disturbed the figures.
func otherLoadNote(pct float64) string {
	s := fmt.Sprintf("other processes on the machine %.1f %% of a core", pct)
	if pct > disturbingLoad {
		s += fmt.Sprintf(" (DISTURBED: over %.0f %%; rerun on a quiet machine before comparing)", disturbingLoad)
	}
	return s
}
