package testenv

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferryhq/ferry/events/schema"
)

// Recorder reads Kafka topics from their start in the background and keeps
// every record that decodes as a Ferry event, in arrival order, so a test
// can wait for an event, count events or look at all of them. A record that
// does not decode is not kept but remembered (see [Recorder.Undecodable]):
// hostile tests write such records on purpose, others assert there are none.
type Recorder struct {
	mu          sync.Mutex
	events      []schema.Event
	undecodable []error
	// arrived is closed, and replaced, whenever events grow.
	arrived chan struct{}
}

// Record starts a Recorder of topics on brokers; it stops when t ends.
func Record(t testing.TB, brokers []string, topics ...string) *Recorder {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topics...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(100*time.Millisecond),
		kgo.MetadataMinAge(100*time.Millisecond))
	if err != nil {
		t.Fatalf("testenv: recorder: %v", err)
	}
	r := &Recorder{arrived: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			cl.PollFetches(ctx).EachRecord(r.add)
		}
	}()
	t.Cleanup(func() { cancel(); <-done; cl.Close() })
	return r
}

// add decodes rec and keeps it.
func (r *Recorder) add(rec *kgo.Record) {
	ev, err := schema.Decode(rec)
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		r.undecodable = append(r.undecodable, fmt.Errorf("%s offset %d: %w", rec.Topic, rec.Offset, err))
		return
	}
	r.events = append(r.events, ev)
	close(r.arrived)
	r.arrived = make(chan struct{})
}

// Events returns the events recorded so far.
func (r *Recorder) Events() []schema.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]schema.Event(nil), r.events...)
}

// Matching returns the events recorded so far that match.
func (r *Recorder) Matching(match func(schema.Event) bool) []schema.Event {
	var out []schema.Event
	for _, ev := range r.Events() {
		if match(ev) {
			out = append(out, ev)
		}
	}
	return out
}

// Count returns how many events recorded so far match.
func (r *Recorder) Count(match func(schema.Event) bool) int { return len(r.Matching(match)) }

// Undecodable returns why each record that did not decode as a Ferry event
// was not kept.
func (r *Recorder) Undecodable() []error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]error(nil), r.undecodable...)
}

// WaitFor returns the first recorded event that matches, waiting for it to
// arrive, and fails t, naming what it waited for, once within has passed.
func (r *Recorder) WaitFor(t testing.TB, within time.Duration, what string, match func(schema.Event) bool) schema.Event {
	t.Helper()
	deadline := time.After(within)
	seen := 0
	for {
		r.mu.Lock()
		fresh, arrived := r.events[seen:], r.arrived
		seen = len(r.events)
		r.mu.Unlock()
		for _, ev := range fresh {
			if match(ev) {
				return ev
			}
		}
		select {
		case <-arrived:
		case <-deadline:
			t.Fatalf("after %s: timed out waiting for %s", within, what)
		}
	}
}
