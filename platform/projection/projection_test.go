package projection_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferryhq/ferry/platform/kafkax"
	"github.com/ferryhq/ferry/platform/projection"
	"github.com/ferryhq/ferry/platform/quarantine"
	"github.com/ferryhq/ferry/platform/testenv"
)

func TestMain(m *testing.M) {
	if raw := os.Getenv(sharedChildEnv); raw != "" {
		os.Exit(sharedChild(raw))
	}
	quarantine.WatchInterval = 100 * time.Millisecond
	os.Exit(m.Run())
}

const group = "test-items"

// fixture is a projection of a topic into the table items (k, v, n): n
// counts how often a key was applied, so exactly once is n = 1.
type fixture struct {
	t       *testing.T
	pool    *pgxpool.Pool
	brokers string
	topic   string
	// sanitize makes NUL storable: the cause of a parked record fixed.
	sanitize atomic.Bool
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	ctx := context.Background()
	pool := testenv.Pool(t, 8)
	if err := projection.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE items (k text PRIMARY KEY, v text NOT NULL, n int NOT NULL DEFAULT 1)`); err != nil {
		t.Fatal(err)
	}
	f := &fixture{t: t, pool: pool, brokers: testenv.Kafka(t), topic: "items"}
	if err := kafkax.EnsureTopics(ctx, f.client(), kafkax.TopicSpec{Names: []string{f.topic}, Partitions: 3}); err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *fixture) client() *kgo.Client {
	f.t.Helper()
	cl, err := kafkax.NewClient(kafkax.Config{Brokers: []string{f.brokers}, ClientID: "test"})
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(cl.Close)
	return cl
}

// apply writes the batch in one statement, as Ferry's projections do: one
// value Postgres rejects (a NUL byte) fails the whole statement.
func (f *fixture) apply(ctx context.Context, tx pgx.Tx, recs []*kgo.Record) error {
	keys := make([]string, 0, len(recs))
	vals := make([]string, 0, len(recs))
	for _, r := range recs {
		v := string(r.Value)
		if f.sanitize.Load() {
			v = strings.ReplaceAll(v, "\x00", `\u0000`)
		}
		keys, vals = append(keys, string(r.Key)), append(vals, v)
	}
	_, err := tx.Exec(ctx, `INSERT INTO items (k, v) SELECT * FROM unnest($1::text[], $2::text[])
		ON CONFLICT (k) DO UPDATE SET n = items.n + 1, v = EXCLUDED.v`, keys, vals)
	return err
}

// run runs the projection with apply until the returned stop is called.
func (f *fixture) run(apply projection.ApplyFunc) (stop func()) {
	return f.runGroup(group, 0, apply)
}

// runGroup runs a projection of group (maxBatch 0: the default) with apply
// until the returned stop is called.
func (f *fixture) runGroup(group string, maxBatch int, apply projection.ApplyFunc) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- projection.Run(ctx, f.pool, projection.Config{
			Group: group, Topics: []string{f.topic}, Kafka: kafkax.Config{Brokers: []string{f.brokers}, ClientID: "proj"},
			MaxBatch: maxBatch, FetchMaxWait: 10 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		}, apply)
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				f.t.Errorf("projection.Run: %v", err)
			}
		})
	}
	f.t.Cleanup(stop)
	return stop
}

// produce writes key/value records and returns them with their partitions
// and offsets.
func (f *fixture) produce(kvs ...[2]string) []*kgo.Record {
	f.t.Helper()
	recs := make([]*kgo.Record, 0, len(kvs))
	for _, kv := range kvs {
		recs = append(recs, &kgo.Record{Topic: f.topic, Key: []byte(kv[0]), Value: []byte(kv[1]),
			Headers: []kgo.RecordHeader{{Key: "ce_type", Value: []byte("test")}, {Key: "bin", Value: []byte{0xff, 0x00}}}})
	}
	if err := f.client().ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		f.t.Fatal(err)
	}
	return recs
}

func (f *fixture) items() map[string]int {
	f.t.Helper()
	rows, err := f.pool.Query(context.Background(), `SELECT k, n FROM items`)
	if err != nil {
		f.t.Fatal(err)
	}
	out := map[string]int{}
	for rows.Next() {
		var k string
		var n int
		if err := rows.Scan(&k, &n); err != nil {
			f.t.Fatal(err)
		}
		out[k] = n
	}
	if err := rows.Err(); err != nil {
		f.t.Fatal(err)
	}
	return out
}

func (f *fixture) quarantined(st quarantine.Status) []quarantine.Record {
	f.t.Helper()
	rs, err := quarantine.NewStore(f.pool).List(context.Background(), quarantine.Filter{Group: group, Status: st, Limit: 100})
	if err != nil {
		f.t.Fatal(err)
	}
	return rs
}

// waitFor is testenv.WaitFor under the short name these tests use.
var waitFor = testenv.WaitFor

// batch returns n key/value pairs k-000…; the pairs at bad get a NUL.
func batch(n int, bad ...int) [][2]string {
	out := make([][2]string, n)
	for i := range out {
		out[i] = [2]string{fmt.Sprintf("k-%03d", i), fmt.Sprintf("v-%03d", i)}
	}
	for _, i := range bad {
		out[i][1] = "bad\x00value"
	}
	return out
}

// TestPoisonRecordParked: one record Postgres rejects in a batch of many
// is isolated and parked with its position and error, with the offsets
// past it; every other record is applied exactly once (also across a
// restart) and records after it keep flowing.
func TestPoisonRecordParked(t *testing.T) {
	f := newFixture(t)
	recs := f.produce(batch(300, 137)...)
	bad := recs[137]
	stop := f.run(f.apply)
	waitFor(t, 30*time.Second, "299 items and a parked record", func() bool {
		return len(f.items()) == 299 && len(f.quarantined(quarantine.StatusParked)) == 1
	})
	for k, n := range f.items() {
		if n != 1 || k == "k-137" {
			t.Fatalf("item %s applied %d times", k, n)
		}
	}
	q, err := quarantine.NewStore(f.pool).Get(context.Background(), f.quarantined(quarantine.StatusParked)[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	if q.Group != group || q.Topic != bad.Topic || q.Partition != bad.Partition || q.Offset != bad.Offset ||
		string(q.Key) != "k-137" || string(q.Value) != "bad\x00value" || q.Tries < quarantine.MaxTries {
		t.Fatalf("parked %+v, want %s/%d@%d after %d tries", q, bad.Topic, bad.Partition, bad.Offset, quarantine.MaxTries)
	}
	if !strings.Contains(q.Error, "22021") && !strings.Contains(q.Error, "invalid byte sequence") {
		t.Fatalf("parked error %q does not say why", q.Error)
	}
	if len(q.Headers) != 2 || q.Headers[1].Value.Encoding != "base64" || q.Headers[0].Value != (quarantine.Bytes{Encoding: "text", Data: "test"}) {
		t.Fatalf("headers %+v", q.Headers)
	}
	// Offsets: past every record of every partition, the parked one included.
	last := map[int32]int64{}
	for _, r := range recs {
		last[r.Partition] = max(last[r.Partition], r.Offset+1)
	}
	waitFor(t, 5*time.Second, "stored offsets past the batch", func() bool { return offsetsAre(t, f.pool, last) })

	// It moves on, and a restart neither re-applies nor re-parks anything.
	stop()
	f.run(f.apply)
	f.produce([2]string{"after", "ok"})
	waitFor(t, 30*time.Second, "the record after the poison", func() bool { return f.items()["after"] == 1 })
	for k, n := range f.items() {
		if n != 1 {
			t.Fatalf("after restart, item %s applied %d times", k, n)
		}
	}
	if rs := f.quarantined(""); len(rs) != 1 || rs[0].Tries != q.Tries {
		t.Fatalf("after restart, quarantine %+v", rs)
	}
}

func offsetsAre(t *testing.T, pool *pgxpool.Pool, want map[int32]int64) bool {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT partition, next_offset FROM ferry_offsets WHERE consumer_group = $1`, group)
	if err != nil {
		t.Fatal(err)
	}
	got := map[int32]int64{}
	for rows.Next() {
		var p int32
		var o int64
		if err := rows.Scan(&p, &o); err != nil {
			t.Fatal(err)
		}
		got[p] = o
	}
	if len(got) != len(want) {
		return false
	}
	for p, o := range want {
		if got[p] != o {
			return false
		}
	}
	return true
}

