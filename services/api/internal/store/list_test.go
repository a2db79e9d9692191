package store

import (
	"context"
	"fmt"
	"strings"
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

// TestTagFilterUsesTheTaggedIndex: jobs_tagged holds tagged jobs only (an
// untagged job writes no entry to it); a tag filter lists exactly the
// jobs carrying every tag asked for, newest first, and its query is one
// the partial index serves (the planner must see its predicate implied).
func TestTagFilterUsesTheTaggedIndex(t *testing.T) {
	s := open(t)
	ctx := context.Background()
	t0 := time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC)
	tags := map[int][]string{3: {"vip"}, 7: {"vip", "eu"}, 8: {"eu"}, 12: {"vip", "eu", "x"}}
	var recs []*kgo.Record
	for i := range 20 {
		at := t0.Add(time.Duration(i) * time.Second)
		ref := schema.JobRef{JobID: fmt.Sprintf("job_tag%02d", i), TenantID: "tagged", Attempt: 1}
		recs = append(recs, record(t, schema.Enqueued{JobRef: ref, Job: schema.JobSpec{Type: "x", Queue: "q", MaxAttempts: 1, Tags: tags[i]},
			CreatedAt: at, RunAt: at, Reason: "submitted"}, at))
	}
	s.applyTx(t, recs)

	for _, c := range []struct {
		tags []string
		want string
	}{
		{[]string{"vip"}, "[job_tag12 job_tag07 job_tag03]"},
		{[]string{"vip", "eu"}, "[job_tag12 job_tag07]"},
		{[]string{"eu"}, "[job_tag12 job_tag08 job_tag07]"},
		{[]string{"none"}, "[]"},
	} {
		jobs, _, err := s.List(ctx, "tagged", Filter{Tags: c.tags, Limit: 10, Now: time.Now()})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, j := range jobs {
			got = append(got, j.ID)
		}
		if fmt.Sprint(got) != c.want {
			t.Fatalf("tags %v: %v, want %s", c.tags, got, c.want)
		}
	}

	// The tag condition alone (on a table this small the planner prefers
	// reading a tenant's rows through another index): the partial index
	// must be usable for it, its predicate implied.
	var q listQuery
	q.filters(Filter{Tags: []string{"vip"}})
	if text := s.planWithoutScans(t, `SELECT id FROM jobs WHERE `+q.SQL(), q.Args...); !strings.Contains(text, "jobs_tagged") {
		t.Fatalf("the tag filter's plan does not use jobs_tagged:\n%s", text)
	}
	var def string
	if err := s.pool.QueryRow(ctx, `SELECT indexdef FROM pg_indexes WHERE indexname = 'jobs_tagged'`).Scan(&def); err != nil ||
		!strings.Contains(def, "WHERE (tags <> '{}'::text[])") {
		t.Fatalf("jobs_tagged is %q (%v), want a partial index of tagged jobs", def, err)
	}
}
