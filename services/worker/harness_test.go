package worker_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/goleak"

	"github.com/ferryhq/ferry/events/schema"
	"github.com/ferryhq/ferry/platform/config"
	"github.com/ferryhq/ferry/platform/kafkax"
	"github.com/ferryhq/ferry/platform/service"
	"github.com/ferryhq/ferry/platform/testenv"
	"github.com/ferryhq/ferry/services/worker"
	"github.com/ferryhq/ferry/services/worker/handlers"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// Idle keep-alive connections of the http handler's client.
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
	)
}

// bench is a test acting as the scheduler: it produces dispatches and
// cancellations and reads everything the worker produces.
type bench struct {
	t      *testing.T
	topics schema.Topics
	deps   *service.Deps
	prod   *kgo.Client

	// rec records every event the worker produces.
	rec *testenv.Recorder
}

func newBench(t *testing.T) *bench {
	t.Helper()
	return newBenchOn(t, testenv.Kafka(t))
}

// newBenchOn is newBench on the broker at addr, for tests that control it.
func newBenchOn(t *testing.T, addr string) *bench {
	t.Helper()
	topics := schema.Topics{}
	prod, err := kafkax.NewClient(kafkax.Config{Brokers: []string{addr}, ClientID: "test-scheduler"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(prod.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := kafkax.EnsureTopics(ctx, prod, kafkax.TopicSpec{Names: topics.All(), Partitions: 4}); err != nil {
		t.Fatal(err)
	}
	b := &bench{
		t: t, topics: topics, prod: prod,
		deps: &service.Deps{
			Common: config.Common{KafkaBrokers: []string{addr}},
			Topics: topics,
			Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
			Kafka:  prod,
		},
	}
	b.rec = testenv.Record(t, []string{addr}, append(topics.LifecycleTopics(), topics.Workers())...)
	t.Cleanup(func() {
		for _, err := range b.rec.Undecodable() {
			t.Errorf("worker produced an undecodable record: %v", err)
		}
	})
	return b
}

// start runs a worker until the test ends (or stop is called); stop
// returns Run's error.
func (b *bench) start(cfg worker.Config, register func(*worker.Registry)) (stop func() error) {
	b.t.Helper()
	if cfg.WorkerID == "" {
		cfg.WorkerID = "w-" + b.t.Name()
	}
	reg := worker.NewRegistry()
	handlers.Register(reg, handlers.Options{Allow: b.deps.Common.OutboundAllow})
	if register != nil {
		register(reg)
	}
	svc, err := worker.New(b.deps, cfg, reg)
	if err != nil {
		b.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	res := make(chan error, 1)
	go func() { res <- svc.Run(ctx) }()
	var once sync.Once
	var runErr error
	stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case runErr = <-res:
			case <-time.After(60 * time.Second):
				b.t.Fatal("Run did not return within 60s of cancellation")
			}
		})
		return runErr
	}
	b.t.Cleanup(func() {
		if err := stop(); err != nil {
			b.t.Errorf("Run: %v", err)
		}
	})
	// Wait for the worker's first announcement: it is then consuming
	// cancellations.
	b.waitFor("first WorkerStatus", func(ev schema.Event) bool {
		ws, ok := ev.Data.(schema.WorkerStatus)
		return ok && ws.WorkerID == cfg.WorkerID
	})
	return stop
}

type jobOpt func(*schema.Dispatch)

func withTimeout(d time.Duration) jobOpt {
	return func(x *schema.Dispatch) { x.Job.Timeout = schema.Duration(d) }
}
func withAttempt(n int) jobOpt { return func(x *schema.Dispatch) { x.Attempt = n } }
func withID(id string) jobOpt  { return func(x *schema.Dispatch) { x.JobID = id } }

// dispatch sends a job to the short pool and returns its dispatch.
func (b *bench) dispatch(typ string, payload any, opts ...jobOpt) schema.Dispatch {
	b.t.Helper()
	d := b.newDispatch(typ, payload, opts...)
	b.produce(b.topics.Dispatch(schema.PoolShort), d)
	return d
}

// newDispatch is a dispatch of a job to the short pool, not sent.
func (b *bench) newDispatch(typ string, payload any, opts ...jobOpt) schema.Dispatch {
	b.t.Helper()
	raw, err := json.Marshal(payload)
	if err != nil {
		b.t.Fatal(err)
	}
	now := time.Now().UTC()
	d := schema.Dispatch{
		JobRef:     schema.JobRef{JobID: schema.NewEventID(), TenantID: "tenant-1", Attempt: 1},
		DispatchID: schema.NewEventID(),
		Job:        schema.JobSpec{Type: typ, Queue: "default", Priority: 5, Payload: raw, MaxAttempts: 5, Pool: schema.PoolShort},
		CreatedAt:  now, ReadyAt: now, LeaseUntil: now.Add(30 * time.Second),
	}
	for _, o := range opts {
		o(&d)
	}
	return d
}

func (b *bench) produce(topic string, data schema.Data) {
	b.t.Helper()
	rec, err := schema.NewRecord(topic, "ferry/test", data)
	if err != nil {
		b.t.Fatal(err)
	}
	if err := b.prod.ProduceSync(context.Background(), rec).FirstErr(); err != nil {
		b.t.Fatal(err)
	}
}

func (b *bench) cancelJob(d schema.Dispatch) {
	b.produce(b.topics.Lifecycle(schema.EventCancelled), schema.Cancelled{JobRef: d.JobRef, Reason: "test", At: time.Now().UTC()})
}

const waitLimit = 30 * time.Second

// waitFor returns the first event matching ok, failing the test after waitLimit.
func (b *bench) waitFor(what string, ok func(schema.Event) bool) schema.Event {
	b.t.Helper()
	return b.rec.WaitFor(b.t, waitLimit, what, ok)
}

// terminal waits for the completed or failed event of job.
func (b *bench) terminal(d schema.Dispatch) schema.Data {
	b.t.Helper()
	return b.waitFor("terminal event of "+d.JobID, func(ev schema.Event) bool {
		switch x := ev.Data.(type) {
		case schema.Completed:
			return x.JobID == d.JobID && x.Attempt == d.Attempt
		case schema.Failed:
			return x.JobID == d.JobID && x.Attempt == d.Attempt
		}
		return false
	}).Data
}

func (b *bench) failed(d schema.Dispatch) schema.Failed {
	b.t.Helper()
	ev := b.terminal(d)
	f, ok := ev.(schema.Failed)
	if !ok {
		b.t.Fatalf("job %s: got %T %+v, want failed", d.Job.Type, ev, ev)
	}
	return f
}

func (b *bench) completed(d schema.Dispatch) schema.Completed {
	b.t.Helper()
	ev := b.terminal(d)
	c, ok := ev.(schema.Completed)
	if !ok {
		b.t.Fatalf("job %s: got %T %+v, want completed", d.Job.Type, ev, ev)
	}
	return c
}

// all returns the received events matching ok.
func (b *bench) all(ok func(schema.Event) bool) []schema.Event { return b.rec.Matching(ok) }

func ofJob[T interface {
	schema.Lifecycle
}](jobID string) func(schema.Event) bool {
	return func(ev schema.Event) bool {
		x, ok := ev.Data.(T)
		return ok && x.Ref().JobID == jobID
	}
}
