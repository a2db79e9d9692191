package devstack

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferryhq/ferry/platform/redisx"
)

// helperEnv makes the test binary act as a parent that starts a server and
// is then killed; see TestChildDiesWithParent.
const helperEnv = "DEVSTACK_TEST_HELPER_DIR"

// kafkaChildEnv makes the test binary a broker child (ServeKafka) with its
// data in the directory it names; see TestKafkaProcess.
const kafkaChildEnv = "DEVSTACK_TEST_KAFKA_CHILD_DIR"

func TestMain(m *testing.M) {
	if dir := os.Getenv(kafkaChildEnv); dir != "" {
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
		err := ServeKafka(ctx, KafkaConfig{Addr: "127.0.0.1:0", DataDir: dir, Topics: []string{"seeded"}})
		stop()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	if dir := os.Getenv(helperEnv); dir != "" {
		p, _, err := StartRedis(context.Background(), RedisConfig{DataDir: dir})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Println(p.PID())
		time.Sleep(time.Minute) // the test kills us
		os.Exit(1)
	}
	os.Exit(m.Run())
}

// reachableTempDir returns a temporary directory that the postgres OS user
// can enter (t.TempDir is 0700 and root-owned when tests run as root).
func reachableTempDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "devstack-test-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func stop(t *testing.T, p *Process) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := p.Stop(ctx); err != nil {
		t.Fatalf("stop %s: %v", p.Name(), err)
	}
	if alive(p.PID()) {
		t.Fatalf("%s pid %d still alive after Stop", p.Name(), p.PID())
	}
}

// alive reports whether pid is a running process (not gone, not a zombie).
func alive(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the parenthesised command name.
	s := string(stat)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] != 'Z' && s[i+2] != 'X'
	}
	return true
}

func TestPostgresInitRestartAndStop(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dataDir := filepath.Join(reachableTempDir(t), "pg")

	p, url, err := StartPostgres(ctx, PostgresConfig{DataDir: dataDir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Stop(context.Background()) })
	if !strings.HasPrefix(url, "postgres://postgres@127.0.0.1:") || !strings.Contains(url, "/ferry?") {
		t.Fatalf("url = %q", url)
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	var listen, fsync, syncCommit, fullPages, buffers string
	if err := conn.QueryRow(ctx, `SELECT current_setting('listen_addresses'), current_setting('fsync'),
		current_setting('synchronous_commit'), current_setting('full_page_writes'), current_setting('shared_buffers')`).
		Scan(&listen, &fsync, &syncCommit, &fullPages, &buffers); err != nil {
		t.Fatal(err)
	}
	if listen != "127.0.0.1" || fsync != "on" || syncCommit != "on" || fullPages != "on" || buffers != "256MB" {
		t.Fatalf("listen_addresses=%q fsync=%q synchronous_commit=%q full_page_writes=%q shared_buffers=%q",
			listen, fsync, syncCommit, fullPages, buffers)
	}
	// Debian's server ships pg_stat_statements: preloaded, its view counts
	// the statements once the extension is created.
	bin, err := postgresBinDir("")
	if err != nil {
		t.Fatal(err)
	}
	if statStatementsInstalled(bin) {
		var calls int64
		if _, err := conn.Exec(ctx, "CREATE EXTENSION pg_stat_statements"); err != nil {
			t.Fatal(err)
		}
		if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_stat_statements").Scan(&calls); err != nil {
			t.Fatalf("pg_stat_statements not loaded: %v", err)
		}
	}
	if _, err := conn.Exec(ctx, "CREATE TABLE kept (v text); INSERT INTO kept VALUES ('across restarts')"); err != nil {
		t.Fatal(err)
	}
	// An open client must not hold up Stop.
	stop(t, p)
	conn.Close(ctx)

	if socks, _ := filepath.Glob(filepath.Join(dataDir, ".s.PGSQL.*")); len(socks) > 0 {
		t.Fatalf("unix socket left behind after stop: %v", socks)
	}

	p2, url2, err := StartPostgres(ctx, PostgresConfig{DataDir: dataDir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p2.Stop(context.Background()) })
	conn, err = pgx.Connect(ctx, url2)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var v string
	if err := conn.QueryRow(ctx, "SELECT v FROM kept").Scan(&v); err != nil {
		t.Fatalf("data did not survive a restart: %v", err)
	}
	stop(t, p2)
}

