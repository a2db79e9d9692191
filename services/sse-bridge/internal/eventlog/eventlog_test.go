package eventlog

import (
	"errors"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferryhq/ferry/events/schema"
	"github.com/ferryhq/ferry/services/sse-bridge/internal/hub"
)

// clock is a settable clock for the hold.
type clock struct{ now time.Time }

func (c *clock) Now() time.Time { return c.now }

func newLog(t *testing.T, size int, hold time.Duration) (*Log, *hub.Sub, *clock) {
	t.Helper()
	c := &clock{now: time.Now()}
	h := hub.New(1000)
	l := New(Config{Size: size, Hold: hold, Now: c.Now}, h, slog.New(slog.NewTextHandler(io.Discard, nil)))
	return l, h.Subscribe("acme", hub.Filter{}), c
}

func rec(t *testing.T, d schema.Data) *kgo.Record {
	t.Helper()
	topics := schema.Topics{}
	r, err := schema.NewRecord(topics.Lifecycle(d.(schema.Lifecycle).EventType()), "test", d)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func ref(job, tenant string, attempt int) schema.JobRef {
	return schema.JobRef{JobID: job, TenantID: tenant, Attempt: attempt}
}

func enqueued(job, tenant, queue string) schema.Data {
	now := time.Now().UTC()
	return schema.Enqueued{JobRef: ref(job, tenant, 1), Job: schema.JobSpec{Type: "email", Queue: queue, Priority: 5, MaxAttempts: 3, Pool: "short"},
		CreatedAt: now, RunAt: now, Reason: schema.ReasonSubmitted}
}

func started(job string) schema.Data {
	return schema.Started{JobRef: ref(job, "acme", 1), WorkerID: "w", DispatchID: "d", StartedAt: time.Now().UTC()}
}

func completed(job string) schema.Data {
	now := time.Now().UTC()
	return schema.Completed{JobRef: ref(job, "acme", 1), WorkerID: "w", DispatchID: "d", StartedAt: now, FinishedAt: now}
}

// published takes what the hub delivered, as "job/event" names.
func published(t *testing.T, s *hub.Sub) []string {
	t.Helper()
	evs, overflowed := s.Take(nil)
	if overflowed {
		t.Fatal("subscriber overflowed")
	}
	var out []string
	for _, e := range evs {
		out = append(out, e.JobID+"/"+string(e.Type))
	}
	return out
}

func TestHoldRestoresOrderAndExpires(t *testing.T) {
	l, sub, c := newLog(t, 100, time.Second)
	l.Append([]*kgo.Record{rec(t, completed("j1")), rec(t, enqueued("j1", "acme", "q"))})
	if got := published(t, sub); !slices.Equal(got, []string{"j1/enqueued"}) {
		t.Fatalf("published %v, want only enqueued (completed waits for started)", got)
	}
	if l.Held() != 1 {
		t.Fatalf("%d held, want 1", l.Held())
	}
	l.Append([]*kgo.Record{rec(t, started("j1"))})
	if got := published(t, sub); !slices.Equal(got, []string{"j1/started", "j1/completed"}) {
		t.Fatalf("published %v, want started then completed", got)
	}
	// A started whose enqueued never comes is logged after the hold.
	l.Append([]*kgo.Record{rec(t, started("j2"))})
	l.ReleaseHeld()
	if got := published(t, sub); len(got) != 0 {
		t.Fatalf("published %v before the hold passed", got)
	}
	c.now = c.now.Add(time.Second)
	l.ReleaseHeld()
	if got := published(t, sub); !slices.Equal(got, []string{"j2/started"}) {
		t.Fatalf("published %v after the hold, want j2/started", got)
	}
	if l.Held() != 0 {
		t.Fatalf("%d still held", l.Held())
	}
}

func TestDuplicatesLateEventsAndForeignTenantsAreDropped(t *testing.T) {
	l, sub, _ := newLog(t, 100, time.Second)
	enq := rec(t, enqueued("j1", "acme", "q"))
	l.Append([]*kgo.Record{enq, enq, rec(t, started("j1")), rec(t, completed("j1"))})
	// Late: a progress after the final event; foreign: the same job id
	// claimed by another tenant.
	late := schema.Progress{JobRef: ref("j1", "acme", 1), WorkerID: "w", DispatchID: "d", Percent: 99, At: time.Now().UTC()}
	l.Append([]*kgo.Record{enq, rec(t, late), rec(t, enqueued("j1", "globex", "q"))})
	if got := published(t, sub); !slices.Equal(got, []string{"j1/enqueued", "j1/started", "j1/completed"}) {
		t.Fatalf("published %v", got)
	}
	if _, err := l.Job("globex", "j1"); !errors.Is(err, ErrJobNotFound) {
		t.Fatalf("another tenant's job: %v, want ErrJobNotFound", err)
	}
	j, err := l.Job("acme", "j1")
	if err != nil || j.TerminalSeq != l.Head() {
		t.Fatalf("job %+v, %v; want the terminal id %d", j, err, l.Head())
	}
}

func TestEvictionBoundsTheLogAndForgetsJobs(t *testing.T) {
	l, _, c := newLog(t, 3, 0)
	for _, id := range []string{"a", "b", "c", "d", "e"} {
		l.Append([]*kgo.Record{rec(t, enqueued(id, "acme", "q"))})
	}
	if l.Len() != 3 || len(l.jobs) != 3 || len(l.seen) != 3 {
		t.Fatalf("len %d, jobs %d, seen %d; want 3 each", l.Len(), len(l.jobs), len(l.seen))
	}
	evicted, head := l.Bounds()
	if head-evicted != 3 {
		t.Fatalf("bounds (%d, %d): want 3 ids apart", evicted, head)
	}
	if _, err := l.Job("acme", "a"); !errors.Is(err, ErrJobNotFound) {
		t.Fatalf("evicted job: %v", err)
	}
	if _, err := l.Replay("acme", "", evicted-1, 10); !errors.Is(err, ErrEvicted) {
		t.Fatalf("replay from before the log: %v, want ErrEvicted", err)
	}
	evs, err := l.Replay("acme", "", 0, 10)
	if err != nil || len(evs) != 3 || evs[0].JobID != "c" {
		t.Fatalf("replay from 0: %d events, %v", len(evs), err)
	}
	// Retention evicts by age.
	c.now = c.now.Add(time.Minute)
	l.Append([]*kgo.Record{rec(t, enqueued("f", "acme", "q"))})
	if n := l.Prune(c.now); n != 2 || l.Len() != 1 {
		t.Fatalf("prune evicted %d, %d left; want 2 and 1", n, l.Len())
	}
}

func TestIDsAreDenseAndStartAfterEarlierProcesses(t *testing.T) {
	l, sub, _ := newLog(t, 100, 0)
	first := l.Head()
	l.Append([]*kgo.Record{rec(t, enqueued("a", "acme", "q")), rec(t, enqueued("b", "acme", "q"))})
	_ = published(t, sub)
	if l.Head() != first+2 {
		t.Fatalf("head %d, want %d", l.Head(), first+2)
	}
	time.Sleep(time.Millisecond)
	later, _, _ := newLog(t, 100, 0)
	if later.Head() <= l.Head() {
		t.Fatalf("a later process starts at %d, not after %d", later.Head(), l.Head())
	}
}

// TestHeldEventsAreReleasedInLifecycleOrder: a completed held before a
// progress of the same attempt still follows it once started arrives.
func TestHeldEventsAreReleasedInLifecycleOrder(t *testing.T) {
	l, sub, _ := newLog(t, 100, time.Minute)
	l.Append([]*kgo.Record{rec(t, enqueued("j1", "acme", "q"))})
	l.Append([]*kgo.Record{rec(t, completed("j1"))})
	progress := schema.Progress{JobRef: ref("j1", "acme", 1), WorkerID: "w", DispatchID: "d", Percent: 50, At: time.Now().UTC()}
	l.Append([]*kgo.Record{rec(t, progress), rec(t, started("j1"))})
	if got := published(t, sub); !slices.Equal(got, []string{"j1/enqueued", "j1/started", "j1/progress", "j1/completed"}) {
		t.Fatalf("published %v, want enqueued, started, progress, completed", got)
	}
}

// TestReleaseHeldTakesThePassedHoldsInOrder: each ReleaseHeld logs the
// events whose hold passed, oldest first, and leaves the later ones; an
// event released early by its predecessor is not logged twice when its
// hold comes up.
func TestReleaseHeldTakesThePassedHoldsInOrder(t *testing.T) {
	l, sub, c := newLog(t, 100, time.Second)
	t0 := c.now
	l.Append([]*kgo.Record{rec(t, started("j1"))})
	c.now = t0.Add(500 * time.Millisecond)
	l.Append([]*kgo.Record{rec(t, started("j2"))})
	c.now = t0.Add(700 * time.Millisecond)
	l.Append([]*kgo.Record{rec(t, started("j3"))})
	if l.Held() != 3 {
		t.Fatalf("%d held, want 3", l.Held())
	}
	c.now = t0.Add(time.Second)
	l.ReleaseHeld()
	if got := published(t, sub); !slices.Equal(got, []string{"j1/started"}) {
		t.Fatalf("published %v at the first hold's end, want j1/started only", got)
	}
	c.now = t0.Add(1200 * time.Millisecond)
	l.Append([]*kgo.Record{rec(t, enqueued("j3", "acme", "q"))})
	if got := published(t, sub); !slices.Equal(got, []string{"j3/enqueued", "j3/started"}) {
		t.Fatalf("published %v, want j3's started released by its enqueued", got)
	}
	if l.Held() != 1 {
		t.Fatalf("%d held, want 1 (j2)", l.Held())
	}
	c.now = t0.Add(2 * time.Second)
	l.ReleaseHeld()
	if got := published(t, sub); !slices.Equal(got, []string{"j2/started"}) {
		t.Fatalf("published %v after every hold passed, want j2/started only", got)
	}
	if l.Held() != 0 || len(l.holds) != 0 {
		t.Fatalf("%d held and %d hold entries left, want none", l.Held(), len(l.holds))
	}
}

// BenchmarkReleaseHeld: a tick while 10,000 jobs each hold an event whose
// hold has not passed (a backlog of the started topic under load). It
// walked every holding job (3.5 ms a tick on the bench machine); now it
// looks at the oldest hold only (35 ns).
func BenchmarkReleaseHeld(b *testing.B) {
	c := &clock{now: time.Now()}
	l := New(Config{Size: 100_000, Hold: time.Minute, Now: c.Now}, hub.New(1000), slog.New(slog.NewTextHandler(io.Discard, nil)))
	recs := make([]*kgo.Record, 0, 10_000)
	for i := range 10_000 {
		r, err := schema.NewRecord(schema.Topics{}.Lifecycle(schema.EventStarted), "bench",
			schema.Started{JobRef: ref("j"+strconv.Itoa(i), "acme", 1), WorkerID: "w", DispatchID: "d", StartedAt: c.now})
		if err != nil {
			b.Fatal(err)
		}
		recs = append(recs, r)
	}
	l.Append(recs)
	if l.Held() != 10_000 {
		b.Fatalf("%d held", l.Held())
	}
	b.ResetTimer()
	for range b.N {
		l.ReleaseHeld()
	}
}

// TestStartedIsTrackedPerAttemptAtAnyAttempt: a completed waits for the
// started of its own attempt, on both sides of the 64 attempts the job
// state keeps in a bit set and beyond it, where it keeps a map.
func TestStartedIsTrackedPerAttemptAtAnyAttempt(t *testing.T) {
	for _, attempt := range []int{1, 2, 63, 64, 65, 1000} {
		l, sub, _ := newLog(t, 100, time.Minute)
		job := "j" + strconv.Itoa(attempt)
		now := time.Now().UTC()
		st := func(a int) schema.Data {
			return schema.Started{JobRef: ref(job, "acme", a), WorkerID: "w", DispatchID: "d" + strconv.Itoa(a), StartedAt: now}
		}
		done := schema.Completed{JobRef: ref(job, "acme", attempt), WorkerID: "w", DispatchID: "d" + strconv.Itoa(attempt), StartedAt: now, FinishedAt: now}
		l.Append([]*kgo.Record{rec(t, enqueued(job, "acme", "q"))})
		// The started of the attempts around this one (the bit and map
		// neighbours) do not release its completed.
		l.Append([]*kgo.Record{rec(t, st(attempt+1)), rec(t, done)})
		if attempt > 1 {
			l.Append([]*kgo.Record{rec(t, st(attempt-1))})
		}
		if l.Held() != 1 {
			t.Fatalf("attempt %d: %d held, want the completed waiting for its own started", attempt, l.Held())
		}
		published(t, sub)
		l.Append([]*kgo.Record{rec(t, st(attempt))})
		if got := published(t, sub); !slices.Equal(got, []string{job + "/started", job + "/completed"}) {
			t.Fatalf("attempt %d: published %v, want its started then its completed", attempt, got)
		}
	}
}
