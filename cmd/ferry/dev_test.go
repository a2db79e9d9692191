package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferryhq/ferry/events/schema"
	"github.com/ferryhq/ferry/platform/devstack"
	"github.com/ferryhq/ferry/platform/testenv"
)

// devProcess is a `ferry dev` child process and what its ready file said.
type devProcess struct {
	cmd    *exec.Cmd
	ready  devstack.Ready
	api    string // http://host:port
	kafka  string
	devKey string
	exited chan error
}

// startDev runs the ferry binary's `dev` command with its data in dataDir,
// every port chosen free and args after `dev`, and waits for the ready file
// at readyFile (a file of another process, such as a stale one, is not it).
func startDev(t *testing.T, bin, dataDir, readyFile string, args ...string) *devProcess {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"dev"}, args...)...)
	cmd.Env = append(os.Environ(),
		"FERRY_DATA_DIR="+dataDir,
		"FERRY_HTTP_ADDR=127.0.0.1:0",
		"FERRY_DEV_KAFKA_ADDR=127.0.0.1:0",
		"FERRY_DEV_POSTGRES_PORT=0",
		"FERRY_DEV_REDIS_PORT=0",
		"FERRY_TOPIC_PARTITIONS=2",
	)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &devProcess{cmd: cmd, exited: make(chan error, 1)}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			t.Log("ferry dev:", sc.Text())
		}
		p.exited <- cmd.Wait()
		cancel() // stop waiting for the ready file
	}()
	ready, err := devstack.WaitReady(ctx, readyFile, cmd.Process.Pid)
	if err != nil {
		select {
		case werr := <-p.exited:
			t.Fatalf("ferry dev exited before it was ready: %v\nstderr:\n%s\nlog:\n%s", werr, stderr.String(), readFile(dataDir, "ferry.log"))
		default:
			_ = cmd.Process.Kill()
			t.Fatalf("ferry dev wrote no ready file %s: %v\nstderr:\n%s", readyFile, err, stderr.String())
		}
	}
	p.ready = ready
	p.api, p.kafka, p.devKey = p.ready.APIURL, strings.Join(p.ready.KafkaBrokers, ","), p.ready.APIKey
	return p
}

// stop sends SIGINT (Ctrl-C) and requires a clean exit.
func (p *devProcess) stop(t *testing.T) {
	t.Helper()
	_ = p.cmd.Process.Signal(os.Interrupt)
	select {
	case err := <-p.exited:
		if err != nil {
			t.Fatalf("ferry dev did not exit cleanly on Ctrl-C: %v", err)
		}
	case <-time.After(60 * time.Second):
		_ = p.cmd.Process.Kill()
		t.Fatal("ferry dev did not stop within 60s of Ctrl-C")
	}
}

func (p *devProcess) do(t *testing.T, method, path, body string) (int, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(method, p.api+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+p.devKey)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var out map[string]any
	_ = json.Unmarshal(b, &out)
	return resp.StatusCode, out
}

