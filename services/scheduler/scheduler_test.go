package scheduler_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/sync/errgroup"

	"github.com/ferryhq/ferry/events/schema"
	"github.com/ferryhq/ferry/platform/auth"
	"github.com/ferryhq/ferry/platform/config"
	"github.com/ferryhq/ferry/platform/kafkax"
	"github.com/ferryhq/ferry/platform/pgstore"
	"github.com/ferryhq/ferry/platform/redisx"
	"github.com/ferryhq/ferry/platform/service"
	"github.com/ferryhq/ferry/platform/testenv"
	"github.com/ferryhq/ferry/services/scheduler"
)

type env struct {
	t       *testing.T
	brokers []string
	redis   string
	topics  schema.Topics
	log     *slog.Logger
}

func newEnv(t *testing.T) *env {
	t.Helper()
	e := &env{
		t:       t,
		brokers: []string{testenv.Kafka(t)},
		redis:   testenv.Redis(t),
		log:     slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}
	cl := e.client()
	if err := kafkax.EnsureTopics(context.Background(), cl, kafkax.TopicSpec{Names: e.topics.All(), Partitions: 4}); err != nil {
		t.Fatal(err)
	}
	return e
}

func (e *env) client(extra ...kgo.Opt) *kgo.Client {
	e.t.Helper()
	cl, err := kafkax.NewClient(kafkax.Config{Brokers: e.brokers, ClientID: "test"}, extra...)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(cl.Close)
	return cl
}

// rdb is a client of the test's Redis database, closed with the test.
func (e *env) rdb() *redis.Client {
	e.t.Helper()
	opts, err := redis.ParseURL(e.redis)
	if err != nil {
		e.t.Fatal(err)
	}
	c := redis.NewClient(opts)
	e.t.Cleanup(func() { c.Close() })
	return c
}

// postgres returns a migrated pool of a fresh database for the scheduler.
func (e *env) postgres() *pgxpool.Pool {
	e.t.Helper()
	pool, err := pgstore.Open(context.Background(), testenv.Postgres(e.t), 4)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(pool.Close)
	if err := auth.Migrate(context.Background(), pool); err != nil { // tenants: fair-share settings
		e.t.Fatal(err)
	}
	if err := scheduler.Migrate(context.Background(), pool); err != nil {
		e.t.Fatal(err)
	}
	return pool
}

// scheduler starts a scheduler with its own connections.
func (e *env) scheduler(ctx context.Context, g *errgroup.Group, cfg scheduler.Config) {
	e.t.Helper()
	e.schedulerPG(ctx, g, cfg, nil)
}

// schedulerPG starts a scheduler with its own connections and pg (nil: none).
func (e *env) schedulerPG(ctx context.Context, g *errgroup.Group, cfg scheduler.Config, pg *pgxpool.Pool) {
	e.t.Helper()
	rdb, err := redisx.Open(ctx, e.redis)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { rdb.Close() })
	deps := &service.Deps{
		Common: config.Common{KafkaBrokers: e.brokers},
		Topics: e.topics,
		Logger: e.log,
		Redis:  rdb,
		Kafka:  e.client(),
	}
	if pg != nil {
		deps.Postgres = pg
	}
	s, err := scheduler.New(ctx, deps, cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	g.Go(func() error { return s.Run(ctx) })
}

type seen struct {
	mu         sync.Mutex
	dispatches map[string]map[string]bool // job/attempt → dispatch ids
	completed  map[string]int
	early      []string
	done       chan struct{}
	closed     bool
	want       int
}

// checkOnce asserts, once the workers stopped, that every job completed
// once and none started before its run_at (a dispatch leased ahead starts
// at its not_before).
func (s *seen) checkOnce(t *testing.T) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, c := range s.completed {
		if c != 1 {
			t.Errorf("%s completed %d times", id, c)
		}
	}
	if len(s.early) > 0 {
		t.Errorf("%d jobs started before their run_at, e.g. %s", len(s.early), s.early[0])
	}
}

