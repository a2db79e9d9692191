package groupcommit

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferryhq/ferry/platform/kafkax"
	"github.com/ferryhq/ferry/platform/testenv"
)

// gate is a produce function that records each call's records and holds
// the first held calls (one unless set) until released.
type gate struct {
	mu      sync.Mutex
	calls   [][]*kgo.Record
	held    int
	entered chan struct{}
	release chan struct{}
	fail    func(*kgo.Record) error
}

func newGate() *gate {
	return &gate{held: 1, entered: make(chan struct{}, 100), release: make(chan struct{})}
}

func (g *gate) produce(_ context.Context, recs ...*kgo.Record) kgo.ProduceResults {
	g.mu.Lock()
	hold := len(g.calls) < g.held
	g.calls = append(g.calls, recs)
	g.mu.Unlock()
	g.entered <- struct{}{}
	if hold {
		<-g.release
	}
	out := make(kgo.ProduceResults, 0, len(recs))
	for i := len(recs) - 1; i >= 0; i-- { // completion order differs from input order
		var err error
		if g.fail != nil {
			err = g.fail(recs[i])
		}
		out = append(out, kgo.ProduceResult{Record: recs[i], Err: err})
	}
	return out
}

// queued counts the requests waiting for a produce slot.
func (c *Committer) queued() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.waiting)
}