func TestPostgresFixedPortAndSettings(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	port, err := FreePort()
	if err != nil {
		t.Fatal(err)
	}
	p, url, err := StartPostgres(ctx, PostgresConfig{
		DataDir:  filepath.Join(reachableTempDir(t), "pg"),
		Port:     port,
		Database: "other",
		Settings: map[string]string{"max_connections": "42"},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Stop(context.Background()) })
	if want := fmt.Sprintf("postgres://postgres@127.0.0.1:%d/other?sslmode=disable", port); url != want {
		t.Fatalf("url = %q, want %q", url, want)
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var mc string
	if err := conn.QueryRow(ctx, "SHOW max_connections").Scan(&mc); err != nil || mc != "42" {
		t.Fatalf("max_connections = %q, %v", mc, err)
	}

	// A second server cannot take the port: the error carries the log.
	_, _, err = StartPostgres(ctx, PostgresConfig{DataDir: filepath.Join(reachableTempDir(t), "pg"), Port: port})
	if err == nil || !strings.Contains(err.Error(), "exited during startup") {
		t.Fatalf("second server on a taken port: err = %v", err)
	}
	stop(t, p)
}

func TestRedisPersistsAcrossRestart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dataDir := filepath.Join(t.TempDir(), "redis")

	p, url, err := StartRedis(ctx, RedisConfig{DataDir: dataDir, Databases: 64})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Stop(context.Background()) })
	if !strings.HasPrefix(url, "redis://127.0.0.1:") || !strings.HasSuffix(url, "/0") {
		t.Fatalf("url = %q", url)
	}
	opts, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	opts.DB = 63 // exists only with Databases: 64
	c := redis.NewClient(opts)
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	cfg, err := c.ConfigGet(ctx, "appendonly").Result()
	if err != nil || cfg["appendonly"] != "yes" {
		t.Fatalf("appendonly = %v, %v", cfg, err)
	}
	for name, want := range map[string]int{
		"hash-max-listpack-value":     redisx.HashMaxListpackValue,
		"auto-aof-rewrite-percentage": redisx.AOFRewritePercentage,
	} {
		cfg, err = c.ConfigGet(ctx, name).Result()
		if err != nil || cfg[name] != strconv.Itoa(want) {
			t.Fatalf("%s = %v, %v; want %d", name, cfg, err, want)
		}
	}
	c.Close()
	stop(t, p)

	p2, url2, err := StartRedis(ctx, RedisConfig{DataDir: dataDir, Databases: 64})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p2.Stop(context.Background()) })
	opts, _ = redis.ParseURL(url2)
	opts.DB = 63
	c = redis.NewClient(opts)
	defer c.Close()
	if v, err := c.Get(ctx, "k").Result(); err != nil || v != "v" {
		t.Fatalf("after restart: %q, %v", v, err)
	}
	stop(t, p2)
}

func TestRedisTakenPort(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p, url, err := StartRedis(ctx, RedisConfig{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Stop(context.Background()) })
	opts, _ := redis.ParseURL(url)
	_, port, _ := strings.Cut(opts.Addr, ":")
	n, _ := strconv.Atoi(port)
	_, _, err = StartRedis(ctx, RedisConfig{DataDir: t.TempDir(), Port: n})
	if err == nil || !strings.Contains(err.Error(), "exited during startup") {
		t.Fatalf("second server on a taken port: err = %v", err)
	}
	stop(t, p)
}

