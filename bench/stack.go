package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/ferryhq/ferry/platform/devstack"
)

// Target is the Ferry stack under test.
type Target struct {
	API      string // http://host:port
	Key      string // dev API key (tenant "default")
	AdminKey string // the operator key ("" when unknown: -url without -admin-key)
	Tenant   string
	Kafka    string
	Postgres string
	Redis    string
	PID      int    // the serving process, for /proc/<pid>/status; 0 if unknown
	Pprof    string // host:port of net/http/pprof in the serving process, "" if none
	// BrokerPprof is host:port of net/http/pprof in ferry dev's broker
	// child process, "" if none.
	BrokerPprof string

	cmd    *exec.Cmd
	exited chan error
	data   string
}

// pprofOverlay is compiled into the benchmark's ferry binary through
// `go build -overlay`, without touching the repository: it serves
// net/http/pprof on FERRY_BENCH_PPROF_ADDR when that is set, or, in the
// embedded broker's child process (the same binary run as dev-kafka, which
// inherits the environment), on FERRY_BENCH_BROKER_PPROF_ADDR.
const pprofOverlay = `package main

import (
	"net/http"
	_ "net/http/pprof"
	"os"
)

func init() {
	addr := os.Getenv("FERRY_BENCH_PPROF_ADDR")
	if len(os.Args) > 1 && os.Args[1] == "dev-kafka" {
		addr = os.Getenv("FERRY_BENCH_BROKER_PPROF_ADDR")
	}
	if addr != "" {
		go func() { _ = http.ListenAndServe(addr, nil) }()
	}
}
`

// buildFerry builds ./cmd/ferry of the repository at root into dir, with the
// pprof overlay.
func buildFerry(root, dir string) (string, error) {
	src := filepath.Join(dir, "zz_bench_pprof.go")
	if err := os.WriteFile(src, []byte(pprofOverlay), 0o644); err != nil {
		return "", err
	}
	ov, _ := json.Marshal(map[string]any{"Replace": map[string]string{
		filepath.Join(root, "cmd", "ferry", "zz_bench_pprof.go"): src,
	}})
	ovFile := filepath.Join(dir, "overlay.json")
	if err := os.WriteFile(ovFile, ov, 0o644); err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "ferry")
	cmd := exec.Command("go", "build", "-overlay", ovFile, "-o", bin, "./cmd/ferry")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/ferry: %v\n%s", err, out)
	}
	return bin, nil
}

func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// startDev runs `ferry dev` with its data in a fresh directory, every port
// free, worker concurrency as docs/benchmark.md says, and waits for its
// ready file (written once /readyz answers 200).
func startDev(ctx context.Context, bin, dataDir string, env []string, logw io.Writer) (*Target, error) {
	// Postgres runs as the postgres OS user when we are root: every
	// directory above its data directory must be searchable.
	for d := dataDir; d != os.TempDir() && d != "/"; d = filepath.Dir(d) {
		_ = os.Chmod(d, 0o755)
	}
	pprofAddr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	brokerPprofAddr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	readyFile := filepath.Join(dataDir, "dev.json")
	cmd := exec.Command(bin, "dev", "--ready-file", readyFile)
	cmd.Env = append(os.Environ(),
		"FERRY_DATA_DIR="+dataDir,
		"FERRY_HTTP_ADDR=127.0.0.1:0",
		"FERRY_DEV_KAFKA_ADDR=127.0.0.1:0",
		"FERRY_DEV_POSTGRES_PORT=0",
		"FERRY_DEV_REDIS_PORT=0",
		"FERRY_WORKER_CONCURRENCY=100",
		"FERRY_BENCH_PPROF_ADDR="+pprofAddr,
		"FERRY_BENCH_BROKER_PPROF_ADDR="+brokerPprofAddr,
	)
	cmd.Env = append(cmd.Env, env...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	var stderr lockedBuffer
	cmd.Stderr = &stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	t := &Target{Tenant: "default", PID: cmd.Process.Pid, Pprof: pprofAddr, BrokerPprof: brokerPprofAddr, cmd: cmd, exited: make(chan error, 1), data: dataDir}
	readyCtx, stopWaiting := context.WithTimeout(ctx, 120*time.Second)
	defer stopWaiting()
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			fmt.Fprintln(logw, "ferry dev:", sc.Text())
		}
		t.exited <- cmd.Wait()
		stopWaiting()
	}()
	if err := t.takeReady(readyCtx, readyFile, &stderr); err != nil {
		return nil, err
	}
	return t, nil
}

// takeReady waits for the ready file of t's process and takes the stack's
// addresses and key from it; the caller cancels ctx when the process exits.
func (t *Target) takeReady(ctx context.Context, path string, stderr *lockedBuffer) error {
	r, err := devstack.WaitReady(ctx, path, t.PID)
	if err != nil {
		select {
		case werr := <-t.exited:
			log, _ := os.ReadFile(filepath.Join(t.data, "ferry.log"))
			return fmt.Errorf("ferry dev exited before it was ready: %v\nstderr:\n%s\nlog tail:\n%s", werr, stderr.String(), tail(log, 4000))
		default:
			_ = t.cmd.Process.Kill()
			return fmt.Errorf("ferry dev: no ready file: %w\n%s", err, stderr.String())
		}
	}
	t.API, t.Key, t.Tenant, t.AdminKey = r.APIURL, r.APIKey, r.Tenant, r.AdminKey
	t.Kafka, t.Postgres, t.Redis = strings.Join(r.KafkaBrokers, ","), r.PostgresURL, r.RedisURL
	return nil
}

// Stop sends Ctrl-C to a stack this program started and waits for it.
func (t *Target) Stop() error {
	if t.cmd == nil {
		return nil
	}
	_ = t.cmd.Process.Signal(os.Interrupt)
	select {
	case err := <-t.exited:
		return err
	case <-time.After(60 * time.Second):
		_ = t.cmd.Process.Kill()
		return errors.New("ferry dev did not stop within 60s of Ctrl-C; killed")
	}
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// RSSMB reads VmRSS of pid in MiB (0 if unknown).
func RSSMB(pid int) float64 {
	if pid <= 0 {
		return 0
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(v)
			if len(f) > 0 {
				kb, _ := strconv.ParseFloat(f[0], 64)
				return round(kb/1024, 1)
			}
		}
	}
	return 0
}

// RSSSampler records the peak VmRSS of a process while it runs.
type RSSSampler struct {
	pid  int
	stop chan struct{}
	done chan struct{}
	mu   sync.Mutex
	peak float64
}

// SampleRSS samples pid's VmRSS every interval until Stop.
func SampleRSS(pid int, every time.Duration) *RSSSampler {
	s := &RSSSampler{pid: pid, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		tk := time.NewTicker(every)
		defer tk.Stop()
		for {
			s.observe()
			select {
			case <-s.stop:
				s.observe()
				return
			case <-tk.C:
			}
		}
	}()
	return s
}

func (s *RSSSampler) observe() {
	v := RSSMB(s.pid)
	s.mu.Lock()
	s.peak = max(s.peak, v)
	s.mu.Unlock()
}

// Stop ends sampling and returns the peak in MiB.
func (s *RSSSampler) Stop() float64 {
	close(s.stop)
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.peak
}

// Peak is the peak so far.
func (s *RSSSampler) Peak() float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.peak
}
