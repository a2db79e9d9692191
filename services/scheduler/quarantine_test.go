package scheduler_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/sync/errgroup"

	"github.com/ferryhq/ferry/events/schema"
	"github.com/ferryhq/ferry/platform/kafkax"
	"github.com/ferryhq/ferry/platform/quarantine"
	"github.com/ferryhq/ferry/platform/service"
	"github.com/ferryhq/ferry/platform/testenv"
	"github.com/ferryhq/ferry/services/scheduler"
)

func init() { quarantine.WatchInterval = 200 * time.Millisecond }

// producerLimit is franz-go's default ProducerBatchMaxBytes (Kafka's
// message.max.bytes default): a record whose batch is larger fails with
// MESSAGE_TOO_LARGE.
const producerLimit = 1_000_012

// longError is what the failing worker reports: within the scheduler's
// bound on error messages, long enough to push the retry record of a job
// sized just under the limit past it.
var longError = strings.Repeat("e", 3000)

// bigJob is an enqueued job whose record sits ~1.5 KB under the producer's
// limit: it and its dispatch can be produced, its retry (the same spec plus
// the failed attempt in its history) cannot.
func bigJob(t *testing.T, topics schema.Topics, id string) *kgo.Record {
	t.Helper()
	ev := enqueued(id, time.Time{}, false)
	mk := func(pad int) *kgo.Record {
		ev.Job.Payload = json.RawMessage(`{"big":"` + strings.Repeat("x", pad) + `"}`)
		rec, err := schema.NewRecord(topics.Lifecycle(schema.EventEnqueued), "ferry/api", ev)
		if err != nil {
			t.Fatal(err)
		}
		return rec
	}
	probe := schema.RecordBytes(mk(0))
	return mk(producerLimit - 1500 - probe)
}

// failingBigWorker is a worker of the short pool that fails every attempt
// of a job whose payload has "big" with longError and completes the others.
func failingBigWorker(ctx context.Context, t *testing.T, g *errgroup.Group, cl *kgo.Client, topics schema.Topics, s *seen) {
	runWorker(ctx, t, g, cl, topics, "wq", 4, s, func(d schema.Dispatch) *schema.ErrorInfo {
		if strings.Contains(string(d.Job.Payload), `"big"`) {
			return &schema.ErrorInfo{Class: schema.ClassAppError, Message: longError}
		}
		return nil
	})
}

// TestUnproducibleDecisionParked: a failed attempt whose retry record is
// over the broker's maximum message size no longer stops the scheduler's
// consumer: the failed record is parked in the quarantine with its error
// and jobs submitted afterwards are dispatched and complete. An operator's
// retry runs it again and, the cause still there, parks it again.
func TestUnproducibleDecisionParked(t *testing.T) {
	deps := testenv.Deps(t, scheduler.Needs)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, err := scheduler.New(ctx, deps, scheduler.Config{})
	if err != nil {
		t.Fatal(err)
	}
	var sched, workers errgroup.Group
	sched.Go(func() error { return s.Run(ctx) })
	seen := &seen{dispatches: map[string]map[string]bool{}, completed: map[string]int{}, done: make(chan struct{}), want: 20}
	wctx, wcancel := context.WithCancel(context.Background())
	defer wcancel()
	wcl := newClient(t, deps, kafkax.Group("ferry-worker-short", deps.Topics.Dispatch(schema.PoolShort))...)
	failingBigWorker(wctx, t, &workers, wcl, deps.Topics, seen)

	api := newClient(t, deps)
	if err := kafkax.ProduceAll(ctx, api, bigJob(t, deps.Topics, "big-1")); err != nil {
		t.Fatal(err)
	}
	st := quarantine.NewStore(deps.Postgres)
	var parked quarantine.Record
	testenv.WaitFor(t, 30*time.Second, "the failed record parked", func() bool {
		rs, err := st.List(ctx, quarantine.Filter{Group: scheduler.Group, Limit: 10})
		if err != nil {
			t.Fatal(err)
		}
		if len(rs) == 1 {
			parked = rs[0]
		}
		return len(rs) == 1
	})
	if parked.Topic != deps.Topics.Lifecycle(schema.EventFailed) || parked.Status != quarantine.StatusParked ||
		!strings.Contains(parked.Error, "MESSAGE_TOO_LARGE") || parked.Tries < quarantine.MaxTries {
		t.Fatalf("parked %+v", parked)
	}

	// Dispatch goes on for everyone else.
	var recs []*kgo.Record
	for i := range 20 {
		rec, err := schema.NewRecord(deps.Topics.Lifecycle(schema.EventEnqueued), "ferry/api", enqueued(fmt.Sprintf("after-%02d", i), time.Time{}, false))
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, rec)
	}
	if err := kafkax.ProduceAll(ctx, api, recs...); err != nil {
		t.Fatal(err)
	}
	select {
	case <-seen.done:
	case <-time.After(30 * time.Second):
		seen.mu.Lock()
		t.Fatalf("only %d of 20 jobs submitted after the poison completed", len(seen.completed))
	}

	// The operator retries; the record still cannot be produced: parked
	// again with one more try.
	if _, err := st.Retry(ctx, parked.ID); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 20*time.Second, "the retried record parked again", func() bool {
		r, err := st.Get(ctx, parked.ID)
		return err == nil && r.Status == quarantine.StatusParked && r.Tries == parked.Tries+1 && strings.Contains(r.Error, "MESSAGE_TOO_LARGE")
	})

	cancel()
	if err := sched.Wait(); err != nil {
		t.Fatalf("scheduler Run: %v", err)
	}
	wcancel()
	if err := workers.Wait(); err != nil {
		t.Fatalf("worker: %v", err)
	}
}

func newClient(t *testing.T, deps *service.Deps, extra ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kafkax.NewClient(deps.KafkaConfig("test"), extra...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}
