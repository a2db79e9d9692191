package store

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferryhq/ferry/events/schema"
)

// TestStatusPageScanBounded lists a rare status in a tenant of many jobs:
// every page reads at most ScanRows rows, ends early (possibly empty) with
// the cursor of the last row read, and following the cursors finds every
// job of the status exactly once, newest first. A common status still
// fills its pages.
func TestStatusPageScanBounded(t *testing.T) {
	s := open(t)
	ctx := context.Background()
	t0 := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	const n = 50
	var recs []*kgo.Record
	var wantDead []string
	for i := range n {
		id := fmt.Sprintf("job_%02d", i)
		at := t0.Add(time.Duration(i) * time.Second)
		ref := schema.JobRef{JobID: id, TenantID: "acme", Attempt: 1}
		recs = append(recs, record(t, schema.Enqueued{JobRef: ref, Job: schema.JobSpec{Type: "x", Queue: "q", MaxAttempts: 1}, CreatedAt: at, RunAt: at, Reason: "submitted"}, at))
		if i == 3 || i == 4 || i == 41 {
			recs = append(recs, record(t, schema.DeadLettered{JobRef: ref, Job: schema.JobSpec{Type: "x", Queue: "q", MaxAttempts: 1}, CreatedAt: at,
				Error: schema.ErrorInfo{Class: "app_error", Message: "boom"}, DeadAt: at.Add(time.Second)}, at.Add(time.Second)))
			wantDead = append([]string{id}, wantDead...) // newest first
			continue
		}
		recs = append(recs, record(t, schema.Completed{JobRef: ref, WorkerID: "w", StartedAt: at, FinishedAt: at.Add(time.Second)}, at.Add(time.Second)))
	}
	s.applyTx(t, recs)

	var got []string
	pages, empty := 0, 0
	f := Filter{Status: schema.StatusDead, Limit: 2, ScanRows: 10, Now: time.Now()}
	for {
		jobs, next, err := s.List(ctx, "acme", f)
		if err != nil {
			t.Fatal(err)
		}
		pages++
		if len(jobs) == 0 {
			empty++
		}
		for _, j := range jobs {
			if j.Status() != schema.StatusDead {
				t.Fatalf("page %d: job %s is %s", pages, j.ID, j.Status())
			}
			got = append(got, j.ID)
		}
		if next == nil {
			break
		}
		if pages > n {
			t.Fatal("cursors do not end")
		}
		f.After = next
	}
	if fmt.Sprint(got) != fmt.Sprint(wantDead) {
		t.Fatalf("dead jobs over the pages: %v, want %v", got, wantDead)
	}
	// 50 rows, 10 read per page: jobs 49..40 (41 found), 39..30, 29..20,
	// 19..10 (all empty, each with a cursor), then 9..0 (3 and 4).
	if pages != 5 || empty != 3 {
		t.Fatalf("%d pages, %d empty; want 5 pages, 3 empty", pages, empty)
	}

	jobs, next, err := s.List(ctx, "acme", Filter{Status: schema.StatusSucceeded, Limit: 4, ScanRows: 10, Now: time.Now()})
	if err != nil || len(jobs) != 4 || next == nil || next.ID != "job_46" || jobs[0].ID != "job_49" {
		t.Fatalf("succeeded page: %d jobs, next %+v, %v", len(jobs), next, err)
	}
}
