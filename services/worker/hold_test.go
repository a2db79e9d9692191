package worker

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferryhq/ferry/events/schema"
)

// heldAt returns a dispatch of job id due at due, as the hold receives it.
func heldAt(id string, due time.Time) (queued, schema.Dispatch) {
	return queued{rec: &kgo.Record{Key: []byte(id)}}, schema.Dispatch{JobRef: schema.JobRef{JobID: id}, NotBefore: &due}
}

// TestHoldHandsOutByDueTime: the hold hands out nothing before its due
// time, then every due dispatch earliest first (ties in any order), with
// its record and decoded value intact; it refuses what exceeds its size.
func TestHoldHandsOutByDueTime(t *testing.T) {
	h := newHold(100)
	now := time.Now()
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 100 {
		q, d := heldAt(fmt.Sprintf("job_%d", i), now.Add(-time.Duration(rng.IntN(50))*time.Millisecond))
		if !h.add(q, d) {
			t.Fatalf("hold refused dispatch %d of 100", i)
		}
	}
	if q, d := heldAt("job_late", now.Add(time.Hour)); h.add(q, d) {
		t.Fatal("a full hold took one more")
	}
	var last time.Time
	for i := range 100 {
		next, wait, ok := h.next()
		if !ok || wait > 0 {
			t.Fatalf("take %d: ok %v wait %v with due dispatches held", i, ok, wait)
		}
		if next.d.NotBefore.Before(last) {
			t.Fatalf("take %d: due %v after one due %v", i, *next.d.NotBefore, last)
		}
		if string(next.q.rec.Key) != next.d.JobID {
			t.Fatalf("take %d: record of %s with dispatch of %s", i, next.q.rec.Key, next.d.JobID)
		}
		last = *next.d.NotBefore
	}
	if _, _, ok := h.next(); ok || h.len() != 0 {
		t.Fatalf("hold not empty after handing out all: ok %v len %d", ok, h.len())
	}

	q, d := heldAt("job_future", now.Add(time.Hour))
	h.add(q, d)
	if _, wait, ok := h.next(); !ok || wait < 59*time.Minute {
		t.Fatalf("a dispatch due in an hour: ok %v wait %v", ok, wait)
	}
	if got := h.drain(); len(got) != 1 || got[0].d.JobID != "job_future" || h.len() != 0 {
		t.Fatalf("drain gave %d dispatches, left %d", len(got), h.len())
	}
}

// BenchmarkHoldBurst is a burst of 10,000 dispatches leased ahead, due
// within 100 ms in random order, held and then handed out.
func BenchmarkHoldBurst(b *testing.B) {
	const n = 10000
	now := time.Now().Add(-time.Second)
	rng := rand.New(rand.NewPCG(1, 2))
	qs, ds := make([]queued, n), make([]schema.Dispatch, n)
	for i := range n {
		qs[i], ds[i] = heldAt(fmt.Sprintf("job_%d", i), now.Add(time.Duration(rng.IntN(100_000))*time.Microsecond))
	}
	b.ReportAllocs()
	for b.Loop() {
		h := newHold(n)
		for i := range n {
			h.add(qs[i], ds[i])
		}
		for range n {
			if _, _, ok := h.next(); !ok {
				b.Fatal("hold ran empty")
			}
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/dispatch")
}
