package scheduler_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	"golang.org/x/sync/errgroup"

	"github.com/ferryhq/ferry/events/schema"
	"github.com/ferryhq/ferry/platform/kafkax"
	"github.com/ferryhq/ferry/platform/testenv"
	"github.com/ferryhq/ferry/services/scheduler"
)

// TestRedisLossRebuild flushes Redis under two schedulers: the state is
// rebuilt from the log, completed jobs are not dispatched again and every
// waiting (delayed) job still runs once.
func TestRedisLossRebuild(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var sched, workers errgroup.Group
	cfg := scheduler.Config{Lease: 30 * time.Second, EpochCheck: 100 * time.Millisecond}
	e.scheduler(ctx, &sched, cfg)
	e.scheduler(ctx, &sched, cfg)

	const now, later = 100, 100
	s := &seen{dispatches: map[string]map[string]bool{}, completed: map[string]int{}, done: make(chan struct{}), want: now}
	wctx, wcancel := context.WithCancel(context.Background())
	defer wcancel()
	e.fakeWorker(wctx, &workers, "w1", 16, s)

	api := e.client()
	produce := func(prefix string, n int, runAt time.Time) {
		var recs []*kgo.Record
		for i := range n {
			rec, err := schema.NewRecord(e.topics.Lifecycle(schema.EventEnqueued), "ferry/api", enqueued(fmt.Sprintf("%s-%03d", prefix, i), runAt, false))
			if err != nil {
				t.Fatal(err)
			}
			recs = append(recs, rec)
		}
		if err := kafkax.ProduceAll(ctx, api, recs...); err != nil {
			t.Fatal(err)
		}
	}
	produce("now", now, time.Time{})
	select {
	case <-s.done:
	case <-time.After(30 * time.Second):
		t.Fatal("immediate jobs did not complete")
	}
	produce("later", later, time.Now().Add(2*time.Second))
	time.Sleep(500 * time.Millisecond) // the delayed jobs are in Redis

	rdb := e.rdb()
	s.mu.Lock()
	s.done, s.want, s.closed = make(chan struct{}), now+later, false
	done := s.done
	s.mu.Unlock()
	if err := rdb.FlushDB(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		s.mu.Lock()
		t.Fatalf("only %d of %d jobs completed after the flush", len(s.completed), now+later)
	}
	time.Sleep(500 * time.Millisecond) // let any double dispatch show up
	if ep, _ := rdb.Get(ctx, "ferry:sched:epoch").Result(); ep == "" {
		t.Error("no epoch after the rebuild")
	}
	cancel()
	if err := sched.Wait(); err != nil {
		t.Fatalf("scheduler Run: %v", err)
	}
	wcancel()
	_ = workers.Wait()
	s.checkOnce(t)
}

// snapshot is a copy of every key under prefix (DUMP and TTL), as an older
// RDB or AOF would hold them.
type snapshot map[string]struct {
	dump string
	ttl  time.Duration
}

func takeSnapshot(t *testing.T, ctx context.Context, rdb *redis.Client, prefix string) snapshot {
	t.Helper()
	snap := snapshot{}
	keys, err := rdb.Keys(ctx, prefix+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		d, err := rdb.Dump(ctx, k).Result()
		if errors.Is(err, redis.Nil) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		ttl, _ := rdb.PTTL(ctx, k).Result()
		if ttl < 0 {
			ttl = 0
		}
		snap[k] = struct {
			dump string
			ttl  time.Duration
		}{d, ttl}
	}
	return snap
}

