package store

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferryhq/ferry/events/schema"
	"github.com/ferryhq/ferry/platform/quarantine"
	"github.com/ferryhq/ferry/platform/testenv"
	"github.com/ferryhq/ferry/services/api/internal/status"
)

func open(t testing.TB) *Store {
	t.Helper()
	ctx := context.Background()
	pool := testenv.Pool(t, 4)
	if err := Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	return New(pool, slog.New(slog.NewTextHandler(io.Discard, nil)))
}

func record(t testing.TB, d schema.Lifecycle, at time.Time) *kgo.Record {
	b, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	rec := schema.NewRecordAt(schema.Topics{}.Lifecycle(d.EventType()), "test", d, b, schema.NewEventID(), at)
	if _, ok := d.(schema.Enqueued); ok {
		rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: schema.HeaderTraceParent, Value: []byte("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")})
	}
	return rec
}

// history returns the records of a job that fails once and then succeeds.
func history(t *testing.T, id string, idemKey string) []*kgo.Record {
	t0 := time.Date(2026, 3, 1, 10, 0, 0, 123456789, time.UTC)
	ref := func(a int) schema.JobRef { return schema.JobRef{JobID: id, TenantID: "acme", Attempt: a} }
	spec := schema.JobSpec{Type: "x", Queue: "q", Priority: 3, Payload: json.RawMessage(`{"a":1}`), MaxAttempts: 5, Tags: []string{"t1", "t2"}, Pool: "short"}
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	return []*kgo.Record{
		record(t, schema.Enqueued{JobRef: ref(1), Job: spec, CreatedAt: t0, RunAt: t0, Reason: "submitted", IdempotencyKey: idemKey, RequestHash: "h"}, at(0)),
		record(t, schema.Started{JobRef: ref(1), WorkerID: "w1", StartedAt: at(1)}, at(1)),
		record(t, schema.Progress{JobRef: ref(1), WorkerID: "w1", Percent: 10, At: at(2)}, at(2)),
		record(t, schema.Progress{JobRef: ref(1), WorkerID: "w1", Percent: 60, Message: "m", At: at(3)}, at(3)),
		record(t, schema.Failed{JobRef: ref(1), WorkerID: "w1", Error: schema.ErrorInfo{Class: "app_error", Message: "boom"}, StartedAt: at(1), FinishedAt: at(4)}, at(4)),
		record(t, schema.Enqueued{JobRef: ref(2), Job: spec, CreatedAt: t0, RunAt: at(10), Reason: "retry"}, at(5)),
		record(t, schema.Started{JobRef: ref(2), WorkerID: "w2", StartedAt: at(10)}, at(10)),
		record(t, schema.Completed{JobRef: ref(2), WorkerID: "w2", Result: json.RawMessage(`{"ok":true}`), StartedAt: at(10), FinishedAt: at(12)}, at(12)),
	}
}

func (s *Store) applyTx(t testing.TB, recs []*kgo.Record) {
	t.Helper()
	if err := pgx.BeginFunc(context.Background(), s.pool, func(tx pgx.Tx) error { return s.Apply(context.Background(), tx, recs) }); err != nil {
		t.Fatal(err)
	}
}