// dispatched records a received dispatch and reports whether it is new: a
// worker group rebalance may deliver a dispatch record twice, and a real
// worker drops the repeat, so the fake workers do too.
func (s *seen) dispatched(d schema.Dispatch) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	key := fmt.Sprintf("%s/%d", d.JobID, d.Attempt)
	if s.dispatches[key] == nil {
		s.dispatches[key] = map[string]bool{}
	}
	if s.dispatches[key][d.DispatchID] {
		return false
	}
	s.dispatches[key][d.DispatchID] = true
	start := time.Now()
	if d.NotBefore != nil && d.NotBefore.After(start) {
		start = *d.NotBefore // leased ahead: it starts then (runDispatch), as a real worker does
	}
	if start.Before(d.ReadyAt) {
		s.early = append(s.early, d.JobID)
	}
	return true
}

func (s *seen) complete(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.completed[id]++
	if len(s.completed) == s.want && s.done != nil && !s.closed {
		close(s.done)
		s.closed = true // done stays set: tests read it without the lock
	}
}

// fakeWorker consumes the short pool's dispatch topic, announces its slots
// and reports started then completed (or failed, for attempt 1 of jobs whose
// payload says so).
func (e *env) fakeWorker(ctx context.Context, g *errgroup.Group, id string, slots int, s *seen) {
	cl := e.client(kafkax.Group("ferry-worker-short", e.topics.Dispatch(schema.PoolShort))...)
	runWorker(ctx, e.t, g, cl, e.topics, id, slots, s, func(d schema.Dispatch) *schema.ErrorInfo {
		var p struct {
			Fail  bool
			Class schema.ErrorClass
		}
		_ = json.Unmarshal(d.Job.Payload, &p)
		if (p.Fail && d.Attempt == 1) || p.Class != "" {
			class := p.Class
			if class == "" {
				class = schema.ClassAppError
			}
			return &schema.ErrorInfo{Class: class, Message: "attempt fails"}
		}
		return nil
	})
}

// runWorker is a fake worker of the short pool on cl: it announces slots
// every 200ms and answers each new dispatch with started, then failed with
// the error outcome returns, or completed (counted in s) when it returns nil.
func runWorker(ctx context.Context, t *testing.T, g *errgroup.Group, cl *kgo.Client, topics schema.Topics, id string, slots int, s *seen, outcome func(schema.Dispatch) *schema.ErrorInfo) {
	announceSlots(ctx, g, cl, topics, id, slots)
	g.Go(func() error {
		for {
			fs := cl.PollFetches(ctx)
			if ctx.Err() != nil {
				return nil
			}
			var out []*kgo.Record
			fs.EachRecord(func(r *kgo.Record) {
				out = append(out, runDispatch(t, topics, id, r, s, outcome)...)
			})
			if err := kafkax.ProduceAll(ctx, cl, out...); err != nil && ctx.Err() == nil {
				return err
			}
			if err := cl.CommitUncommittedOffsets(ctx); err != nil && ctx.Err() == nil {
				return err
			}
		}
	})
}

// runDispatch returns the started and completed/failed records of one
// dispatch (nothing for a repeat).
func runDispatch(t *testing.T, topics schema.Topics, id string, r *kgo.Record, s *seen, outcome func(schema.Dispatch) *schema.ErrorInfo) []*kgo.Record {
	ev, err := schema.Decode(r)
	if err != nil {
		t.Errorf("decode dispatch: %v", err)
		return nil
	}
	d := ev.Data.(schema.Dispatch)
	if !s.dispatched(d) {
		return nil
	}
	if d.NotBefore != nil {
		time.Sleep(time.Until(*d.NotBefore))
	}
	now := time.Now().UTC()
	st, _ := schema.NewRecord(topics.Lifecycle(schema.EventStarted), "test/worker",
		schema.Started{JobRef: d.JobRef, WorkerID: id, DispatchID: d.DispatchID, StartedAt: now})
	if e := outcome(d); e != nil {
		f, _ := schema.NewRecord(topics.Lifecycle(schema.EventFailed), "test/worker", schema.Failed{
			JobRef: d.JobRef, WorkerID: id, DispatchID: d.DispatchID, StartedAt: now, FinishedAt: now, Error: *e,
		})
		return []*kgo.Record{st, f}
	}
	c, _ := schema.NewRecord(topics.Lifecycle(schema.EventCompleted), "test/worker", schema.Completed{
		JobRef: d.JobRef, WorkerID: id, DispatchID: d.DispatchID, StartedAt: now, FinishedAt: now,
	})
	s.complete(d.JobID)
	return []*kgo.Record{st, c}
}

