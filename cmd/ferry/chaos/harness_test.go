package chaos_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferryhq/ferry/events/schema"
	"github.com/ferryhq/ferry/platform/auth"
	"github.com/ferryhq/ferry/platform/testenv"
)

// bins holds the service binaries TestMain builds, by service name.
var bins = map[string]string{}

func TestMain(m *testing.M) {
	os.Exit(func() int {
		dir, err := os.MkdirTemp("", "ferry-chaos-bin-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(dir)
		if err := buildBinaries(dir); err != nil {
			fmt.Fprintln(os.Stderr, "chaos: building service binaries:", err)
			return 1
		}
		return m.Run()
	}())
}

// buildBinaries builds ferry-api, ferry-scheduler, ferry-worker and
// ferry-audit with the race detector into dir.
func buildBinaries(dir string) error {
	root, err := repoRoot()
	if err != nil {
		return err
	}
	args := []string{"build", "-race", "-o", dir + string(os.PathSeparator)}
	for _, svc := range []string{"api", "scheduler", "worker", "audit"} {
		args = append(args, "./services/"+svc+"/cmd/ferry-"+svc)
		bins[svc] = filepath.Join(dir, "ferry-"+svc)
	}
	args, bins["reportworker"] = append(args, "./cmd/ferry/chaos/reportworker"), filepath.Join(dir, "reportworker") // routing_test.go
	cmd := exec.Command("go", args...)
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return nil
}

// repoRoot is the directory holding go.work, above the working directory.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.work")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.work above the working directory")
		}
		dir = parent
	}
}

// cluster is a Ferry deployment of separate OS processes on the test's
// Kafka (in-process kfake, reached over real sockets), Postgres and Redis.
type cluster struct {
	t        *testing.T
	env      map[string]string
	brokers  string
	redisURL string
	apiBase  string
	key      string
	rec      *recorder
	topics   schema.Topics
	// logDir holds the children's logs; made before stopAll is registered
	// so that it is removed after stopAll has shown their tails.
	logDir string

	mu    sync.Mutex
	procs []*proc
}

// proc is one child process.
type proc struct {
	name    string
	base    string // http://addr of its routes
	cmd     *exec.Cmd
	logPath string
	done    chan struct{}
	exitErr error
	exitAt  time.Time
}

// newCluster prepares the infrastructure; env overrides the children's
// settings for every process.
func newCluster(t *testing.T, env map[string]string) *cluster {
	t.Helper()
	c := &cluster{t: t, brokers: testenv.Kafka(t), redisURL: testenv.Redis(t)}
	c.env = map[string]string{
		"FERRY_KAFKA_BROKERS":    c.brokers,
		"FERRY_POSTGRES_URL":     testenv.Postgres(t),
		"FERRY_REDIS_URL":        c.redisURL,
		"FERRY_TOPIC_PARTITIONS": "4",
		"FERRY_ADMIN_KEY":        "admin-chaos",
		// The api seals http signing secrets, workers open them: one key.
		"FERRY_SECRET_KEY":       "Y2hhb3MtY2hhb3MtY2hhb3MtY2hhb3MtY2hhb3MtMzI=",
		"FERRY_SHUTDOWN_TIMEOUT": "20s",
		"FERRY_LOG_LEVEL":        "info",
		"FERRY_SCHEDULER_LEASE":  "2s",
		"FERRY_WORKER_HEARTBEAT": "300ms",
		"GORACE":                 "halt_on_error=1",
	}
	// One embedded broker holds one copy (production defaults are 3 and 2).
	c.env["FERRY_TOPIC_REPLICATION"], c.env["FERRY_TOPIC_MIN_INSYNC"] = "1", "1"
	for k, v := range env {
		c.env[k] = v
	}
	c.logDir = t.TempDir()
	t.Cleanup(c.stopAll)
	return c
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// start runs the service binary svc as a child named name, with extra
// settings, and waits until it answers /readyz.
func (c *cluster) start(svc, name string, extra map[string]string) *proc {
	c.t.Helper()
	p, base := c.spawn(svc, name, extra)
	c.waitReady(p, base)
	if svc == "api" {
		c.apiBase = base
	}
	return p
}

// spawn runs the service binary svc as a child named name with the
// cluster's settings plus extra, on a free port, and returns it and its base
// URL without waiting for it.
func (c *cluster) spawn(svc, name string, extra map[string]string) (*proc, string) {
	c.t.Helper()
	addr := freeAddr(c.t)
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "FERRY_") {
			env = append(env, kv)
		}
	}
	for k, v := range c.env {
		env = append(env, k+"="+v)
	}
	for k, v := range extra {
		env = append(env, k+"="+v)
	}
	env = append(env, "FERRY_HTTP_ADDR="+addr)
	logPath := filepath.Join(c.logDir, name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		c.t.Fatal(err)
	}
	cmd := exec.Command(bins[svc])
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		c.t.Fatalf("start %s: %v", name, err)
	}
	p := &proc{name: name, base: "http://" + addr, cmd: cmd, logPath: logPath, done: make(chan struct{})}
	go func() {
		p.exitErr = cmd.Wait()
		p.exitAt = time.Now()
		f.Close()
		close(p.done)
	}()
	c.mu.Lock()
	c.procs = append(c.procs, p)
	c.mu.Unlock()
	return p, "http://" + addr
}

