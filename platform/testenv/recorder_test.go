package testenv_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferryhq/ferry/events/schema"
	"github.com/ferryhq/ferry/platform/testenv"
)

// failure runs f with a testing.TB whose Fatal ends f, and returns the
// failure message ("" when f returned).
func failure(t *testing.T, f func(testing.TB)) string {
	r := &fatalRecorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(r)
	}()
	<-done
	return r.msg
}

// TestRecorder: events produced before and after the recorder starts are
// kept in order, a record that is no Ferry event is remembered apart, and
// WaitFor returns the first match or fails naming what it waited for.
func TestRecorder(t *testing.T) {
	brokers := []string{testenv.Kafka(t)}
	topic := schema.Topics{}.Lifecycle(schema.EventStarted)
	prod, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.AllowAutoTopicCreation())
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	produce := func(recs ...*kgo.Record) {
		t.Helper()
		if err := prod.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	started := func(id string) *kgo.Record {
		rec, err := schema.NewRecord(topic, "ferry/test", schema.Started{JobRef: schema.JobRef{JobID: id, TenantID: "acme", Attempt: 1},
			WorkerID: "w", DispatchID: "d-" + id, StartedAt: time.Now().UTC()})
		if err != nil {
			t.Fatal(err)
		}
		return rec
	}
	of := func(id string) func(schema.Event) bool {
		return func(ev schema.Event) bool { s, ok := ev.Data.(schema.Started); return ok && s.JobID == id }
	}
	produce(started("job-1"), &kgo.Record{Topic: topic, Value: []byte("not an event")})

	rec := testenv.Record(t, brokers, topic)
	produce(started("job-2"))
	if ev := rec.WaitFor(t, 30*time.Second, "job-2 started", of("job-2")); ev.Data.(schema.Started).DispatchID != "d-job-2" {
		t.Fatalf("WaitFor returned %+v", ev)
	}
	evs := rec.Events()
	if len(evs) != 2 || !of("job-1")(evs[0]) || !of("job-2")(evs[1]) {
		t.Fatalf("events %+v, want job-1 then job-2", evs)
	}
	if n := rec.Count(of("job-1")); n != 1 {
		t.Errorf("Count(job-1) = %d", n)
	}
	if bad := rec.Undecodable(); len(bad) != 1 || !strings.Contains(bad[0].Error(), topic) {
		t.Errorf("Undecodable = %v, want the one record that is not an event", bad)
	}
	msg := failure(t, func(tb testing.TB) { rec.WaitFor(tb, 300*time.Millisecond, "job-3 started", of("job-3")) })
	if !strings.Contains(msg, "job-3 started") {
		t.Errorf("WaitFor of an event that never comes: failure %q", msg)
	}
}

func TestWaitForAndEventually(t *testing.T) {
	n := 0
	testenv.WaitFor(t, 30*time.Second, "the third poll", func() bool { n++; return n == 3 })
	if msg := failure(t, func(tb testing.TB) { testenv.WaitFor(tb, 200*time.Millisecond, "never", func() bool { return false }) }); !strings.Contains(msg, "waiting for never") {
		t.Errorf("WaitFor failure %q", msg)
	}
	if msg := failure(t, func(tb testing.TB) {
		testenv.Eventually(tb, 200*time.Millisecond, func() error { return errors.New("still not") })
	}); !strings.Contains(msg, "still not") {
		t.Errorf("Eventually failure %q, want the check's last error", msg)
	}
}