func buildFerry(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "ferry")
	out, err := exec.Command("go", "build", "-race", "-o", bin, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// TestDev runs `ferry dev` as a user would: it starts its own Kafka,
// Postgres and Redis, answers /readyz, runs a job, exposes its topics and
// events to kcat (a librdkafka client), stops on Ctrl-C, and keeps its data
// across a restart.
func TestDev(t *testing.T) {
	kcat, err := exec.LookPath("kcat")
	if err != nil {
		t.Fatal("kcat is not installed: run `make test` (scripts/install-deps.sh installs it)")
	}
	bin := buildFerry(t)
	dataDir := reachableDataDir(t)
	dev := startDev(t, bin, dataDir, filepath.Join(dataDir, "dev.json"))
	checkReadyFiles(t, dev, dataDir)
	broker := brokerChild(t, dev.cmd.Process.Pid)
	defer func() {
		if dev.cmd.ProcessState == nil {
			_ = dev.cmd.Process.Kill()
		}
	}()

	// The ready file is written once /readyz answers 200.
	resp, err := http.Get(dev.api + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("readyz %d after the ready file was written: %s", resp.StatusCode, body)
	}

	// The console the banner points at serves its page.
	page, err := http.Get(dev.api + "/console")
	if err != nil || page.StatusCode != http.StatusOK || !strings.HasPrefix(page.Header.Get("Content-Type"), "text/html") {
		t.Fatalf("console at %s/console: %v %v", dev.api, page, err)
	}
	page.Body.Close()

	code, job := dev.do(t, "POST", "/v1/jobs", `{"type":"noop","payload":{"hello":"kcat"}}`)
	if code != http.StatusAccepted {
		t.Fatalf("submit: %d %v", code, job)
	}
	id := job["id"].(string)
	waitFor(t, 30*time.Second, "job succeeded", func() bool {
		_, got := dev.do(t, "GET", "/v1/jobs/"+id, "")
		return got["status"] == "succeeded"
	})

	// kcat lists Ferry's topics.
	out, err := exec.Command(kcat, "-b", dev.kafka, "-L").CombinedOutput()
	if err != nil {
		t.Fatalf("kcat -L: %v\n%s", err, out)
	}
	for _, topic := range (schema.Topics{}).All() {
		if !strings.Contains(string(out), `topic "`+topic+`"`) {
			t.Errorf("kcat -L does not list %s:\n%s", topic, out)
		}
	}
	// kcat reads the enqueued event; its CloudEvents headers decode.
	out, err = exec.Command(kcat, "-b", dev.kafka, "-C", "-t", "ferry.jobs.enqueued", "-o", "beginning", "-e",
		"-f", "%k\t%h\t%s\n").CombinedOutput()
	if err != nil {
		t.Fatalf("kcat -C: %v\n%s", err, out)
	}
	var decoded bool
	for _, line := range strings.Split(string(out), "\n") {
		parts := strings.SplitN(line, "\t", 3)
		if len(parts) != 3 || parts[0] != id {
			continue
		}
		rec := &kgo.Record{Key: []byte(parts[0]), Value: []byte(parts[2])}
		for _, h := range strings.Split(parts[1], ",") {
			k, v, _ := strings.Cut(h, "=")
			rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: k, Value: []byte(v)})
		}
		ev, err := schema.Decode(rec)
		if err != nil {
			t.Fatalf("decode the record kcat read: %v\n%s", err, line)
		}
		enq, ok := ev.Data.(schema.Enqueued)
		if !ok || ev.Type != "ferry.job.enqueued.v1" || enq.JobID != id || ev.Tenant != "default" {
			t.Fatalf("unexpected event from kcat: %+v", ev)
		}
		decoded = true
	}
	if !decoded {
		t.Fatalf("kcat did not read the enqueued event of %s:\n%s", id, out)
	}

	dev.stop(t)
	if !processGone(broker) {
		t.Errorf("the broker child (pid %d) still runs after ferry dev stopped", broker)
	}
	for _, f := range []string{"dev.json", "dev.env"} {
		if _, err := os.Stat(filepath.Join(dataDir, f)); !os.IsNotExist(err) {
			t.Errorf("%s still exists after ferry dev stopped (%v)", f, err)
		}
	}

	// A restart re-uses the data: the job is still there. --ready-file
	// puts the ready file elsewhere.
	elsewhere := filepath.Join(t.TempDir(), "ready", "ferry.json")
	dev = startDev(t, bin, dataDir, elsewhere, "--ready-file", elsewhere)
	waitFor(t, 30*time.Second, "job still known after restart", func() bool {
		code, got := dev.do(t, "GET", "/v1/jobs/"+id, "")
		return code == http.StatusOK && got["status"] == "succeeded"
	})
	dev.stop(t)
}

// TestDevKilledLeavesNoChildren kills `ferry dev` with SIGKILL, which it
// cannot catch: its broker, Postgres and Redis children get their
// parent-death signal and exit rather than run on as orphans.
func TestDevKilledLeavesNoChildren(t *testing.T) {
	bin := buildFerry(t)
	dataDir := reachableDataDir(t)
	dev := startDev(t, bin, dataDir, filepath.Join(dataDir, "dev.json"))
	broker := brokerChild(t, dev.cmd.Process.Pid)
	children := childrenOf(dev.cmd.Process.Pid)
	if len(children) < 3 {
		t.Fatalf("ferry dev has children %v, want the broker, postgres and redis", children)
	}
	code, job := dev.do(t, "POST", "/v1/jobs", `{"type":"noop"}`)
	if code != http.StatusAccepted {
		t.Fatalf("submit: %d %v", code, job)
	}
	waitFor(t, 30*time.Second, "job succeeded", func() bool {
		_, got := dev.do(t, "GET", "/v1/jobs/"+job["id"].(string), "")
		return got["status"] == "succeeded"
	})
	if err := dev.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-dev.exited
	// Postgres's shutdown checkpoint can take a while on a loaded machine.
	waitFor(t, 2*time.Minute, fmt.Sprintf("every child of the killed ferry dev (%v) exited", children), func() bool {
		for pid := range children {
			if !processGone(pid) {
				return false
			}
		}
		return true
	})
	if !processGone(broker) {
		t.Fatalf("broker %d outlived ferry dev", broker)
	}
}