// TestShuffledBatches applies a job's records in random orders, split into
// random batches, with duplicates, and expects the row the in-memory fold
// of the in-order history gives.
func TestShuffledBatches(t *testing.T) {
	s := open(t)
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(7, 9))
	var want status.Row
	for _, rec := range history(t, "job_ref", "") {
		ev, _ := schema.Decode(rec)
		status.Apply(&want, ev)
	}
	for n := range 40 {
		id := "job_" + string(rune('a'+n%26)) + string(rune('a'+n/26))
		recs := append(history(t, id, ""), history(t, id, "")[rng.IntN(8)])
		rng.Shuffle(len(recs), func(i, j int) { recs[i], recs[j] = recs[j], recs[i] })
		for len(recs) > 0 {
			k := 1 + rng.IntN(len(recs))
			s.applyTx(t, recs[:k])
			recs = recs[k:]
		}
		got, ok, err := s.Get(ctx, "acme", id)
		if err != nil || !ok {
			t.Fatal(ok, err)
		}
		w := want
		w.ID = id
		// jsonb stores JSON in its own formatting.
		if !jsonEq(got.Payload, w.Payload) || !jsonEq(got.Result, w.Result) {
			t.Fatalf("job %s: payload %s result %s", id, got.Payload, got.Result)
		}
		got.Payload, got.Result, w.Payload, w.Result = nil, nil, nil, nil
		if !reflect.DeepEqual(got.Row, w) {
			t.Fatalf("job %s:\n got %+v\nwant %+v", id, got.Row, w)
		}
	}
	// Filters and the list order work on projected rows.
	jobs, _, err := s.List(ctx, "acme", Filter{Status: schema.StatusSucceeded, Tags: []string{"t2"}, Limit: 100, Now: time.Now()})
	if err != nil || len(jobs) != 40 {
		t.Fatalf("%d %v", len(jobs), err)
	}
}

// TestNewRowRoundTrip: a job inserted by the COPY of new rows reads back
// as the in-memory fold of its events, every specification column set
// (tags, keys, unique key, concurrency key, schedule, re-drive), and one
// with none of them set reads back empty (NULL keys, no tags).
func TestNewRowRoundTrip(t *testing.T) {
	s := open(t)
	ctx := context.Background()
	t0 := time.Date(2026, 3, 1, 10, 0, 0, 123456000, time.UTC)
	full := schema.Enqueued{JobRef: schema.JobRef{JobID: "job_full", TenantID: "acme", Attempt: 1}, CreatedAt: t0, RunAt: t0.Add(time.Minute),
		Job: schema.JobSpec{Type: "email", Queue: "mail", Priority: 7, Payload: json.RawMessage(`{"to":"a@b","n":[1,2]}`), MaxAttempts: 4,
			Tags: []string{"x", "y z"}, Pool: "long", Concurrency: &schema.Concurrency{Key: "customer-1", Limit: 2}},
		Reason: "submitted", Actor: "key_1", IdempotencyKey: "idem-1", RequestHash: "rh", RedrivenFrom: "job_dead", ScheduleID: "sch_1",
		Unique: &schema.Unique{Key: "u-1", While: "queued", Until: t0.Add(time.Hour)}}
	bare := schema.Enqueued{JobRef: schema.JobRef{JobID: "job_bare", TenantID: "acme", Attempt: 1}, CreatedAt: t0, RunAt: t0,
		Job: schema.JobSpec{Type: "noop", Pool: "short"}, Reason: "submitted"}
	recs := []*kgo.Record{record(t, full, t0), record(t, bare, t0)}
	if w := s.applyCounting(t, recs); w.inserted != 2 || w.updated != 0 {
		t.Fatalf("two new jobs: %+v", w)
	}
	for _, rec := range recs {
		ev, err := schema.Decode(rec)
		if err != nil {
			t.Fatal(err)
		}
		var want status.Row
		status.Apply(&want, ev)
		got, ok, err := s.Get(ctx, "acme", ev.Data.(schema.Lifecycle).Ref().JobID)
		if err != nil || !ok {
			t.Fatal(ok, err)
		}
		if !jsonEq(got.Payload, want.Payload) && (len(got.Payload) > 0 || len(want.Payload) > 0) {
			t.Fatalf("%s: payload %s, want %s", got.ID, got.Payload, want.Payload)
		}
		got.Payload, want.Payload = nil, nil
		if !reflect.DeepEqual(got.Row, want) || got.Version != 1 {
			t.Fatalf("%s:\n got %+v (version %d)\nwant %+v", got.ID, got.Row, got.Version, want)
		}
	}
	// The keys are stored as NULL when absent, so the partial indexes
	// hold only the jobs that have one.
	var idem, uniq int
	if err := s.pool.QueryRow(ctx, `SELECT count(idempotency_key), count(unique_key) FROM jobs`).Scan(&idem, &uniq); err != nil || idem != 1 || uniq != 1 {
		t.Fatalf("keys stored: %d idempotency, %d unique (%v); want 1 each", idem, uniq, err)
	}
	jobs, _, err := s.List(ctx, "acme", Filter{Tags: []string{"y z"}, Limit: 10, Now: time.Now()})
	if err != nil || len(jobs) != 1 || jobs[0].ID != "job_full" {
		t.Fatalf("tag filter: %v %v", jobs, err)
	}
}