func enqueued(id string, runAt time.Time, fail bool) schema.Enqueued {
	payload := json.RawMessage(`{}`)
	if fail {
		payload = json.RawMessage(`{"fail":true}`)
	}
	return schema.Enqueued{
		JobRef: schema.JobRef{JobID: id, TenantID: "tenant-a", Attempt: 1},
		Job: schema.JobSpec{Type: "noop", Queue: "default", Priority: 5, MaxAttempts: 3, Pool: schema.PoolShort, Payload: payload,
			Backoff: &schema.Backoff{Base: schema.Duration(20 * time.Millisecond), Max: schema.Duration(20 * time.Millisecond)}},
		CreatedAt: time.Now().UTC(), RunAt: runAt, Reason: schema.ReasonSubmitted,
	}
}

// TestTwoSchedulersDispatchExactlyOnce runs two schedulers on one Redis and
// one broker with two fake workers: 2,000 jobs (some delayed, some failing
// once and retried) each run exactly once per attempt.
func TestTwoSchedulersDispatchExactlyOnce(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var sched, workers errgroup.Group
	cfg := scheduler.Config{Lease: 30 * time.Second, Prefetch: 8}
	e.scheduler(ctx, &sched, cfg)
	e.scheduler(ctx, &sched, cfg)

	const n = 2000
	s := &seen{dispatches: map[string]map[string]bool{}, completed: map[string]int{}, done: make(chan struct{}), want: n}
	wctx, wcancel := context.WithCancel(context.Background())
	defer wcancel()
	e.fakeWorker(wctx, &workers, "w1", 32, s)
	e.fakeWorker(wctx, &workers, "w2", 32, s)

	api := e.client()
	var recs []*kgo.Record
	now := time.Now()
	for i := range n {
		var runAt time.Time
		if i%20 == 0 {
			runAt = now.Add(300 * time.Millisecond)
		}
		rec, err := schema.NewRecord(e.topics.Lifecycle(schema.EventEnqueued), "ferry/api",
			enqueued(fmt.Sprintf("job-%04d", i), runAt, i%10 == 3))
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, rec)
	}
	// Each submission twice: the repeat must change nothing.
	if err := kafkax.ProduceAll(ctx, api, recs...); err != nil {
		t.Fatal(err)
	}
	if err := kafkax.ProduceAll(ctx, api, recs[:200]...); err != nil {
		t.Fatal(err)
	}

	select {
	case <-s.done:
	case <-time.After(60 * time.Second):
		s.mu.Lock()
		t.Fatalf("only %d of %d jobs completed", len(s.completed), n)
	}
	time.Sleep(300 * time.Millisecond) // let any double dispatch show up

	cancel()
	if err := sched.Wait(); err != nil {
		t.Fatalf("scheduler Run: %v", err)
	}
	wcancel()
	if err := workers.Wait(); err != nil {
		t.Fatalf("worker: %v", err)
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range n {
		id := fmt.Sprintf("job-%04d", i)
		if c := s.completed[id]; c != 1 {
			t.Errorf("%s completed %d times", id, c)
		}
		want := []int{1}
		if i%10 == 3 {
			want = []int{1, 2}
		}
		for _, a := range want {
			if c := len(s.dispatches[fmt.Sprintf("%s/%d", id, a)]); c != 1 {
				t.Errorf("%s attempt %d dispatched %d times", id, a, c)
			}
		}
	}
	if len(s.dispatches) != n+n/10 {
		t.Errorf("%d dispatched attempts, want %d", len(s.dispatches), n+n/10)
	}
	if len(s.early) > 0 {
		t.Errorf("%d jobs started before their run_at, e.g. %s", len(s.early), s.early[0])
	}
}