// TestTransientErrorsParkNothing: failures that are not the records' fault
// (a connection failure, the server shutting down, a deadline) are retried
// however often they happen; nothing is parked and everything is applied
// once.
func TestTransientErrorsParkNothing(t *testing.T) {
	f := newFixture(t)
	f.produce(batch(50)...)
	transient := []error{
		&pgconn.PgError{Code: "08006", Message: "connection failure"},
		fmt.Errorf("store: %w", &pgconn.PgError{Code: "57P01", Message: "terminating connection due to administrator command"}),
		&pgconn.PgError{Code: "40001", Message: "could not serialize access"},
		fmt.Errorf("insert: %w", context.DeadlineExceeded),
		errors.New("read tcp 127.0.0.1:5432: connection reset by peer"),
	}
	var calls atomic.Int64
	f.run(func(ctx context.Context, tx pgx.Tx, recs []*kgo.Record) error {
		if n := calls.Add(1); n <= int64(len(transient)+2) {
			return transient[int(n-1)%len(transient)]
		}
		return f.apply(ctx, tx, recs)
	})
	waitFor(t, 60*time.Second, "every item", func() bool { return len(f.items()) == 50 })
	for k, n := range f.items() {
		if n != 1 {
			t.Fatalf("item %s applied %d times", k, n)
		}
	}
	if rs := f.quarantined(""); len(rs) != 0 {
		t.Fatalf("transient failures parked %+v", rs)
	}
}

