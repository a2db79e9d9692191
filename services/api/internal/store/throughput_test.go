package store

import (
	"context"
	"testing"
	"time"
)

// TestThroughput: a job that finishes is counted once in its tenant's
// minute, whether its events come in one batch or several and even when
// a batch is applied again after it finished; other tenants see none of it;
// every minute of the window is answered, zero where nothing finished.
func TestThroughput(t *testing.T) {
	s := open(t)
	ctx := context.Background()
	recs := history(t, "job_a", "k1") // fails once, then succeeds, at 10:00:0x
	s.applyTx(t, recs[:5])
	s.applyTx(t, recs[5:])
	s.applyTx(t, recs) // replayed: nothing new
	b := history(t, "job_b", "k2")
	s.applyTx(t, b)

	t0 := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	got, err := s.Throughput(ctx, "acme", t0.Add(-2*time.Minute), t0.Add(90*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 4 || !got[0].Minute.Equal(t0.Add(-2*time.Minute)) || !got[3].Minute.Equal(t0.Add(time.Minute)) {
		t.Fatalf("minutes: %+v", got)
	}
	if got[2].Succeeded != 2 || got[2].Failed != 0 || got[0].Succeeded != 0 || got[1].Succeeded != 0 || got[3].Succeeded != 0 {
		t.Fatalf("outcomes: %+v (want 2 succeeded at 10:00 only)", got)
	}
	other, err := s.Throughput(ctx, "globex", t0, t0)
	if err != nil || len(other) != 1 || other[0].Succeeded != 0 {
		t.Fatalf("another tenant: %+v %v", other, err)
	}
	if err := s.DeleteThroughputBefore(ctx, t0.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Throughput(ctx, "acme", t0, t0); got[0].Succeeded != 0 {
		t.Fatalf("after retention: %+v", got)
	}
}
