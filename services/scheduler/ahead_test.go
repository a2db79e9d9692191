package scheduler

import (
	"context"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferryhq/ferry/events/schema"
	"github.com/ferryhq/ferry/platform/kafkax"
	"github.com/ferryhq/ferry/platform/service"
	"github.com/ferryhq/ferry/platform/testenv"
)

// TestDecisionPipeMarksInPollOrder: batches whose decisions are produced
// ahead are marked for commit in the order they were polled, whatever
// order their produces end in; a batch with a decision the broker refuses
// (over its maximum message size) is not marked but settled again, before
// any later batch is marked; drain returns once all are done, and the gate
// is released once per batch.
func TestDecisionPipeMarksInPollOrder(t *testing.T) {
	deps := testenv.Deps(t, service.Needs{Kafka: true})
	cl, err := kafkax.NewClient(deps.KafkaConfig("test"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	topic := deps.Topics.Lifecycle(schema.EventEnqueued)
	polled := func(offset int64) []*kgo.Record { return []*kgo.Record{{Topic: "in", Offset: offset}} }
	decision := func(bytes int) []*kgo.Record {
		return []*kgo.Record{{Topic: topic, Key: []byte("job"), Value: []byte(strings.Repeat("x", bytes))}}
	}

	var (
		mu    sync.Mutex
		order []string
	)
	note := func(what string, recs []*kgo.Record) {
		mu.Lock()
		defer mu.Unlock()
		for _, r := range recs {
			order = append(order, what+":"+string(rune('0'+r.Offset)))
		}
	}
	p := newDecisionPipe()
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.run(context.Background(), func(recs ...*kgo.Record) { note("marked", recs) },
			func(_ context.Context, recs []*kgo.Record) error { note("settled", recs); return nil })
	}()
	var released atomic.Int64
	release := func() { released.Add(1) }
	ctx := context.Background()
	for _, b := range []struct {
		offset int64
		out    []*kgo.Record
	}{
		{1, decision(10)},
		{2, decision(2_000_000)}, // over the producer's maximum: refused
		{3, nil},
		{4, append(decision(10), decision(10)...)},
	} {
		p.reserve()
		p.push(ctx, cl, polled(b.offset), b.out, release)
	}
	drained := make(chan struct{})
	go func() { p.drain(); close(drained) }()
	select {
	case <-drained:
	case <-time.After(30 * time.Second):
		t.Fatal("drain did not return")
	}
	p.stop()
	<-done
	want := []string{"marked:1", "settled:2", "marked:3", "marked:4"}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(order, want) {
		t.Fatalf("order %v, want %v", order, want)
	}
	if n := released.Load(); n != 4 {
		t.Fatalf("gate released %d times, want 4", n)
	}
}