// TestRetryAndDiscard: an operator's retry re-applies a parked record in the
// projection (parked again with the new error while the cause is there,
// resolved and applied once after it is fixed); discard marks a record
// discarded with who and why, and it stays listed.
func TestRetryAndDiscard(t *testing.T) {
	f := newFixture(t)
	f.produce(batch(40, 7, 31)...)
	f.run(f.apply)
	waitFor(t, 30*time.Second, "two parked records", func() bool {
		return len(f.quarantined(quarantine.StatusParked)) == 2 && len(f.items()) == 38
	})
	st := quarantine.NewStore(f.pool)
	ctx := context.Background()
	parked := f.quarantined(quarantine.StatusParked)
	first, second := parked[0], parked[1]
	if string(first.Key) != "k-007" || string(second.Key) != "k-031" {
		t.Fatalf("parked %s and %s", first.Key, second.Key)
	}

	// Retry while the cause remains: parked again, one more try.
	if r, err := st.Retry(ctx, first.ID); err != nil || r.Status != quarantine.StatusRetry {
		t.Fatalf("retry: %+v %v", r, err)
	}
	waitFor(t, 10*time.Second, "the failed retry parked again", func() bool {
		r, err := st.Get(ctx, first.ID)
		return err == nil && r.Status == quarantine.StatusParked && r.Tries == first.Tries+1
	})

	// Fixed: the retry applies it once and resolves the row.
	f.sanitize.Store(true)
	if _, err := st.Retry(ctx, first.ID); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the retried record resolved", func() bool {
		r, err := st.Get(ctx, first.ID)
		return err == nil && r.Status == quarantine.StatusResolved && r.ResolvedAt != nil
	})
	if n := f.items()["k-007"]; n != 1 {
		t.Fatalf("retried record applied %d times", n)
	}
	if _, err := st.Retry(ctx, first.ID); !errors.Is(err, quarantine.ErrState) {
		t.Fatalf("retry of a resolved record: %v, want ErrState", err)
	}

	d, err := st.Discard(ctx, second.ID, "admin", "known bad producer")
	if err != nil || d.Status != quarantine.StatusDiscarded || d.DiscardedBy != "admin" || d.DiscardReason != "known bad producer" || d.DiscardedAt == nil {
		t.Fatalf("discard: %+v %v", d, err)
	}
	time.Sleep(3 * quarantine.WatchInterval)
	if _, ok := f.items()["k-031"]; ok {
		t.Fatal("a discarded record was applied")
	}
	if rs := f.quarantined(quarantine.StatusDiscarded); len(rs) != 1 || rs[0].ID != second.ID {
		t.Fatalf("discarded list %+v", rs)
	}
	if _, err := st.Get(ctx, 999999); !errors.Is(err, quarantine.ErrNotFound) {
		t.Fatalf("get unknown: %v", err)
	}
	if _, err := st.Discard(ctx, first.ID, "admin", ""); !errors.Is(err, quarantine.ErrState) {
		t.Fatalf("discard of a resolved record: %v, want ErrState", err)
	}
}

// TestBatchTransactionsUseKeys: a statement a connection has run often
// enough to cache a generic plan, planned while its table was empty, plans
// as a key lookup again inside a batch's transaction once the table has
// grown; outside one, the cached plan still scans the table (the trap the
// status projection fell into, Round 12 of docs/performance.md).
func TestBatchTransactionsUseKeys(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	conn, err := f.pool.Acquire(ctx) // the lookup's steps need one connection
	if err != nil {
		t.Fatal(err)
	}
	outside, err := staleLookupPlan(ctx, conn, "outside")
	conn.Release()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(outside, "Seq Scan") {
		t.Fatalf("outside a batch the cached lookup plans as\n%s\nnot the sequential scan this test guards against", outside)
	}
	var inside atomic.Value
	f.run(func(ctx context.Context, tx pgx.Tx, recs []*kgo.Record) error {
		if inside.Load() == nil {
			plan, err := staleLookupPlan(ctx, tx, "inside")
			if err != nil {
				return err
			}
			inside.Store(plan)
		}
		return f.apply(ctx, tx, recs)
	})
	f.produce(batch(3)...)
	waitFor(t, 20*time.Second, "the batch applied", func() bool { return len(f.items()) == 3 })
	if plan, _ := inside.Load().(string); strings.Contains(plan, "Seq Scan") || !strings.Contains(plan, "Index") {
		t.Fatalf("inside a batch's transaction the lookup plans as\n%s\nwant an index scan", plan)
	}
}