// TestDeadLetters checks the terminal decisions: a permanent failure, an
// app_error that runs out of attempts, and a job whose not_after passed.
func TestDeadLetters(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var sched, workers errgroup.Group
	e.scheduler(ctx, &sched, scheduler.Config{})
	s := &seen{dispatches: map[string]map[string]bool{}, completed: map[string]int{}}
	wctx, wcancel := context.WithCancel(context.Background())
	defer wcancel()
	e.fakeWorker(wctx, &workers, "w1", 4, s)

	perm := enqueued("perm", time.Time{}, false)
	perm.Job.Payload = json.RawMessage(`{"class":"permanent"}`)
	app := enqueued("app", time.Time{}, false)
	app.Job.Payload = json.RawMessage(`{"class":"app_error"}`)
	app.Job.MaxAttempts = 2
	exp := enqueued("exp", time.Time{}, false)
	past := time.Now().Add(-time.Second).UTC()
	exp.Job.NotAfter = &past
	var recs []*kgo.Record
	for _, ev := range []schema.Enqueued{perm, app, exp} {
		rec, err := schema.NewRecord(e.topics.Lifecycle(schema.EventEnqueued), "ferry/api", ev)
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, rec)
	}
	if err := kafkax.ProduceAll(ctx, e.client(), recs...); err != nil {
		t.Fatal(err)
	}

	dlq := e.client(kgo.ConsumeTopics(e.topics.Lifecycle(schema.EventDLQ)), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	got := map[string]schema.DeadLettered{}
	deadline, dcancel := context.WithTimeout(ctx, 30*time.Second)
	defer dcancel()
	for len(got) < 3 {
		fs := dlq.PollFetches(deadline)
		if deadline.Err() != nil {
			t.Fatalf("dead letters so far: %v", got)
		}
		fs.EachRecord(func(r *kgo.Record) {
			ev, err := schema.Decode(r)
			if err != nil {
				t.Errorf("decode dlq: %v", err)
				return
			}
			d := ev.Data.(schema.DeadLettered)
			if _, dup := got[d.JobID]; dup {
				t.Errorf("%s dead-lettered twice", d.JobID)
			}
			got[d.JobID] = d
		})
	}
	cancel()
	if err := sched.Wait(); err != nil {
		t.Fatal(err)
	}
	wcancel()
	if err := workers.Wait(); err != nil {
		t.Fatal(err)
	}

	check := func(id string, class schema.ErrorClass, attempt int, hist []schema.ErrorClass) {
		t.Helper()
		d := got[id]
		if d.Error.Class != class || d.Attempt != attempt || len(d.History) != len(hist) || d.Job.Type != "noop" || d.TenantID != "tenant-a" {
			t.Fatalf("%s: %+v", id, d)
		}
		for i, c := range hist {
			if d.History[i].Class != c || d.History[i].Attempt != i+1 || d.History[i].WorkerID != "w1" {
				t.Fatalf("%s: history %+v", id, d.History)
			}
		}
	}
	check("perm", schema.ClassPermanent, 1, []schema.ErrorClass{schema.ClassPermanent})
	check("app", schema.ClassAppError, 2, []schema.ErrorClass{schema.ClassAppError, schema.ClassAppError})
	check("exp", schema.ClassExpired, 1, nil)
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.dispatches["exp/1"]) != 0 {
		t.Fatal("expired job dispatched")
	}
}

// announceSlots announces worker id of the short pool with slots every
// 200ms until ctx ends, then announces it stopping.
func announceSlots(ctx context.Context, g *errgroup.Group, cl *kgo.Client, topics schema.Topics, id string, slots int) {
	announce := func(stopping bool) {
		rec, _ := schema.NewRecord(topics.Workers(), "test/worker", schema.WorkerStatus{
			WorkerID: id, Pool: schema.PoolShort, Slots: slots, At: time.Now(), Stopping: stopping,
		})
		_ = kafkax.ProduceAll(context.WithoutCancel(ctx), cl, rec)
	}
	g.Go(func() error {
		tk := time.NewTicker(200 * time.Millisecond)
		defer tk.Stop()
		for {
			announce(false)
			select {
			case <-ctx.Done():
				announce(true)
				return nil
			case <-tk.C:
			}
		}
	})
}