// restore makes Redis hold exactly the snapshot under prefix (except the
// rebuild lock), as a restart from that snapshot would.
func (snap snapshot) restore(t *testing.T, ctx context.Context, rdb *redis.Client, prefix string) {
	t.Helper()
	keys, err := rdb.Keys(ctx, prefix+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	_, err = rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		for _, k := range keys {
			if k != prefix+"rebuild:lock" {
				p.Del(ctx, k)
			}
		}
		for k, v := range snap {
			if k != prefix+"rebuild:lock" {
				p.RestoreReplace(ctx, k, v.ttl, v.dump)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestRedisBackInTime: Redis restored from an older snapshot still has its
// epoch, but lost the jobs enqueued since; the checkpoint (behind
// Postgres's) gives it away, the state is rebuilt from the log and every
// job accepted completes, once.
func TestRedisBackInTime(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pg := e.postgres()
	var sched, workers errgroup.Group
	cfg := scheduler.Config{Lease: 30 * time.Second, EpochCheck: 100 * time.Millisecond, CheckpointInterval: 100 * time.Millisecond}
	e.schedulerPG(ctx, &sched, cfg, pg)

	const first, lost = 50, 50
	s := &seen{dispatches: map[string]map[string]bool{}, completed: map[string]int{}, done: make(chan struct{}), want: first}
	wctx, wcancel := context.WithCancel(context.Background())
	defer wcancel()
	api := e.client()
	produce := func(prefix string, n int, runAt time.Time) {
		var recs []*kgo.Record
		for i := range n {
			rec, err := schema.NewRecord(e.topics.Lifecycle(schema.EventEnqueued), "ferry/api", enqueued(fmt.Sprintf("%s-%03d", prefix, i), runAt, false))
			if err != nil {
				t.Fatal(err)
			}
			recs = append(recs, rec)
		}
		if err := kafkax.ProduceAll(ctx, api, recs...); err != nil {
			t.Fatal(err)
		}
	}
	rdb := e.rdb()
	const prefix = "ferry:sched:"
	// The first jobs wait for a worker: no worker yet.
	produce("first", first, time.Time{})
	testenv.WaitFor(t, 20*time.Second, "the first jobs queued", func() bool { n, _ := rdb.ZCard(ctx, prefix+"q:default:ready").Result(); return n == first })
	time.Sleep(300 * time.Millisecond) // a checkpoint after them
	snap := takeSnapshot(t, ctx, rdb, prefix)
	// More jobs, delayed ones too, then the checkpoint moves on.
	produce("lost", lost/2, time.Time{})
	produce("lostlater", lost/2, time.Now().Add(2*time.Second))
	testenv.WaitFor(t, 20*time.Second, "the lost jobs queued", func() bool { n, _ := rdb.ZCard(ctx, prefix+"q:default:ready").Result(); return n == first+lost/2 })
	time.Sleep(500 * time.Millisecond)
	snap.restore(t, ctx, rdb, prefix)
	if n, _ := rdb.ZCard(ctx, prefix+"q:default:ready").Result(); n != first {
		t.Fatalf("restored snapshot holds %d ready jobs, want %d", n, first)
	}
	s.mu.Lock()
	s.want = first + lost
	s.mu.Unlock()
	e.fakeWorker(wctx, &workers, "w1", 16, s)
	select {
	case <-s.done:
	case <-time.After(30 * time.Second):
		s.mu.Lock()
		t.Fatalf("only %d of %d jobs completed after Redis went back in time", len(s.completed), first+lost)
	}
	time.Sleep(500 * time.Millisecond) // let any double completion show up
	cancel()
	if err := sched.Wait(); err != nil {
		t.Fatalf("scheduler Run: %v", err)
	}
	wcancel()
	_ = workers.Wait()
	s.checkOnce(t)
}

// tracedParent is the traceparent produceTraced gives a job's enqueued record.
const tracedParent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

// produceTraced produces the enqueued record of job id, due in an hour,
// carrying tracedParent, with this test's client (no tracing hooks).
func (e *env) produceTraced(ctx context.Context, t *testing.T, id string) {
	t.Helper()
	rec, err := schema.NewRecord(e.topics.Lifecycle(schema.EventEnqueued), "ferry/api", enqueued(id, time.Now().Add(time.Hour), false))
	if err != nil {
		t.Fatal(err)
	}
	rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: schema.HeaderTraceParent, Value: []byte(tracedParent)})
	if err := kafkax.ProduceAll(ctx, e.client(), rec); err != nil {
		t.Fatal(err)
	}
}

// TestRebuildKeepsTheTrace: a job the rebuild takes in from the log keeps
// its enqueued record's traceparent, so its dispatch continues the job's
// trace as it does after a consumed enqueued record. The record is in the
// log before the scheduler starts, and this test's Kafka client has no
// tracing hooks, so the consumer adds no trace of its own: the job's tp
// can only come from a rebuild, at start-up and again after the flush.
func TestRebuildKeepsTheTrace(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	e.produceTraced(ctx, t, "traced")
	var sched errgroup.Group
	e.scheduler(ctx, &sched, scheduler.Config{Lease: 30 * time.Second, EpochCheck: 100 * time.Millisecond})

	rdb := e.rdb()
	jobTP := func() string { v, _ := rdb.HGet(ctx, "ferry:sched:job:traced", "tp").Result(); return v }
	testenv.WaitFor(t, 30*time.Second, "the start-up rebuild's trace of the job", func() bool { return jobTP() != "" })
	if err := rdb.FlushDB(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 30*time.Second, "the rebuilt job", func() bool {
		ep, _ := rdb.Get(ctx, "ferry:sched:epoch").Result()
		return ep != "" && rdb.Exists(ctx, "ferry:sched:job:traced").Val() == 1
	})
	if got := jobTP(); got != tracedParent {
		t.Fatalf("rebuilt job's traceparent = %q, want %q", got, tracedParent)
	}
	cancel()
	if err := sched.Wait(); err != nil {
		t.Fatalf("scheduler Run: %v", err)
	}
}

// TestConsumedEnqueuedKeepsItsTrace: when no span is ever recorded (the
// default without an OTLP endpoint), the consumer's fetch hook no longer
// parses each record's traceparent (kafkax.RecordContext does, on demand);
// a consumed enqueued record's trace must still reach its job, which its
// dispatch continues.
func TestConsumedEnqueuedKeepsItsTrace(t *testing.T) {
	prev := otel.GetTextMapPropagator()
	otel.SetTextMapPropagator(propagation.TraceContext{})
	kafkax.SetPropagateOnly(true)
	t.Cleanup(func() { otel.SetTextMapPropagator(prev); kafkax.SetPropagateOnly(false) })
	e := newEnv(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var sched errgroup.Group
	e.scheduler(ctx, &sched, scheduler.Config{Lease: 30 * time.Second, EpochCheck: 100 * time.Millisecond})
	rdb := e.rdb()
	testenv.WaitFor(t, 30*time.Second, "the start-up rebuild", func() bool { return rdb.Exists(ctx, "ferry:sched:epoch").Val() == 1 })

	e.produceTraced(ctx, t, "consumed")
	jobTP := func() string { v, _ := rdb.HGet(ctx, "ferry:sched:job:consumed", "tp").Result(); return v }
	testenv.WaitFor(t, 30*time.Second, "the consumed job", func() bool { return rdb.Exists(ctx, "ferry:sched:job:consumed").Val() == 1 })
	if got := jobTP(); got != tracedParent {
		t.Fatalf("consumed job's traceparent = %q, want %q", got, tracedParent)
	}
	cancel()
	if err := sched.Wait(); err != nil {
		t.Fatalf("scheduler Run: %v", err)
	}
}

// TestRebuildHoldsInFlightJobs: an attempt the log shows handed to a worker
// (started, or only dispatched) and not ended is not dispatched again right
// after a rebuild (its worker most
// likely still runs it, and a copy elsewhere would run it twice): the
// worker's completion ends it; an attempt whose worker went quiet runs
// again once one lease has passed, as an expired lease would.
func TestRebuildHoldsInFlightJobs(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const lease = 3 * time.Second
	var sched, bg errgroup.Group
	e.scheduler(ctx, &sched, scheduler.Config{Lease: lease, EpochCheck: 100 * time.Millisecond})
	wctx, wcancel := context.WithCancel(ctx)
	defer func() { wcancel(); _ = bg.Wait() }()
	cl := e.client(kafkax.Group("ferry-worker-short", e.topics.Dispatch(schema.PoolShort))...)
	dispatches := make(chan schema.Dispatch, 16)
	announceAndRead(wctx, t, &bg, cl, e.topics, "w1", dispatches)

	var recs []*kgo.Record
	for _, id := range []string{"kept", "orphan"} {
		rec, err := schema.NewRecord(e.topics.Lifecycle(schema.EventEnqueued), "ferry/api", enqueued(id, time.Time{}, false))
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, rec)
	}
	if err := kafkax.ProduceAll(ctx, cl, recs...); err != nil {
		t.Fatal(err)
	}
	first := map[string]schema.Dispatch{}
	recs = nil
	for len(first) < 2 {
		select {
		case d := <-dispatches:
			first[d.JobID] = d
			if d.JobID != "kept" {
				continue // orphan: only its dispatch record is in the log, as when its worker got it and died before starting it
			}
			st, _ := schema.NewRecord(e.topics.Lifecycle(schema.EventStarted), "test/worker",
				schema.Started{JobRef: d.JobRef, WorkerID: "w1", DispatchID: d.DispatchID, StartedAt: time.Now().UTC()})
			recs = append(recs, st)
		case <-time.After(20 * time.Second):
			t.Fatalf("dispatched %d of 2 jobs", len(first))
		}
	}
	if err := kafkax.ProduceAll(ctx, cl, recs...); err != nil {
		t.Fatal(err)
	}

	rdb := e.rdb()
	if err := rdb.FlushDB(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 20*time.Second, "the rebuilt state", func() bool { return rdb.Get(ctx, "ferry:sched:epoch").Val() != "" })
	select {
	case d := <-dispatches:
		t.Fatalf("%s dispatched again right after the rebuild while its worker still runs it", d.JobID)
	case <-time.After(lease / 2):
	}
	k := first["kept"]
	done, _ := schema.NewRecord(e.topics.Lifecycle(schema.EventCompleted), "test/worker", schema.Completed{
		JobRef: k.JobRef, WorkerID: "w1", DispatchID: k.DispatchID, StartedAt: time.Now().UTC(), FinishedAt: time.Now().UTC(),
	})
	if err := kafkax.ProduceAll(ctx, cl, done); err != nil {
		t.Fatal(err)
	}
	select {
	case d := <-dispatches:
		if d.JobID != "orphan" || d.Attempt != 1 || d.DispatchID == first["orphan"].DispatchID {
			t.Fatalf("after the lease: dispatched %s attempt %d (%s), want a new dispatch of orphan's attempt 1", d.JobID, d.Attempt, d.DispatchID)
		}
	case <-time.After(3 * lease):
		t.Fatal("the job whose worker went quiet was not dispatched again after the lease")
	}
	select {
	case d := <-dispatches:
		t.Fatalf("%s dispatched again after its completion", d.JobID)
	case <-time.After(time.Second):
	}
	cancel()
	if err := sched.Wait(); err != nil {
		t.Fatalf("scheduler Run: %v", err)
	}
}

// announceAndRead announces worker id with 4 slots of the short pool every
// 200ms and sends each dispatch it reads on cl to out, until ctx ends.
func announceAndRead(ctx context.Context, t *testing.T, g *errgroup.Group, cl *kgo.Client, topics schema.Topics, id string, out chan<- schema.Dispatch) {
	announceSlots(ctx, g, cl, topics, id, 4)
	g.Go(func() error {
		for {
			fs := cl.PollFetches(ctx)
			if ctx.Err() != nil {
				return nil
			}
			fs.EachRecord(func(r *kgo.Record) {
				ev, err := schema.Decode(r)
				if err != nil {
					t.Errorf("decode dispatch: %v", err)
					return
				}
				out <- ev.Data.(schema.Dispatch)
			})
		}
	})
}