// staleLookupPlan makes a temporary table, analyses it empty, runs a
// prepared key lookup on it six times (Postgres then caches a generic plan,
// for an empty table a sequential scan), fills the table and returns how
// the lookup plans now. name tells the two prepared statements apart.
func staleLookupPlan(ctx context.Context, db interface {
	Exec(context.Context, string, ...any) (pgconn.CommandTag, error)
	Query(context.Context, string, ...any) (pgx.Rows, error)
}, name string) (string, error) {
	steps := []string{
		`CREATE TEMP TABLE lookup_` + name + ` (k text PRIMARY KEY, n int)`,
		`ANALYZE lookup_` + name,
		`PREPARE look_` + name + `(text) AS SELECT n FROM lookup_` + name + ` WHERE k = $1`,
	}
	for range 6 {
		steps = append(steps, `EXECUTE look_`+name+`('k-1')`)
	}
	steps = append(steps, `INSERT INTO lookup_`+name+` SELECT 'k-' || g, g FROM generate_series(1, 20000) g`)
	for _, q := range steps {
		if _, err := db.Exec(ctx, q); err != nil {
			return "", fmt.Errorf("%s: %w", q, err)
		}
	}
	rows, err := db.Query(ctx, `EXPLAIN (COSTS OFF) EXECUTE look_`+name+`('k-5')`)
	if err != nil {
		return "", err
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return "", err
	}
	for _, q := range []string{`DEALLOCATE look_` + name, `DROP TABLE lookup_` + name} {
		if _, err := db.Exec(ctx, q); err != nil {
			return "", fmt.Errorf("%s: %w", q, err)
		}
	}
	return strings.Join(lines, "\n"), nil
}

// TestTopicsReadLevelInTime: behind on a backlog of two topics, one of
// large records and one of small ones (a job's enqueued event and its
// start), Run applies each small record no earlier than the large record
// that came before it in time, where byte-limited fetches would read the
// small topic far ahead (the aligner, align.go).
func TestTopicsReadLevelInTime(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	big, small := "level-big", "level-small"
	if err := kafkax.EnsureTopics(ctx, f.client(), kafkax.TopicSpec{Names: []string{big, small}, Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	const n = 3000 // 6 MB of large records: several fetches of at most 1 MiB of each partition
	t0 := time.Now().Add(-time.Hour)
	var recs []*kgo.Record
	for i := range n { // Kafka keeps milliseconds: a pair 2 ms apart, the small record 1 ms after the large
		at := t0.Add(time.Duration(2*i) * time.Millisecond)
		key := []byte(fmt.Sprint(i))
		recs = append(recs, &kgo.Record{Topic: big, Key: key, Value: []byte(strings.Repeat("x", 2000)), Timestamp: at},
			&kgo.Record{Topic: small, Key: key, Value: []byte("s"), Timestamp: at.Add(time.Millisecond)})
	}
	if err := f.client().ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	batchOf := map[string]int{} // topic/key → the batch that applied it
	batches := 0
	done := make(chan struct{})
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		defer close(done)
		_ = projection.Run(runCtx, f.pool, projection.Config{
			Group: "test-level", Topics: []string{big, small}, Kafka: kafkax.Config{Brokers: []string{f.brokers}, ClientID: "proj"},
			MaxBatch: 500, FetchMaxWait: 250 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		}, func(_ context.Context, _ pgx.Tx, recs []*kgo.Record) error {
			mu.Lock()
			defer mu.Unlock()
			batches++
			for _, r := range recs {
				batchOf[r.Topic+"/"+string(r.Key)] = batches
			}
			return nil
		})
	}()
	deadline := time.Now().Add(time.Minute)
	for {
		mu.Lock()
		got := len(batchOf)
		mu.Unlock()
		if got == 2*n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("applied %d of %d records", got, 2*n)
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	<-done
	early := 0
	for i := range n {
		k := fmt.Sprint(i)
		if batchOf[small+"/"+k] < batchOf[big+"/"+k] {
			early++
		}
	}
	if early > 0 {
		t.Fatalf("%d of %d small records were applied in a batch before the large record that preceded them in time", early, n)
	}
}
