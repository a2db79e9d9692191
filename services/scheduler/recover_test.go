package scheduler_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/sync/errgroup"

	"github.com/ferryhq/ferry/events/schema"
	"github.com/ferryhq/ferry/platform/kafkax"
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

	opts, err := redis.ParseURL(e.redis)
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opts)
	defer rdb.Close()
	s.mu.Lock()
	s.done, s.want = make(chan struct{}), now+later
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
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, c := range s.completed {
		if c != 1 {
			t.Errorf("%s completed %d times", id, c)
		}
	}
	if len(s.early) > 0 {
		t.Errorf("%d jobs dispatched before their run_at, e.g. %s", len(s.early), s.early[0])
	}
}
