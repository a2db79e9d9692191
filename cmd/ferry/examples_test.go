package main

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"syscall"
	"testing"

	"github.com/ferryhq/ferry/platform/devstack"
)

// examplesDir is the module of the example app (examples/).
const examplesDir = "../../examples"

// buildExample builds a command of the examples module into dir.
func buildExample(t *testing.T, dir, name string) string {
	t.Helper()
	bin := filepath.Join(dir, name)
	cmd := exec.Command("go", "build", "-race", "-o", bin, "./"+name)
	cmd.Dir = examplesDir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./examples/%s: %v\n%s", name, err, out)
	}
	return bin
}

// TestExampleApp runs the example app of examples/ as a user would beside
// `ferry dev`: the stack runs with its built-in worker on the short pool
// only (FERRY_DEV_WORKER_POOLS=short), a ready file describes it, the
// example worker joins it from that file as a process of its own, and the
// example client, another process, submits with an Idempotency-Key and
// follows the job over SSE until it succeeds. Run again with the same key,
// the client follows the same job and creates none.
func TestExampleApp(t *testing.T) {
	secret := make([]byte, 32)
	_, _ = rand.Read(secret)
	secretKey := base64.StdEncoding.EncodeToString(secret)
	e := startStack(t, map[string]string{"FERRY_DEV_WORKER_POOLS": "short", "FERRY_SECRET_KEY": secretKey})
	bins := t.TempDir()
	workerBin, submitBin := buildExample(t, bins, "worker"), buildExample(t, bins, "submit")

	readyFile := filepath.Join(t.TempDir(), "dev.json")
	ready := devstack.Ready{
		PID: os.Getpid(), APIURL: e.base, Tenant: "acme", APIKey: e.key, AdminKey: "admin-e2e",
		KafkaBrokers: []string{e.brokers}, TopicPrefix: "ferry.",
		PostgresURL: e.loader.String("FERRY_POSTGRES_URL"), RedisURL: e.loader.String("FERRY_REDIS_URL"),
		SecretKey: secretKey, DataDir: e.loader.String("FERRY_DATA_DIR"),
	}
	ready.Env = ready.JoinEnv(1, 1, 4, "127.0.0.0/8")
	if err := devstack.WriteReady(ready, readyFile, ""); err != nil {
		t.Fatal(err)
	}

	// The worker, with nothing of the stack in its environment but the file.
	workerLog, err := os.Create(filepath.Join(t.TempDir(), "worker.log"))
	if err != nil {
		t.Fatal(err)
	}
	worker := exec.Command(workerBin, "-dev", readyFile)
	worker.Env = cleanEnv()
	worker.Stdout, worker.Stderr = workerLog, workerLog
	worker.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := worker.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = worker.Process.Signal(syscall.SIGTERM)
		_ = worker.Wait()
		log, _ := os.ReadFile(workerLog.Name())
		workerLog.Close()
		t.Logf("example worker log:\n%s", log)
	})

	first := runSubmit(t, submitBin, readyFile, "example-app-1")
	id := regexp.MustCompile(`submitted (\S+) \(Idempotency-Key example-app-1, deduplicated false\)`).FindStringSubmatch(first)
	if id == nil {
		t.Fatalf("first run did not submit a new job:\n%s", first)
	}
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`(?m)^event enqueued `),
		regexp.MustCompile(`(?m)^event started `),
		regexp.MustCompile(`(?m)^event progress  attempt 1 \d+% row \d+ of 8$`),
		regexp.MustCompile(`(?m)^event completed `),
	} {
		if !want.MatchString(first) {
			t.Errorf("client output lacks %s:\n%s", want, first)
		}
	}
	result := regexp.MustCompile(`(?m)^job ` + regexp.QuoteMeta(id[1]) + ` succeeded result (\{.*\})$`).FindStringSubmatch(first)
	var got map[string]any
	if result == nil || json.Unmarshal([]byte(result[1]), &got) != nil ||
		!reflect.DeepEqual(got, map[string]any{"attempt": 1.0, "rows": 8.0, "sum_of_squares": 204.0}) {
		t.Errorf("client output lacks the job's result {attempt 1, rows 8, sum_of_squares 204}:\n%s", first)
	}
	again := runSubmit(t, submitBin, readyFile, "example-app-1")
	if !strings.Contains(again, "submitted "+id[1]+" (Idempotency-Key example-app-1, deduplicated true)") ||
		!strings.Contains(again, "job "+id[1]+" succeeded") {
		t.Errorf("second run with the same key:\n%s", again)
	}
	if job := e.job(id[1]); job["status"] != "succeeded" || job["attempt"].(float64) != 1 {
		t.Errorf("job %v", job)
	}
}

// runSubmit runs the example client and returns its output; it must exit 0.
func runSubmit(t *testing.T, bin, readyFile, key string) string {
	t.Helper()
	cmd := exec.Command(bin, "-dev", readyFile, "-rows", "8", "-step-ms", "150", "-idempotency-key", key, "-timeout", "2m")
	cmd.Env = cleanEnv()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("examples/submit: %v\n%s", err, out)
	}
	return string(out)
}

// cleanEnv is the test's environment without FERRY_ variables, so the
// example processes find the stack through the ready file only.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "FERRY_") {
			env = append(env, kv)
		}
	}
	return env
}
