package worker_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ferryhq/ferry/events/schema"
	"github.com/ferryhq/ferry/platform/devstack"
	"github.com/ferryhq/ferry/services/worker"
)

// controlledKafka starts an embedded broker whose requests the test can
// intercept.
func controlledKafka(t *testing.T) (addr string, cluster *kfake.Cluster) {
	t.Helper()
	k, err := devstack.StartKafka(devstack.KafkaConfig{Addr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := k.Stop(ctx); err != nil {
			t.Errorf("stopping kafka: %v", err)
		}
	})
	return k.Addr(), k.Cluster()
}

// failProduceTo makes the broker refuse, once, the first produce request
// that writes to topic (with a non-retryable error, so the client gives
// up at once). failed is closed when it did.
func (b *bench) failProduceTo(c *kfake.Cluster, topic string) (failed <-chan struct{}) {
	b.t.Helper()
	// Produce v13+ names topics by id.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	details, err := kadm.NewClient(b.prod).ListTopics(ctx, topic)
	if err != nil || details.Error() != nil {
		b.t.Fatalf("topic id of %s: %v %v", topic, err, details.Error())
	}
	id := details[topic].ID
	ch := make(chan struct{})
	c.ControlKey(int16(kmsg.Produce), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		req := kr.(*kmsg.ProduceRequest)
		hit := false
		for _, rt := range req.Topics {
			hit = hit || rt.Topic == topic || rt.TopicID == id
		}
		if !hit {
			c.KeepControl()
			return nil, nil, false
		}
		resp := req.ResponseKind().(*kmsg.ProduceResponse)
		for _, rt := range req.Topics {
			st := kmsg.NewProduceResponseTopic()
			st.Topic, st.TopicID = rt.Topic, rt.TopicID
			for _, rp := range rt.Partitions {
				sp := kmsg.NewProduceResponseTopicPartition()
				sp.Partition = rp.Partition
				sp.ErrorCode = kerr.PolicyViolation.Code
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		c.DropControl() // once: it was kept for the requests it let through
		close(ch)
		return resp, nil, true
	})
	return ch
}

// loseReport dispatches a job of type typ and makes the broker refuse the
// worker's report of it (an event of type et); it returns once the worker
// is done with the run.
func (b *bench) loseReport(cluster *kfake.Cluster, typ string, et schema.EventType) schema.Dispatch {
	b.t.Helper()
	failed := b.failProduceTo(cluster, b.topics.Lifecycle(et))
	d := b.dispatch(typ, nil)
	select {
	case <-failed:
	case <-time.After(waitLimit):
		b.t.Fatalf("the worker never produced the %s record", et)
	}
	// The run is over once the worker announces no job running.
	failedAt := time.Now().UTC()
	b.waitFor("the run over", func(ev schema.Event) bool {
		ws, ok := ev.Data.(schema.WorkerStatus)
		return ok && ws.Running == 0 && ws.At.After(failedAt)
	})
	return d
}

// TestUnacknowledgedCompletionIsReReported is issue 11 item 4: the worker
// ran a job but its completed record was refused by the broker. When the
// lease expires the scheduler dispatches the same attempt again; the worker
// must report the outcome it knows (with the new dispatch id) instead of
// dropping the dispatch as "already completed", which left the job running
// forever, and without running the handler a second time.
func TestUnacknowledgedCompletionIsReReported(t *testing.T) {
	t.Parallel()
	addr, cluster := controlledKafka(t)
	b := newBenchOn(t, addr)
	var runs atomic.Int64
	b.start(worker.Config{StatusInterval: 100 * time.Millisecond}, func(r *worker.Registry) {
		r.Register("count", func(ctx context.Context, job *worker.Job) (any, error) {
			runs.Add(1)
			return map[string]any{"n": 42}, nil
		})
	})
	first := b.loseReport(cluster, "count", schema.EventCompleted)
	// The lease expired: the scheduler dispatches the same attempt again.
	again := b.dispatch("count", nil, withID(first.JobID))
	got := b.waitFor("re-reported completion", func(ev schema.Event) bool {
		c, ok := ev.Data.(schema.Completed)
		return ok && c.JobID == first.JobID
	}).Data.(schema.Completed)
	if got.DispatchID != again.DispatchID || got.Attempt != first.Attempt || string(got.Result) != `{"n":42}` {
		t.Errorf("re-reported %+v; want dispatch %s, attempt %d, the first run's result", got, again.DispatchID, first.Attempt)
	}
	if n := runs.Load(); n != 1 {
		t.Errorf("handler ran %d times, want once: the outcome was known", n)
	}
	// Now acknowledged, the job is remembered as completed: a further
	// duplicate is dropped. Marker jobs on every partition show it was read.
	b.dispatch("count", nil, withID(first.JobID))
	for range 16 {
		b.completed(b.dispatch("count", nil))
	}
	if n := len(b.all(ofJob[schema.Completed](first.JobID))); n != 1 {
		t.Errorf("job completed %d times, want once", n)
	}
}

// TestUnacknowledgedFailureIsReReported: the same for a failure, which the
// scheduler applies only for the dispatch it has in flight, so the
// re-report carries the new dispatch id.
func TestUnacknowledgedFailureIsReReported(t *testing.T) {
	t.Parallel()
	addr, cluster := controlledKafka(t)
	b := newBenchOn(t, addr)
	var runs atomic.Int64
	b.start(worker.Config{StatusInterval: 100 * time.Millisecond}, func(r *worker.Registry) {
		r.Register("refuse", func(ctx context.Context, job *worker.Job) (any, error) {
			runs.Add(1)
			return nil, worker.Permanent(errors.New("refused for good"))
		})
	})
	first := b.loseReport(cluster, "refuse", schema.EventFailed)
	again := b.dispatch("refuse", nil, withID(first.JobID))
	got := b.failed(again)
	if got.DispatchID != again.DispatchID || got.Error.Class != schema.ClassPermanent || got.Error.Message != "refused for good" {
		t.Errorf("re-reported %+v; want dispatch %s, the first run's permanent error", got, again.DispatchID)
	}
	if n := runs.Load(); n != 1 {
		t.Errorf("handler ran %d times, want once: the outcome was known", n)
	}
}
