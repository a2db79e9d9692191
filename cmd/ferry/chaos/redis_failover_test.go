package chaos_test

import (
	"context"
	"io"
	"net"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestRedisFailoverLostWrites is issue 17 item 3: Redis fails over to a
// replica that missed the last writes. Two real redis-server processes, a
// primary and its replica; the services reach Redis through one address (a
// TCP proxy standing in for a managed Redis endpoint or a virtual IP that
// moves on failover). Under load the replica's link to the primary breaks
// while writes go on, then the replica is promoted (REPLICAOF NO ONE) and
// the address moves to it, dropping every connection. The scheduler must
// notice that Redis went back in time (its checkpoint is behind
// Postgres's), rebuild its state from the log, and every job must still
// succeed exactly once.
func TestRedisFailoverLostWrites(t *testing.T) {
	primary := startRedis(t, "primary")
	replica := startRedis(t, "replica")
	replica.do(t, "REPLICAOF", "127.0.0.1", primary.port)
	endpoint := newTCPProxy(t, primary.addr)

	c := newCluster(t, map[string]string{
		"FERRY_REDIS_URL":                     "redis://" + endpoint.addr + "/0",
		"FERRY_SCHEDULER_CHECKPOINT_INTERVAL": "300ms",
	})
	c.redisURL = "redis://" + endpoint.addr + "/0"
	c.startAPI()
	sched := c.start("scheduler", "scheduler", nil)
	c.start("worker", "worker", map[string]string{"FERRY_WORKER_CONCURRENCY": "16"})

	l := c.startLoad(4, 150*time.Millisecond, c.apiBase)
	waitFor(t, 60*time.Second, "jobs completing under load", func() bool { return c.rec.Count(isCompleted) >= 40 })
	waitFor(t, 30*time.Second, "the replica in sync", func() bool { return replica.inSync(t, primary) })

	// The replica loses its primary (REPLICAOF an address nobody answers
	// keeps its data and stops replication) while jobs go on.
	replica.do(t, "REPLICAOF", "127.0.0.1", freePort(t))
	lag := c.rec.Count(isCompleted)
	waitFor(t, 60*time.Second, "writes the replica misses", func() bool { return c.rec.Count(isCompleted) >= lag+60 })
	if n := logCount(sched, "Redis went back in time"); n != 0 {
		t.Fatalf("a rewind before the failover: %d", n)
	}

	replica.do(t, "REPLICAOF", "NO", "ONE")
	endpoint.moveTo(replica.addr)
	primary.do(t, "SHUTDOWN", "NOSAVE")
	waitFor(t, 60*time.Second, "the scheduler noticing the lost writes", func() bool {
		return logCount(sched, "Redis went back in time") >= 1 && logCount(sched, "scheduler state rebuilt") >= 1
	})
	time.Sleep(3 * time.Second) // load on the promoted replica
	ids := l.halt()
	c.account(ids, "succeeded", 150*time.Second)
	c.onceEach(ids)
	if n := logCount(sched, "Redis went back in time"); n != 1 {
		t.Errorf("rewound %d times, want once", n)
	}
	t.Logf("%d jobs across the failover (%d batches resent)", len(ids), l.resends)
}

// redisServer is a redis-server child process without persistence.
type redisServer struct {
	name, addr, port string
	rdb              *redis.Client
}

func startRedis(t *testing.T, name string) *redisServer {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("redis-server is needed (scripts/install-deps.sh installs it): %v", err)
	}
	port := freePort(t)
	cmd := exec.Command(bin, "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", t.TempDir(), "--repl-diskless-sync", "yes", "--repl-diskless-sync-delay", "0")
	cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	r := &redisServer{name: name, addr: "127.0.0.1:" + port, port: port}
	r.rdb = redis.NewClient(&redis.Options{Addr: r.addr})
	t.Cleanup(func() { r.rdb.Close() })
	waitFor(t, 20*time.Second, name+" redis answering", func() bool { return r.rdb.Ping(context.Background()).Err() == nil })
	return r
}

// do runs one command, failing the test on an error; SHUTDOWN's closed
// connection is its success.
func (r *redisServer) do(t *testing.T, args ...string) {
	t.Helper()
	a := make([]any, len(args))
	for i, s := range args {
		a[i] = s
	}
	err := r.rdb.Do(context.Background(), a...).Err()
	if err != nil && !(args[0] == "SHUTDOWN" && (err == io.EOF || strings.Contains(err.Error(), "connection"))) {
		t.Fatalf("%s: %v: %v", r.name, args, err)
	}
}

// inSync reports whether r, a replica of primary, has every write primary
// has acknowledged so far.
func (r *redisServer) inSync(t *testing.T, primary *redisServer) bool {
	t.Helper()
	off := func(s *redisServer, field string) string {
		info, err := s.rdb.Info(context.Background(), "replication").Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(info, "\r\n") {
			if v, ok := strings.CutPrefix(line, field+":"); ok {
				return v
			}
		}
		return ""
	}
	return off(r, "master_link_status") == "up" && off(r, "slave_repl_offset") == off(primary, "master_repl_offset")
}

func freePort(t *testing.T) string {
	_, port, _ := net.SplitHostPort(freeAddr(t))
	return port
}

// tcpProxy forwards connections to a target it can move, closing every
// connection of the old target when it does.
type tcpProxy struct {
	addr string
	ln   net.Listener

	mu     sync.Mutex
	target string
	conns  map[net.Conn]bool
}

func newTCPProxy(t *testing.T, target string) *tcpProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &tcpProxy{addr: ln.Addr().String(), ln: ln, target: target, conns: map[net.Conn]bool{}}
	go p.serve()
	t.Cleanup(func() { ln.Close(); p.dropAll() })
	return p
}

func (p *tcpProxy) serve() {
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		target := p.target
		p.mu.Unlock()
		out, err := net.DialTimeout("tcp", target, 5*time.Second)
		if err != nil {
			in.Close()
			continue
		}
		p.track(in, out)
		go p.pipe(in, out)
		go p.pipe(out, in)
	}
}

func (p *tcpProxy) track(conns ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range conns {
		p.conns[c] = true
	}
}

func (p *tcpProxy) pipe(dst, src net.Conn) {
	_, _ = io.Copy(dst, src)
	dst.Close()
	src.Close()
}

// moveTo sends new connections to target and drops the existing ones, as
// a failover of a Redis endpoint does.
func (p *tcpProxy) moveTo(target string) {
	p.mu.Lock()
	p.target = target
	p.mu.Unlock()
	p.dropAll()
}

func (p *tcpProxy) dropAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
	}
	p.conns = map[net.Conn]bool{}
}