// waitReady waits until p answers /readyz at base, failing if it exits.
func (c *cluster) waitReady(p *proc, base string) {
	c.t.Helper()
	waitFor(c.t, 60*time.Second, p.name+" ready", func() bool {
		select {
		case <-p.done:
			c.t.Fatalf("%s exited during start-up: %v\n%s", p.name, p.exitErr, tail(p.logPath, 40))
		default:
		}
		resp, err := http.Get(base + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}

// startAPI starts the api, creates the test tenant and starts recording
// every lifecycle and worker event.
func (c *cluster) startAPI() {
	c.t.Helper()
	c.start("api", "api", nil)
	key, _ := auth.NewKey()
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, c.env["FERRY_POSTGRES_URL"])
	if err != nil {
		c.t.Fatal(err)
	}
	defer pool.Close()
	if err := auth.EnsureTenant(ctx, pool, "acme", "Acme", key); err != nil {
		c.t.Fatal(err)
	}
	c.key = key
	c.rec = c.record()
}

// kill sends sig to p.
func (c *cluster) signal(p *proc, sig syscall.Signal) {
	c.t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		c.t.Fatalf("signal %s: %v", p.name, err)
	}
}

// wait waits up to d for p to exit and returns its exit code.
func (c *cluster) wait(p *proc, d time.Duration) int {
	c.t.Helper()
	select {
	case <-p.done:
	case <-time.After(d):
		c.t.Fatalf("%s still running after %v\n%s", p.name, d, tail(p.logPath, 40))
	}
	var ee *exec.ExitError
	switch {
	case p.exitErr == nil:
		return 0
	case errors.As(p.exitErr, &ee):
		return ee.ExitCode()
	}
	c.t.Fatalf("%s: %v", p.name, p.exitErr)
	return -1
}

// stopAll stops every child still running (SIGTERM, then SIGKILL) and
// fails the test on a data race report or, when it failed, shows the tails
// of the logs.
func (c *cluster) stopAll() {
	c.mu.Lock()
	procs := append([]*proc(nil), c.procs...)
	c.mu.Unlock()
	for _, p := range procs {
		select {
		case <-p.done:
			continue
		default:
		}
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, p := range procs {
		select {
		case <-p.done:
		case <-time.After(30 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	}
	for _, p := range procs {
		b, _ := os.ReadFile(p.logPath)
		if bytes.Contains(b, []byte("WARNING: DATA RACE")) {
			c.t.Errorf("%s reported a data race:\n%s", p.name, tail(p.logPath, 80))
		}
	}
	if c.t.Failed() {
		for _, p := range procs {
			c.t.Logf("--- %s (exit %v) ---\n%s", p.name, p.exitErr, tail(p.logPath, 30))
		}
	}
}

// logCount counts the lines of p's log containing s.
func logCount(p *proc, s string) int {
	b, _ := os.ReadFile(p.logPath)
	return bytes.Count(b, []byte(s))
}

func tail(path string, n int) string {
	b, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// call does an authenticated request to the api.
func (c *cluster) call(method, path string, body any) (int, map[string]any) {
	c.t.Helper()
	r := testenv.Call(c.t, c.apiBase, c.key, method, path, body)
	if len(r.Raw) > 0 && r.Body == nil {
		c.t.Fatalf("%s %s: %d answered no JSON object: %s", method, path, r.Status, r.Raw)
	}
	return r.Status, r.Body
}

// submit submits jobs in one batch and returns their ids.
func (c *cluster) submit(jobs ...map[string]any) []string {
	c.t.Helper()
	code, out := c.call("POST", "/v1/jobs/batch", map[string]any{"jobs": jobs})
	if code != http.StatusAccepted {
		c.t.Fatalf("batch: %d %v", code, out)
	}
	var ids []string
	for _, it := range out["jobs"].([]any) {
		m := it.(map[string]any)
		id, _ := m["id"].(string)
		if id == "" {
			c.t.Fatalf("batch item rejected: %v", m)
		}
		ids = append(ids, id)
	}
	return ids
}

func (c *cluster) job(id string) map[string]any {
	c.t.Helper()
	code, out := c.call("GET", "/v1/jobs/"+id, nil)
	if code != http.StatusOK {
		c.t.Fatalf("get %s: %d %v", id, code, out)
	}
	return out
}

// flushRedis empties the Redis database every service of the cluster uses.
func (c *cluster) flushRedis() {
	c.t.Helper()
	opts, err := redis.ParseURL(c.redisURL)
	if err != nil {
		c.t.Fatal(err)
	}
	rdb := redis.NewClient(opts)
	defer rdb.Close()
	if err := rdb.FlushDB(context.Background()).Err(); err != nil {
		c.t.Fatal(err)
	}
}

// groupMembers is how many members of group have partitions assigned.
func (c *cluster) groupMembers(group string) int {
	c.t.Helper()
	n := 0
	for _, m := range c.describeGroup(group).Members {
		if a, ok := m.Assigned.AsConsumer(); ok && len(a.Topics) > 0 {
			n++
		}
	}
	return n
}

// groupState is group's state and, per member, its client and how many
// partitions it has: what to show when a group does not settle.
func (c *cluster) groupState(group string) string {
	c.t.Helper()
	g := c.describeGroup(group)
	out := fmt.Sprintf("%s: %s (err %v)", group, g.State, g.Err)
	for _, m := range g.Members {
		n := 0
		if a, ok := m.Assigned.AsConsumer(); ok {
			for _, t := range a.Topics {
				n += len(t.Partitions)
			}
		}
		out += fmt.Sprintf("; %s@%s %d partitions", m.MemberID, m.ClientHost, n)
	}
	return out
}

// describeGroup asks the broker about group (the zero value on error).
func (c *cluster) describeGroup(group string) kadm.DescribedGroup {
	c.t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.brokers))
	if err != nil {
		c.t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	gs, err := kadm.NewClient(cl).DescribeGroups(ctx, group)
	if err != nil {
		return kadm.DescribedGroup{Group: group, Err: err}
	}
	return gs[group]
}

// recorder keeps every event of the lifecycle and workers topics.
// recorder is the shared Kafka event recorder (testenv.Recorder).
type recorder = testenv.Recorder

// record records the cluster's workers topic and its lifecycle topics.
func (c *cluster) record() *recorder {
	c.t.Helper()
	topics := []string{c.topics.Workers()}
	for _, et := range []schema.EventType{schema.EventEnqueued, schema.EventStarted, schema.EventCompleted, schema.EventFailed, schema.EventDLQ, schema.EventCancelled} {
		topics = append(topics, c.topics.Lifecycle(et))
	}
	return testenv.Record(c.t, []string{c.brokers}, topics...)
}

// of returns the recorded lifecycle events of job id, of type T.
func eventsOf[T schema.Lifecycle](r *recorder, id string) []T {
	var out []T
	for _, ev := range r.Events() {
		if d, ok := ev.Data.(T); ok && d.Ref().JobID == id {
			out = append(out, d)
		}
	}
	return out
}

// startedBy is the set of jobs with a started event from worker.
func startedBy(r *recorder, worker string) map[string]bool {
	out := map[string]bool{}
	for _, ev := range r.Events() {
		if s, ok := ev.Data.(schema.Started); ok && s.WorkerID == worker {
			out[s.JobID] = true
		}
	}
	return out
}

// account waits until every job has reached a terminal status in the
// status projection, checks it is want, and that each succeeded job has
// exactly one completed event on the topic. It returns the final rows.
func (c *cluster) account(ids []string, want string, d time.Duration) map[string]map[string]any {
	c.t.Helper()
	rows := map[string]map[string]any{}
	pending := append([]string(nil), ids...)
	waitFor(c.t, d, fmt.Sprintf("%d jobs terminal", len(ids)), func() bool {
		var still []string
		for _, id := range pending {
			j := c.job(id)
			if s, _ := j["status"].(string); schema.Status(s).Terminal() {
				rows[id] = j
			} else {
				still = append(still, id)
			}
		}
		pending = still
		return len(pending) == 0
	})
	time.Sleep(time.Second) // let a duplicate completion show up
	completed := map[string]int{}
	for _, ev := range c.rec.Events() {
		if cm, ok := ev.Data.(schema.Completed); ok {
			completed[cm.JobID]++
		}
	}
	bad := 0
	for _, id := range ids {
		if s := rows[id]["status"]; s != want {
			c.t.Errorf("job %s: status %v, want %s (%v)", id, s, want, rows[id])
			bad++
		}
		if want == string(schema.StatusSucceeded) && completed[id] != 1 {
			c.t.Errorf("job %s completed %d times", id, completed[id])
			bad++
		}
		if bad > 20 {
			c.t.Fatal("too many errors")
		}
	}
	return rows
}

// waitFor is testenv.WaitFor under the short name these tests use.
var waitFor = testenv.WaitFor

func num(v any) int {
	switch x := v.(type) {
	case float64:
		return int(x)
	case string:
		n, _ := strconv.Atoi(x)
		return n
	}
	return 0
}
