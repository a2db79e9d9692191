package hub

import (
	"sync"
	"sync/atomic"
	"testing"

	"github.com/ferryhq/ferry/events/schema"
)

func ev(seq int64, tenant, job string, t schema.EventType) *Event {
	return NewEvent(Attrs{Seq: seq, Tenant: tenant, JobID: job, Type: t, Queue: "default", JobType: "email", Tags: []string{"a", "b"}},
		func() []byte { return []byte(`{"x":1}`) })
}

func TestFrame(t *testing.T) {
	got := string(ev(42, "acme", "j1", schema.EventProgress).Frame())
	want := "id: 42\nevent: progress\ndata: {\"x\":1}\n\n"
	if got != want {
		t.Fatalf("frame %q, want %q", got, want)
	}
}

func TestFilterMatch(t *testing.T) {
	e := ev(1, "acme", "j1", schema.EventStarted)
	cases := []struct {
		name string
		f    Filter
		want bool
	}{
		{"empty", Filter{}, true},
		{"job", Filter{JobID: "j1"}, true},
		{"other job", Filter{JobID: "j2"}, false},
		{"event", Filter{Events: []schema.EventType{schema.EventCompleted, schema.EventStarted}}, true},
		{"other event", Filter{Events: []schema.EventType{schema.EventCompleted}}, false},
		{"queue", Filter{Queues: []string{"default"}}, true},
		{"other queue", Filter{Queues: []string{"bulk"}}, false},
		{"type", Filter{JobTypes: []string{"sms", "email"}}, true},
		{"other type", Filter{JobTypes: []string{"sms"}}, false},
		{"tag", Filter{Tags: []string{"z", "b"}}, true},
		{"other tag", Filter{Tags: []string{"z"}}, false},
		{"all", Filter{JobID: "j1", Queues: []string{"default"}, JobTypes: []string{"email"}, Tags: []string{"a"}, Events: []schema.EventType{schema.EventStarted}}, true},
	}
	for _, c := range cases {
		if got := c.f.Match(e); got != c.want {
			t.Errorf("%s: Match = %v, want %v", c.name, got, c.want)
		}
	}
}

func TestPublishTenantScopedAndOrdered(t *testing.T) {
	h := New(10)
	a := h.Subscribe("acme", Filter{})
	b := h.Subscribe("globex", Filter{})
	h.Publish([]*Event{ev(1, "acme", "j1", schema.EventEnqueued), ev(2, "globex", "j2", schema.EventEnqueued), ev(3, "acme", "j1", schema.EventStarted)})
	select {
	case <-a.Ready():
	default:
		t.Fatal("acme subscriber not signalled")
	}
	got, over := a.Take(nil)
	if over || len(got) != 2 || got[0].Seq != 1 || got[1].Seq != 3 {
		t.Fatalf("acme got %v overflow %v", got, over)
	}
	got, _ = b.Take(nil)
	if len(got) != 1 || got[0].Seq != 2 {
		t.Fatalf("globex got %v", got)
	}
	if h.Len() != 2 {
		t.Fatalf("Len %d", h.Len())
	}
	h.Unsubscribe(a)
	h.Unsubscribe(a)
	h.Publish([]*Event{ev(4, "acme", "j1", schema.EventCompleted)})
	if got, _ := a.Take(nil); len(got) != 0 || h.Len() != 1 {
		t.Fatalf("unsubscribed got %v, Len %d", got, h.Len())
	}
}

func TestOverflowNeverBlocks(t *testing.T) {
	h := New(3)
	slow := h.Subscribe("acme", Filter{})
	fast := h.Subscribe("acme", Filter{})
	for i := range 10 {
		h.Publish([]*Event{ev(int64(i+1), "acme", "j1", schema.EventProgress)})
		if got, over := fast.Take(nil); over || len(got) != 1 {
			t.Fatalf("fast subscriber: %d events, overflow %v", len(got), over)
		}
	}
	if got, over := slow.Take(nil); !over || got != nil {
		t.Fatalf("slow subscriber: %d events, overflow %v; want overflow", len(got), over)
	}
}

func TestTakeReusesSpare(t *testing.T) {
	h := New(8)
	s := h.Subscribe("acme", Filter{})
	h.Publish([]*Event{ev(1, "acme", "j", schema.EventEnqueued)})
	first, _ := s.Take(nil)
	h.Publish([]*Event{ev(2, "acme", "j", schema.EventStarted)})
	second, _ := s.Take(first)
	if len(second) != 1 || second[0].Seq != 2 {
		t.Fatalf("second take %v", second)
	}
}

// An event's data line is rendered when it is first written, once, however
// many clients write it at the same time; an event nobody writes is never
// rendered.
func TestFrameRenderedOnceWhenFirstWritten(t *testing.T) {
	var calls atomic.Int32
	e := NewEvent(Attrs{Seq: 7, Tenant: "acme", JobID: "j1", Type: schema.EventStarted}, func() []byte {
		calls.Add(1)
		return []byte(`{"x":1}`)
	})
	if n := calls.Load(); n != 0 {
		t.Fatalf("rendered %d times before anything was written", n)
	}
	frames := make([][]byte, 8)
	var wg sync.WaitGroup
	for i := range frames {
		wg.Go(func() { frames[i] = e.Frame() })
	}
	wg.Wait()
	if n := calls.Load(); n != 1 {
		t.Fatalf("rendered %d times, want once", n)
	}
	want := "id: 7\nevent: started\ndata: {\"x\":1}\n\n"
	for _, f := range frames {
		if string(f) != want {
			t.Fatalf("frame %q, want %q", f, want)
		}
	}
	if string(e.Data()) != `{"x":1}` {
		t.Fatalf("data %q", e.Data())
	}
}
