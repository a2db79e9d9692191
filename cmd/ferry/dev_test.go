package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferryhq/ferry/events/schema"
)

// devProcess is a `ferry dev` child process and what its banner said.
type devProcess struct {
	cmd     *exec.Cmd
	api     string // http://host:port
	console string // the console's URL, as the banner prints it
	kafka   string
	devKey  string
	exited  chan error
	outLock chan struct{}
}

var bannerLine = regexp.MustCompile(`^\s+(API|Console|Kafka|Dev API key)\s+(\S+)`)

// startDev runs the ferry binary's `dev` command with its data in dataDir and
// every port chosen free, and waits for its banner.
func startDev(t *testing.T, bin, dataDir string) *devProcess {
	t.Helper()
	cmd := exec.Command(bin, "dev")
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
	found := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			line := sc.Text()
			t.Log("ferry dev:", line)
			if m := bannerLine.FindStringSubmatch(line); m != nil {
				switch m[1] {
				case "API":
					p.api = strings.TrimSuffix(m[2], "/v1/jobs")
				case "Console":
					p.console = m[2]
				case "Kafka":
					p.kafka = m[2]
				case "Dev API key":
					p.devKey = m[2]
					close(found)
				}
			}
		}
		p.exited <- cmd.Wait()
	}()
	select {
	case <-found:
	case err := <-p.exited:
		t.Fatalf("ferry dev exited before it was ready: %v\nstderr:\n%s\nlog:\n%s", err, stderr.String(), readFile(dataDir, "ferry.log"))
	case <-time.After(90 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatalf("ferry dev did not print its banner in time\n%s", stderr.String())
	}
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
	dataDir := t.TempDir()
	// Postgres runs as the postgres OS user, which must be able to reach
	// its data directory below the test's private temporary directory.
	for d := dataDir; d != os.TempDir() && d != "/"; d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	dev := startDev(t, bin, dataDir)
	defer func() {
		if dev.cmd.ProcessState == nil {
			_ = dev.cmd.Process.Kill()
		}
	}()

	waitFor(t, 30*time.Second, "readyz 200", func() bool {
		resp, err := http.Get(dev.api + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})

	// The banner's console URL serves the console.
	page, err := http.Get(dev.console)
	if err != nil || page.StatusCode != http.StatusOK || !strings.HasPrefix(page.Header.Get("Content-Type"), "text/html") {
		t.Fatalf("console at %q: %v %v", dev.console, page, err)
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

	// A restart re-uses the data: the job is still there.
	dev = startDev(t, bin, dataDir)
	waitFor(t, 30*time.Second, "job still known after restart", func() bool {
		code, got := dev.do(t, "GET", "/v1/jobs/"+id, "")
		return code == http.StatusOK && got["status"] == "succeeded"
	})
	dev.stop(t)
}

func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("timed out waiting for %s", what)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func readFile(dir, name string) string {
	b, _ := os.ReadFile(filepath.Join(dir, name))
	return string(b)
}