func waitQueued(t *testing.T, c *Committer, n int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for c.queued() < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d requests waiting, want %d", c.queued(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

func rec(key string) *kgo.Record { return &kgo.Record{Key: []byte(key), Topic: "t"} }

// TestRequestsDuringAProduceShareTheNext: with one produce in flight,
// requests that arrive while it is go out together in the next produce
// call, each answered with its own records' results.
func TestRequestsDuringAProduceShareTheNext(t *testing.T) {
	g := newGate()
	c := New(g.produce, time.Minute, 1)
	var wg sync.WaitGroup
	wg.Go(func() {
		if errs := c.Produce(context.Background(), rec("first")); errs[0] != nil {
			t.Errorf("first: %v", errs)
		}
	})
	<-g.entered
	const n = 10
	for i := range n {
		wg.Go(func() {
			errs := c.Produce(context.Background(), rec(fmt.Sprint("a", i)), rec(fmt.Sprint("b", i)))
			if len(errs) != 2 || errs[0] != nil || errs[1] != nil {
				t.Errorf("request %d: %v", i, errs)
			}
		})
	}
	waitQueued(t, c, n)
	close(g.release)
	wg.Wait()
	if len(g.calls) != 2 || len(g.calls[1]) != 2*n {
		t.Fatalf("produce calls of %v records, want [1 %d]", lens(g.calls), 2*n)
	}
}

// TestUpToInflightProducesAtOnce: a request goes out at once while fewer
// than inflight produces are in flight, without waiting for the one before
// it; once every slot is busy, requests wait and share the next call.
func TestUpToInflightProducesAtOnce(t *testing.T) {
	g := newGate()
	g.held = 2
	c := New(g.produce, time.Minute, 2)
	var wg sync.WaitGroup
	produce := func(key string) {
		wg.Go(func() {
			if errs := c.Produce(context.Background(), rec(key)); errs[0] != nil {
				t.Errorf("%s: %v", key, errs)
			}
		})
	}
	produce("first")
	<-g.entered
	produce("second") // the first is held: the second takes the other slot
	select {
	case <-g.entered:
	case <-time.After(20 * time.Second):
		close(g.release)
		t.Fatal("the second request waits for the first produce with a slot free")
	}
	const n = 5
	for i := range n {
		produce(fmt.Sprint("waiting", i))
	}
	waitQueued(t, c, n)
	close(g.release)
	wg.Wait()
	if fmt.Sprint(lens(g.calls)) != fmt.Sprint([]int{1, 1, n}) {
		t.Fatalf("produce calls of %v records, want [1 1 %d]", lens(g.calls), n)
	}
}

func lens(calls [][]*kgo.Record) []int {
	var out []int
	for _, c := range calls {
		out = append(out, len(c))
	}
	return out
}

// TestFailureFailsOnlyItsRecords: a record the producer fails fails its own
// request's record only; the other requests of the group succeed.
func TestFailureFailsOnlyItsRecords(t *testing.T) {
	g := newGate()
	boom := errors.New("boom")
	g.fail = func(r *kgo.Record) error {
		if string(r.Key) == "bad" {
			return boom
		}
		return nil
	}
	c := New(g.produce, time.Minute, 1)
	var wg sync.WaitGroup
	wg.Go(func() { c.Produce(context.Background(), rec("first")) })
	<-g.entered
	results := make([][]error, 3)
	bodies := [][]*kgo.Record{{rec("ok1")}, {rec("ok2"), rec("bad")}, {rec("ok3")}}
	for i, recs := range bodies {
		wg.Go(func() { results[i] = c.Produce(context.Background(), recs...) })
	}
	waitQueued(t, c, 3)
	close(g.release)
	wg.Wait()
	want := [][]error{{nil}, {nil, boom}, {nil}}
	for i := range want {
		for k := range want[i] {
			if !errors.Is(results[i][k], want[i][k]) || (want[i][k] == nil) != (results[i][k] == nil) {
				t.Errorf("request %d record %d: %v, want %v", i, k, results[i][k], want[i][k])
			}
		}
	}
}

// TestCallerGivesUp: a caller whose context ends stops waiting (with its
// context's error) without failing the group for the others.
func TestCallerGivesUp(t *testing.T) {
	g := newGate()
	c := New(g.produce, time.Minute, 1)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var mine []error
	wg.Go(func() { mine = c.Produce(ctx, rec("mine")) })
	<-g.entered
	var other []error
	wg.Go(func() { other = c.Produce(context.Background(), rec("other")) })
	waitQueued(t, c, 1)
	cancel()
	close(g.release)
	wg.Wait()
	if !errors.Is(mine[0], context.Canceled) || other[0] != nil {
		t.Fatalf("cancelled caller: %v, other: %v", mine, other)
	}
}

// TestRealBroker: concurrent requests through a durable client on the
// embedded broker are all acknowledged, in fewer produce calls than
// requests.
func TestRealBroker(t *testing.T) {
	cl, err := kafkax.NewClient(kafkax.Config{Brokers: []string{testenv.Kafka(t)}}, kgo.AllowAutoTopicCreation())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	var callsMu sync.Mutex
	calls := 0
	c := New(func(ctx context.Context, recs ...*kgo.Record) kgo.ProduceResults {
		callsMu.Lock()
		calls++
		callsMu.Unlock()
		return cl.ProduceSync(ctx, recs...)
	}, time.Minute, 4)
	if errs := c.Produce(context.Background(), &kgo.Record{Topic: "gc", Value: []byte("warm")}); errs[0] != nil {
		t.Fatal(errs[0])
	}
	const n = 200
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			r := &kgo.Record{Topic: "gc", Key: []byte(fmt.Sprint(i)), Value: []byte("v")}
			if errs := c.Produce(context.Background(), r); errs[0] != nil || r.Offset < 0 {
				t.Errorf("record %d: %v", i, errs[0])
			}
		})
	}
	wg.Wait()
	t.Logf("%d requests in %d produce calls", n, calls-1)
	// Every acknowledged record is on the topic, once.
	rd, err := kgo.NewClient(kgo.SeedBrokers(cl.OptValue(kgo.SeedBrokers).([]string)...), kgo.ConsumeTopics("gc"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	seen := map[string]int{}
	for total := 0; total < n+1 && ctx.Err() == nil; {
		rd.PollFetches(ctx).EachRecord(func(r *kgo.Record) { seen[string(r.Key)]++; total++ })
	}
	for i := range n {
		if seen[fmt.Sprint(i)] != 1 {
			t.Errorf("record %d on the topic %d times", i, seen[fmt.Sprint(i)])
		}
	}
}
