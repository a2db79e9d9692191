package projection_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferryhq/ferry/events/schema"
	"github.com/ferryhq/ferry/platform/kafkax"
	"github.com/ferryhq/ferry/platform/pgstore"
	"github.com/ferryhq/ferry/platform/projection"
	"github.com/ferryhq/ferry/platform/quarantine"
)

// A projection of these tests is a table items_<name> filled by tableApply
// under the group test-<name>: n counts how often a key was applied.

func projGroup(name string) string { return "test-" + name }

func (f *fixture) createTables(names ...string) {
	f.t.Helper()
	for _, n := range names {
		if err := createTable(context.Background(), f.pool, n); err != nil {
			f.t.Fatal(err)
		}
	}
}

func createTable(ctx context.Context, pool *pgxpool.Pool, name string) error {
	_, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS items_`+name+` (k text PRIMARY KEY, v text NOT NULL, n int NOT NULL DEFAULT 1)`)
	return err
}

// tableApply writes a batch into items_<name> in one statement; unless
// lenient, a NUL byte fails the statement (poison), as in fixture.apply.
func tableApply(name string, lenient bool) projection.ApplyFunc {
	return func(ctx context.Context, tx pgx.Tx, recs []*kgo.Record) error {
		keys, vals := make([]string, 0, len(recs)), make([]string, 0, len(recs))
		for _, r := range recs {
			v := string(r.Value)
			if lenient {
				v = strings.ReplaceAll(v, "\x00", `\u0000`)
			}
			keys, vals = append(keys, string(r.Key)), append(vals, v)
		}
		_, err := tx.Exec(ctx, `INSERT INTO items_`+name+` (k, v) SELECT * FROM unnest($1::text[], $2::text[])
			ON CONFLICT (k) DO UPDATE SET n = items_`+name+`.n + 1, v = EXCLUDED.v`, keys, vals)
		return err
	}
}

func (f *fixture) table(name string) map[string]int {
	f.t.Helper()
	rows, err := f.pool.Query(context.Background(), `SELECT k, n FROM items_`+name)
	if err != nil {
		f.t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (kv struct {
		k string
		n int
	}, err error) {
		err = r.Scan(&kv.k, &kv.n)
		return kv, err
	})
	if err != nil {
		f.t.Fatal(err)
	}
	m := map[string]int{}
	for _, kv := range out {
		m[kv.k] = kv.n
	}
	return m
}

// exactlyOnce fails unless items_<name> holds exactly the keys of kvs, each
// applied once.
func (f *fixture) exactlyOnce(name string, kvs [][2]string) {
	f.t.Helper()
	got := f.table(name)
	if len(got) != len(kvs) {
		f.t.Fatalf("items_%s has %d keys, want %d", name, len(got), len(kvs))
	}
	for _, kv := range kvs {
		if got[kv[0]] != 1 {
			f.t.Fatalf("items_%s: %s applied %d times", name, kv[0], got[kv[0]])
		}
	}
}

// sharedMember is a projection the tests add to a Shared reader.
type sharedMember struct {
	name  string
	apply projection.ApplyFunc
}

// runShared runs a Shared reader with members until the returned stop is
// called (the services' stand-ins for Run too, as the stack does).
func runShared(t *testing.T, pool *pgxpool.Pool, brokers, topic string, members ...sharedMember) (stop func()) {
	t.Helper()
	sh := projection.NewShared(pool, projection.SharedConfig{
		Kafka: kafkax.Config{Brokers: []string{brokers}, ClientID: "shared"}, FetchMaxWait: 10 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	errs := make(chan error, len(members)+1)
	for _, m := range members {
		run, err := sh.Add(projection.Config{Group: projGroup(m.name), Topics: []string{topic}, MaxBatch: 40}, m.apply)
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() { errs <- run(ctx) })
	}
	wg.Go(func() { errs <- sh.Run(ctx) })
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			wg.Wait()
			close(errs)
			for err := range errs {
				if err != nil {
					t.Errorf("shared reader: %v", err)
				}
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// runSeparate runs name's projection with its own Run.
func (f *fixture) runSeparate(name string, apply projection.ApplyFunc) (stop func()) {
	return f.runGroup(projGroup(name), 40, apply)
}

// keys returns n pairs named prefix-0000…
func keys(prefix string, n int) [][2]string {
	out := make([][2]string, n)
	for i := range out {
		out[i] = [2]string{fmt.Sprintf("%s-%04d", prefix, i), "v"}
	}
	return out
}

// TestSharedPoisonParkedForOneProjection: a record one projection rejects
// is parked under that projection's group only; the projection that
// accepts it applies it, and both apply everything else exactly once.
func TestSharedPoisonParkedForOneProjection(t *testing.T) {
	f := newFixture(t)
	f.createTables("strict", "lenient")
	kvs := batch(300, 137)
	f.produce(kvs...)
	runShared(t, f.pool, f.brokers, f.topic,
		sharedMember{"strict", tableApply("strict", false)}, sharedMember{"lenient", tableApply("lenient", true)})
	st := quarantine.NewStore(f.pool)
	parkedOf := func(name string) []quarantine.Record {
		rs, err := st.List(context.Background(), quarantine.Filter{Group: projGroup(name), Limit: 10})
		if err != nil {
			t.Fatal(err)
		}
		return rs
	}
	waitFor(t, 60*time.Second, "299 strict items, 300 lenient ones and a parked record", func() bool {
		return len(f.table("strict")) == 299 && len(f.table("lenient")) == 300 && len(parkedOf("strict")) == 1
	})
	f.exactlyOnce("lenient", kvs)
	f.exactlyOnce("strict", append(kvs[:137:137], kvs[138:]...))
	if p := parkedOf("strict")[0]; string(p.Key) != "k-137" || p.Status != quarantine.StatusParked {
		t.Fatalf("parked %+v", p)
	}
	if rs := parkedOf("lenient"); len(rs) != 0 {
		t.Fatalf("the lenient projection parked %+v", rs)
	}
}

// TestSharedAndSeparateSwitch: a projection moves between a Shared reader
// and its own Run, and another joins the shared reader far behind it; each
// resumes from its own stored offsets: nothing is lost or applied twice.
func TestSharedAndSeparateSwitch(t *testing.T) {
	f := newFixture(t)
	f.createTables("a", "b")
	first, second, third := keys("first", 150), keys("second", 150), keys("third", 150)

	f.produce(first...)
	stop := runShared(t, f.pool, f.brokers, f.topic, sharedMember{"a", tableApply("a", false)})
	waitFor(t, 60*time.Second, "the first records in a", func() bool { return len(f.table("a")) == 150 })
	stop()

	f.produce(second...)
	stop = f.runSeparate("a", tableApply("a", false))
	waitFor(t, 60*time.Second, "the second records in a", func() bool { return len(f.table("a")) == 300 })
	stop()

	// b starts from nothing: the reader seeks to the start for it, and a
	// skips what it stored.
	f.produce(third...)
	stop = runShared(t, f.pool, f.brokers, f.topic, sharedMember{"a", tableApply("a", false)}, sharedMember{"b", tableApply("b", false)})
	waitFor(t, 60*time.Second, "everything in a and b", func() bool { return len(f.table("a")) == 450 && len(f.table("b")) == 450 })
	stop()
	all := append(append(first, second...), third...)
	f.exactlyOnce("a", all)
	f.exactlyOnce("b", all)

	// And back to separate for b: it has nothing left to apply.
	fourth := keys("fourth", 20)
	f.produce(fourth...)
	f.runSeparate("b", tableApply("b", false))
	waitFor(t, 60*time.Second, "the fourth records in b", func() bool { return len(f.table("b")) == 470 })
	f.exactlyOnce("b", append(all, fourth...))
}

// TestSharedSlowProjectionDoesNotStopOthers: while one projection's
// transactions fail (a transient error, retried), the other applies every
// new record; once the failure ends the first catches up, exactly once.
func TestSharedSlowProjectionDoesNotStopOthers(t *testing.T) {
	f := newFixture(t)
	f.createTables("failing", "healthy")
	var failing atomic.Bool
	failing.Store(true)
	flaky := func(ctx context.Context, tx pgx.Tx, recs []*kgo.Record) error {
		if failing.Load() {
			return &pgconn.PgError{Code: "08006", Message: "connection failure"}
		}
		return tableApply("failing", false)(ctx, tx, recs)
	}
	runShared(t, f.pool, f.brokers, f.topic, sharedMember{"failing", flaky}, sharedMember{"healthy", tableApply("healthy", false)})
	var all [][2]string
	for round := range 3 {
		kvs := keys(fmt.Sprintf("round%d", round), 30)
		all = append(all, kvs...)
		f.produce(kvs...)
		waitFor(t, 60*time.Second, "the healthy projection to apply the round", func() bool { return len(f.table("healthy")) == len(all) })
	}
	if n := len(f.table("failing")); n != 0 {
		t.Fatalf("the failing projection applied %d records", n)
	}
	failing.Store(false)
	waitFor(t, 60*time.Second, "the failing projection to catch up", func() bool { return len(f.table("failing")) == len(all) })
	f.exactlyOnce("failing", all)
	f.exactlyOnce("healthy", all)
}

// The crash test runs the shared reader in a child process (this test
// binary, with sharedChildEnv set to its settings) and kills it.
const sharedChildEnv = "FERRY_TEST_SHARED_READER"

type sharedChildConfig struct {
	Postgres, Brokers, Topic string
	Names                    []string
}

// sharedChild runs a Shared reader with cfg's projections until killed.
func sharedChild(raw string) int {
	var cfg sharedChildConfig
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	ctx := context.Background()
	pool, err := pgstore.Open(ctx, cfg.Postgres, 8)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	sh := projection.NewShared(pool, projection.SharedConfig{
		Kafka: kafkax.Config{Brokers: []string{cfg.Brokers}, ClientID: "shared-child"}, FetchMaxWait: 10 * time.Millisecond})
	for _, n := range cfg.Names {
		apply := tableApply(n, false)
		// Slowed, so the stream takes seconds and the kill lands inside it.
		slowed := func(ctx context.Context, tx pgx.Tx, recs []*kgo.Record) error {
			time.Sleep(10 * time.Millisecond)
			return apply(ctx, tx, recs)
		}
		if _, err := sh.Add(projection.Config{Group: projGroup(n), Topics: []string{cfg.Topic}, MaxBatch: 25}, slowed); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
	}
	if err := sh.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// startSharedChild starts the child process reading for names.
func (f *fixture) startSharedChild(pgURL string, names ...string) *exec.Cmd {
	f.t.Helper()
	raw, err := json.Marshal(sharedChildConfig{Postgres: pgURL, Brokers: f.brokers, Topic: f.topic, Names: names})
	if err != nil {
		f.t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), sharedChildEnv+"="+string(raw))
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return cmd
}

// TestSharedKilledMidStream: the process of a Shared reader is killed
// (SIGKILL) while its projections apply a stream of records in many small
// transactions; a new process resumes each from its own stored offsets and
// every record ends applied exactly once in every projection.
func TestSharedKilledMidStream(t *testing.T) {
	f := newFixture(t)
	pgURL := f.pool.Config().ConnString()
	names := []string{"x", "y", "z"}
	f.createTables(names...)
	var all [][2]string
	produceRounds := func(from, to int) {
		for round := from; round < to; round++ {
			kvs := keys(fmt.Sprintf("r%02d", round), 200)
			all = append(all, kvs...)
			f.produce(kvs...)
		}
	}
	produceRounds(0, 12)
	child := f.startSharedChild(pgURL, names...)
	waitFor(t, 120*time.Second, "the first records applied", func() bool { return len(f.table("x")) > 0 })
	if err := child.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = child.Wait()
	if applied := len(f.table("x")); applied >= len(all) {
		t.Fatalf("the kill did not land mid-stream: %d of %d applied", applied, len(all))
	}
	produceRounds(12, 15)
	f.startSharedChild(pgURL, names...)
	waitFor(t, 120*time.Second, "every record in every projection", func() bool {
		for _, n := range names {
			if len(f.table(n)) != len(all) {
				return false
			}
		}
		return true
	})
	for _, n := range names {
		f.exactlyOnce(n, all)
	}
}

// TestSharedDecodesOnce: two projections of a Shared reader that decode
// with projection.Decode get the same decoded event (its tags slice is one
// array), while a projection of its own decodes its own copy.
func TestSharedDecodesOnce(t *testing.T) {
	f := newFixture(t)
	var recs [][2]string
	for i := range 20 {
		id := fmt.Sprintf("job_%02d", i)
		rec, err := schema.NewRecord(f.topic, "ferry/api", schema.Enqueued{
			JobRef:    schema.JobRef{JobID: id, TenantID: "acme", Attempt: 1},
			Job:       schema.JobSpec{Type: "noop", Queue: "default", Priority: 5, MaxAttempts: 1, Pool: schema.PoolShort, Tags: []string{"t"}},
			CreatedAt: time.Now().UTC(), RunAt: time.Now().UTC(), Reason: schema.ReasonSubmitted,
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := f.client().ProduceSync(context.Background(), rec).FirstErr(); err != nil {
			t.Fatal(err)
		}
		recs = append(recs, [2]string{id, ""})
	}
	// tagsOf records, per projection, where each job's decoded tags live.
	var mu sync.Mutex
	tagsOf := map[string]map[string]*string{}
	decoding := func(name string) projection.ApplyFunc {
		return func(ctx context.Context, _ pgx.Tx, batch []*kgo.Record) error {
			mu.Lock()
			defer mu.Unlock()
			if tagsOf[name] == nil {
				tagsOf[name] = map[string]*string{}
			}
			for _, r := range batch {
				ev, err := projection.Decode(ctx, r)
				if err != nil {
					return err
				}
				tagsOf[name][ev.Subject] = &ev.Data.(schema.Enqueued).Job.Tags[0]
			}
			return nil
		}
	}
	runShared(t, f.pool, f.brokers, f.topic, sharedMember{"one", decoding("one")}, sharedMember{"two", decoding("two")})
	f.runSeparate("own", decoding("own"))
	seen := func(name string) int { mu.Lock(); defer mu.Unlock(); return len(tagsOf[name]) }
	waitFor(t, 60*time.Second, "every event decoded by the three projections", func() bool {
		return seen("one") == len(recs) && seen("two") == len(recs) && seen("own") == len(recs)
	})
	mu.Lock()
	defer mu.Unlock()
	for _, r := range recs {
		id := r[0]
		if tagsOf["one"][id] != tagsOf["two"][id] {
			t.Fatalf("%s decoded twice by the shared reader's projections", id)
		}
		if tagsOf["own"][id] == tagsOf["one"][id] {
			t.Fatalf("%s: a projection of its own shares the shared reader's event", id)
		}
	}
}

// TestSharedReplicasRebalance: two processes' Shared readers in one group
// (two all-in-one replicas) while records stream in: one stops, then comes
// back, so partitions move both ways while batches are in hand (each
// projection's transactions are slowed); every record is applied exactly
// once in every projection.
func TestSharedReplicasRebalance(t *testing.T) {
	f := newFixture(t)
	f.createTables("p", "q")
	slow := func(name string) projection.ApplyFunc {
		apply := tableApply(name, false)
		return func(ctx context.Context, tx pgx.Tx, recs []*kgo.Record) error {
			time.Sleep(20 * time.Millisecond)
			return apply(ctx, tx, recs)
		}
	}
	members := []sharedMember{{"p", slow("p")}, {"q", slow("q")}}
	var all [][2]string
	produce := func(round int) {
		kvs := keys(fmt.Sprintf("r%02d", round), 100)
		all = append(all, kvs...)
		f.produce(kvs...)
	}
	stopA := runShared(t, f.pool, f.brokers, f.topic, members...)
	runShared(t, f.pool, f.brokers, f.topic, members...)
	for round := range 6 {
		produce(round)
	}
	waitFor(t, 60*time.Second, "the first records applied", func() bool { return len(f.table("p")) > 0 })
	stopA() // its partitions move to B
	for round := 6; round < 12; round++ {
		produce(round)
	}
	runShared(t, f.pool, f.brokers, f.topic, members...) // and some move back
	for round := 12; round < 18; round++ {
		produce(round)
	}
	waitFor(t, 120*time.Second, "every record in p and q", func() bool {
		return len(f.table("p")) == len(all) && len(f.table("q")) == len(all)
	})
	f.exactlyOnce("p", all)
	f.exactlyOnce("q", all)
}

// TestSharedGathersWaitingBatches: batches that waited in a projection's
// buffer while it applied are applied together in its next transaction
// (up to its MaxBatch), as a projection's own Run applies everything its
// client fetched meanwhile.
func TestSharedGathersWaitingBatches(t *testing.T) {
	f := newFixture(t)
	f.createTables("busy", "other")
	release := make(chan struct{})
	var mu sync.Mutex
	var calls []int // records per apply call of busy
	busy := func(ctx context.Context, tx pgx.Tx, recs []*kgo.Record) error {
		mu.Lock()
		first := len(calls) == 0
		calls = append(calls, len(recs))
		mu.Unlock()
		if first {
			<-release
		}
		return tableApply("busy", false)(ctx, tx, recs)
	}
	runShared(t, f.pool, f.brokers, f.topic, sharedMember{"busy", busy}, sharedMember{"other", tableApply("other", false)})
	var all [][2]string
	for round := range 3 { // fewer than its buffer holds, even if a round comes in two polls
		kvs := keys(fmt.Sprintf("round%d", round), 8)
		all = append(all, kvs...)
		f.produce(kvs...)
		// Each round is handed out on its own: the other projection has it.
		waitFor(t, 60*time.Second, "the other projection to apply the round", func() bool { return len(f.table("other")) == len(all) })
	}
	close(release)
	waitFor(t, 60*time.Second, "the busy projection to catch up", func() bool { return len(f.table("busy")) == len(all) })
	f.exactlyOnce("busy", all)
	mu.Lock()
	defer mu.Unlock()
	// The first call holds the first round (or the part of it polled
	// first); the second everything that waited.
	if len(calls) != 2 || calls[0]+calls[1] != len(all) || calls[1] < 16 {
		t.Fatalf("the busy projection applied batches of %v records, want the first round then the 16+ that waited", calls)
	}
}