// TestBatchLoadReadsEachRowAsItIs: the projection's batch read (one
// scanner reused across rows, selectJobs) gives every row exactly as a
// read of that row alone does, whichever order the keys come in: a row
// with every nullable column set beside one with none.
func TestBatchLoadReadsEachRowAsItIs(t *testing.T) {
	s := open(t)
	ctx := context.Background()
	t0 := time.Date(2026, 3, 1, 10, 0, 0, 123456000, time.UTC)
	full := schema.Enqueued{JobRef: schema.JobRef{JobID: "job_full", TenantID: "acme", Attempt: 1}, CreatedAt: t0, RunAt: t0.Add(time.Minute),
		Job:    schema.JobSpec{Type: "email", Queue: "mail", Payload: json.RawMessage(`{"to":"a@b"}`), Tags: []string{"x"}, Pool: "long"},
		Reason: "submitted", IdempotencyKey: "idem-1", RequestHash: "rh", Unique: &schema.Unique{Key: "u-1", While: "queued", Until: t0.Add(time.Hour)}}
	bare := schema.Enqueued{JobRef: schema.JobRef{JobID: "job_bare", TenantID: "acme", Attempt: 1}, CreatedAt: t0, RunAt: t0,
		Job: schema.JobSpec{Type: "noop", Pool: "short"}, Reason: "submitted"}
	s.applyTx(t, []*kgo.Record{record(t, full, t0), record(t, bare, t0),
		record(t, schema.Completed{JobRef: bare.JobRef, WorkerID: "w", Result: json.RawMessage(`{"ok":1}`), StartedAt: t0, FinishedAt: t0.Add(time.Second)}, t0.Add(time.Second))})
	want := map[string]Job{}
	for _, id := range []string{"job_full", "job_bare"} {
		j, ok, err := s.Get(ctx, "acme", id)
		if err != nil || !ok {
			t.Fatal(ok, err)
		}
		want[id] = j
	}
	for _, keys := range [][]jobKey{{{"acme", "job_full"}, {"acme", "job_bare"}}, {{"acme", "job_bare"}, {"acme", "job_full"}}} {
		err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			got, err := selectJobs(ctx, tx, selectColumns+" FROM jobs", "", keys, jobColumns)
			if err != nil {
				return err
			}
			if len(got) != len(keys) {
				t.Fatalf("%d rows for %d keys", len(got), len(keys))
			}
			for i, k := range keys {
				if !reflect.DeepEqual(got[i], want[k.id]) {
					t.Errorf("keys %v, row %d:\n got %+v\nwant %+v", keys, i, got[i], want[k.id])
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

// TestConcurrentInsert makes two transactions insert the same new job: the
// second must fail (and be retried by the projection), not overwrite.
func TestConcurrentInsert(t *testing.T) {
	s := open(t)
	ctx := context.Background()
	recs := history(t, "job_race", "")
	tx1, err := s.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Apply(ctx, tx1, recs[:1]); err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() {
		errc <- pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error { return s.Apply(ctx, tx, recs[1:2]) })
	}()
	time.Sleep(200 * time.Millisecond)
	if err := tx1.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	// The second writer's COPY stops at the primary key: a retry, never a
	// poison record (a unique violation otherwise is one).
	if err := <-errc; !errors.Is(err, ErrConcurrentWrite) || quarantine.IsPoison(err) {
		t.Fatalf("second writer: %v (poison %v)", err, quarantine.IsPoison(err))
	}
	s.applyTx(t, recs[1:2]) // the retry merges
	got, _, _ := s.Get(ctx, "acme", "job_race")
	if got.Type != "x" || got.Status() != schema.StatusRunning {
		t.Fatalf("%+v", got)
	}
}

// TestIdempotencyKeyConflict: a second job with a key another job holds
// keeps its row but not the key.
func TestIdempotencyKeyConflict(t *testing.T) {
	s := open(t)
	ctx := context.Background()
	s.applyTx(t, history(t, "job_1", "k")[:1])
	s.applyTx(t, append(history(t, "job_2", "k")[:1], history(t, "job_3", "k")[:1]...))
	held, err := s.ByIdempotencyKeys(ctx, "acme", []string{"k"})
	if err != nil || held["k"].ID != "job_1" {
		t.Fatalf("%v %v", held, err)
	}
	for _, id := range []string{"job_2", "job_3"} {
		if j, ok, _ := s.Get(ctx, "acme", id); !ok || j.IdempotencyKey != "" {
			t.Fatalf("%s: %v %+v", id, ok, j)
		}
	}
}

func jsonEq(a, b []byte) bool {
	var x, y any
	return json.Unmarshal(a, &x) == nil && json.Unmarshal(b, &y) == nil && reflect.DeepEqual(x, y)
}

// TestStatusUpdatesReadTheStateOnly: a batch none of whose events carries
// the job's specification reads and writes the row's state alone
// (foldColumns), and still keeps what the fold needs of the rest: the
// queue its counters move in, the creation time of a row created from a
// later event, and the specification it does not read.
func TestStatusUpdatesReadTheStateOnly(t *testing.T) {
	s := open(t)
	ctx := context.Background()
	queues := func() map[string][2]int64 {
		t.Helper()
		rows, err := s.pool.Query(ctx, `SELECT queue, pending, running FROM tenant_queue_counts WHERE tenant_id = 'acme'`)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string][2]int64{}
		for rows.Next() {
			var q string
			var c [2]int64
			if err := rows.Scan(&q, &c[0], &c[1]); err != nil {
				t.Fatal(err)
			}
			out[q] = c
		}
		return out
	}
	recs := history(t, "job_state", "")
	s.applyTx(t, recs[0:1]) // enqueued: a new row, pending in q
	s.applyTx(t, recs[1:2]) // started alone
	if got := queues(); !reflect.DeepEqual(got, map[string][2]int64{"q": {0, 1}}) {
		t.Fatalf("queue counts after the start: %v", got)
	}
	s.applyTx(t, recs[2:5]) // progress, progress, failed
	got, ok, err := s.Get(ctx, "acme", "job_state")
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	if got.Pos != (schema.Position{Attempt: 1, Phase: schema.PhaseFailed}) || got.LastErrorMessage != "boom" || got.ProgressMessage != "m" ||
		!jsonEq(got.Payload, json.RawMessage(`{"a":1}`)) || !slices.Equal(got.Tags, []string{"t1", "t2"}) || got.Type != "x" {
		t.Fatalf("after the state-only batches: %+v", got.Row)
	}

	// A row created from a start, then a progress report: the creation
	// time stays the earliest event's.
	recs = history(t, "job_late", "")
	s.applyTx(t, recs[1:2])
	s.applyTx(t, recs[2:3])
	got, ok, err = s.Get(ctx, "acme", "job_late")
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	if want := time.Date(2026, 3, 1, 10, 0, 1, 123456000, time.UTC); !got.CreatedAt.Equal(want) || got.Status() != schema.StatusRunning {
		t.Fatalf("created %v (want %v), status %s", got.CreatedAt, want, got.Status())
	}
}