func TestStopKillsAProcessThatIgnoresItsSignal(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p, err := startProcess(processSpec{
		name:    "stubborn",
		path:    "/bin/sh",
		args:    []string{"-c", `trap "" TERM; echo ready; while :; do sleep 0.1; done`},
		dir:     dir,
		stopSig: syscall.SIGTERM,
		logPath: filepath.Join(dir, "log"),
	})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(logTail(p.LogPath(), 0), "ready") {
		if time.Now().After(deadline) {
			t.Fatal("helper never became ready")
		}
		time.Sleep(10 * time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	err = p.Stop(ctx)
	if err == nil || !strings.Contains(err.Error(), "was killed") {
		t.Fatalf("Stop = %v, want a killed error", err)
	}
	if alive(p.PID()) {
		t.Fatal("still alive")
	}
	if err := p.Stop(context.Background()); err != nil {
		t.Fatalf("second Stop = %v", err)
	}
}

// TestChildDiesWithParent kills a parent that started redis-server without
// stopping it; the parent-death signal must take the server down.
func TestChildDiesWithParent(t *testing.T) {
	t.Parallel()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+t.TempDir())
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		_ = cmd.Process.Kill()
		t.Fatalf("helper: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		_ = cmd.Process.Kill()
		t.Fatalf("helper printed %q", line)
	}
	if !alive(pid) {
		t.Fatal("redis not running")
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	deadline := time.Now().Add(15 * time.Second)
	for alive(pid) {
		if time.Now().After(deadline) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("redis pid %d outlived its killed parent", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestKafkaRandomPortRoundTrip(t *testing.T) {
	t.Parallel()
	k, err := StartKafka(KafkaConfig{Addr: "127.0.0.1:0", Partitions: 3})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k.Stop(context.Background()) })
	if !strings.HasPrefix(k.Addr(), "127.0.0.1:") || strings.HasSuffix(k.Addr(), ":0") {
		t.Fatalf("Addr = %q", k.Addr())
	}
	produce(t, k.Addr(), "t1", "a", "b", "c")
	if got := consume(t, k.Addr(), "t1", 3); strings.Join(got, ",") != "a,b,c" {
		t.Fatalf("consumed %v", got)
	}
}

func TestKafkaDataDirSurvivesRestart(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "kafka")
	cfg := KafkaConfig{Addr: "127.0.0.1:0", DataDir: dir, Topics: []string{"seeded"}}
	k, err := StartKafka(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := StartKafka(cfg); err == nil || !strings.Contains(err.Error(), "in use") {
		t.Fatalf("second cluster on the same DataDir: err = %v", err)
	}
	produce(t, k.Addr(), "seeded", "x", "y")
	if err := k.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}

	k, err = StartKafka(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k.Stop(context.Background()) })
	if got := consume(t, k.Addr(), "seeded", 2); strings.Join(got, ",") != "x,y" {
		t.Fatalf("after restart consumed %v", got)
	}
}

// TestKafkaSeedsTopicsWithTheirPartitions: seeded topics take their own
// partition count where TopicPartitions gives one, Partitions otherwise
// (how `ferry dev` creates one-partition lifecycle topics beside eight-partition
// dispatch topics).
func TestKafkaSeedsTopicsWithTheirPartitions(t *testing.T) {
	t.Parallel()
	k, err := StartKafka(KafkaConfig{Addr: "127.0.0.1:0", Partitions: 1,
		Topics: []string{"life", "dispatch"}, TopicPartitions: map[string]int{"dispatch": 8}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k.Stop(context.Background()) })
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	details, err := kadm.NewClient(cl).ListTopics(context.Background(), "life", "dispatch")
	if err != nil {
		t.Fatal(err)
	}
	for topic, want := range map[string]int{"life": 1, "dispatch": 8} {
		if got := len(details[topic].Partitions); got != want {
			t.Errorf("%s: %d partitions, want %d", topic, got, want)
		}
	}
}

func TestKafkaNoAutoCreate(t *testing.T) {
	t.Parallel()
	k, err := StartKafka(KafkaConfig{Addr: "127.0.0.1:0", DisableAutoCreateTopics: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k.Stop(context.Background()) })
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.Addr()), kgo.AllowAutoTopicCreation(), kgo.RecordDeliveryTimeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "missing", Value: []byte("v")}).FirstErr(); err == nil {
		t.Fatal("produce to a missing topic succeeded with auto creation disabled")
	}
}

func produce(t *testing.T, addr, topic string, values ...string) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.AllowAutoTopicCreation(), kgo.RequiredAcks(kgo.AllISRAcks()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, v := range values {
		// One key, one partition: consumption keeps this order.
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Key: []byte("k"), Value: []byte(v)}).FirstErr(); err != nil {
			t.Fatalf("produce %s: %v", v, err)
		}
	}
}

func consume(t *testing.T, addr, topic string, n int) []string {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var got []string
	for len(got) < n {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("consumed %v before %v", got, err)
		}
		fs.EachError(func(topic string, p int32, err error) { t.Errorf("fetch %s/%d: %v", topic, p, err) })
		fs.EachRecord(func(r *kgo.Record) { got = append(got, string(r.Value)) })
	}
	return got
}