// reachableDataDir returns a data directory for `ferry dev`. Postgres runs
// as the postgres OS user, which must be able to reach its data directory
// below the test's private temporary directory.
func reachableDataDir(t *testing.T) string {
	t.Helper()
	dataDir := t.TempDir()
	for d := dataDir; d != os.TempDir() && d != "/"; d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dataDir
}

// brokerChild returns the pid of the embedded broker child of `ferry dev`
// process devPID.
func brokerChild(t *testing.T, devPID int) int {
	t.Helper()
	for pid, comm := range childrenOf(devPID) {
		if comm == devstack.KafkaProcessName {
			return pid
		}
	}
	t.Fatalf("ferry dev (pid %d) has no %s child: %v", devPID, devstack.KafkaProcessName, childrenOf(devPID))
	return 0
}

// childrenOf returns the command name of each living child of pid, from /proc.
func childrenOf(pid int) map[int]string {
	out := map[int]string{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if ppid, comm, _, ok := procStat(child); ok && ppid == pid {
			out[child] = comm
		}
	}
	return out
}

// processGone reports whether pid has exited: no longer in /proc, or a
// zombie waiting for init (the parent it was reparented to) to reap it.
func processGone(pid int) bool {
	_, _, state, ok := procStat(pid)
	return !ok || state == "Z"
}

// procStat reads the parent, command name and state of pid from
// /proc/<pid>/stat; the name is in parentheses and may hold spaces.
func procStat(pid int) (ppid int, comm, state string, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, "", "", false
	}
	s := string(b)
	open, closing := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || closing < open {
		return 0, "", "", false
	}
	f := strings.Fields(s[closing+1:])
	if len(f) < 2 {
		return 0, "", "", false
	}
	ppid, _ = strconv.Atoi(f[1])
	return ppid, s[open+1 : closing], f[0], true
}

// checkReadyFiles checks the ready file and the env file of a `ferry dev`
// with default paths: private to the user, consistent with each other, with
// keys that work, and sourced by a shell as they are.
func checkReadyFiles(t *testing.T, dev *devProcess, dataDir string) {
	t.Helper()
	r := dev.ready
	for _, f := range []string{"dev.json", "dev.env"} {
		fi, err := os.Stat(filepath.Join(dataDir, f))
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("%s: %v, mode %v; want mode 0600 (it holds secrets)", f, err, fi.Mode().Perm())
		}
	}
	secret, _ := os.ReadFile(filepath.Join(dataDir, "secret-key"))
	if r.Tenant != "default" || r.AdminKey == "" || r.PostgresURL == "" || r.RedisURL == "" ||
		r.SecretKey != strings.TrimSpace(string(secret)) || r.DataDir != dataDir || r.TopicPrefix != "ferry." {
		t.Fatalf("ready file: %+v (secret-key file %q)", r, secret)
	}
	req, _ := http.NewRequest("GET", r.APIURL+"/v1/admin/tenants", nil)
	req.Header.Set("Authorization", "Bearer "+r.AdminKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /v1/admin/tenants with the ready file's admin key: %d", resp.StatusCode)
	}
	out, err := exec.Command("bash", "-c", "set -eu; source \"$1\"; env | grep ^FERRY_ | sort", "bash",
		filepath.Join(dataDir, "dev.env")).CombinedOutput()
	if err != nil {
		t.Fatalf("source dev.env: %v\n%s", err, out)
	}
	got := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		k, v, _ := strings.Cut(line, "=")
		got[k] = v
	}
	for k, want := range r.Env {
		if got[k] != want {
			t.Errorf("after source dev.env, %s=%q; the ready file says %q", k, got[k], want)
		}
	}
	for k, want := range map[string]string{"FERRY_URL": r.APIURL, "FERRY_API_KEY": r.APIKey,
		"FERRY_KAFKA_BROKERS": dev.kafka, "FERRY_SECRET_KEY": r.SecretKey, "FERRY_POSTGRES_URL": r.PostgresURL} {
		if r.Env[k] != want {
			t.Errorf("ready env %s=%q, want %q", k, r.Env[k], want)
		}
	}
}

// waitFor is testenv.WaitFor under the short name these tests use.
var waitFor = testenv.WaitFor

func readFile(dir, name string) string {
	b, _ := os.ReadFile(filepath.Join(dir, name))
	return string(b)
}
