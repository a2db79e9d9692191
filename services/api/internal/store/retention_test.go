package store

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/ferryhq/ferry/events/schema"
	"github.com/ferryhq/ferry/platform/testenv"
)

// TestQueueCounts: the per-queue counts follow a job from queued to done,
// in any order of its records, and a queue whose jobs all finished reads as
// not live and is deleted by DeleteIdleQueues.
func TestQueueCounts(t *testing.T) {
	s := open(t)
	ctx := context.Background()
	live := func() map[string]struct{} {
		t.Helper()
		qs, err := s.TenantQueues(ctx, "acme")
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]struct{}{}
		for q, l := range qs {
			if l {
				out[q] = struct{}{}
			}
		}
		return out
	}
	recs := history(t, "job_q1", "")
	// started before enqueued: no queue yet, then counted in q.
	s.applyTx(t, recs[1:2])
	if qs := live(); len(qs) != 0 {
		t.Fatalf("live before enqueued: %v", qs)
	}
	s.applyTx(t, recs[0:1])
	if _, ok := live()["q"]; !ok {
		t.Fatalf("running job's queue not live: %v", live())
	}
	s.applyTx(t, recs[2:])
	if qs := live(); len(qs) != 0 {
		t.Fatalf("finished job's queue still live: %v", qs)
	}
	var n int
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM tenant_queue_counts`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("rows %d %v", n, err)
	}
	if d, err := s.DeleteIdleQueues(ctx, 100); err != nil || d != 1 {
		t.Fatalf("deleted %d %v", d, err)
	}
	// A new job re-creates the row.
	s.applyTx(t, history(t, "job_q2", "")[:1])
	if _, ok := live()["q"]; !ok {
		t.Fatalf("queue of a new job not live: %v", live())
	}
	if d, err := s.DeleteIdleQueues(ctx, 100); err != nil || d != 0 {
		t.Fatalf("deleted a live queue: %d %v", d, err)
	}
}

// TestDeleteFinished deletes only finished jobs older than the cutoff, of
// every tenant, in batches of at most limit, and keeps unfinished ones
// however old.
func TestDeleteFinished(t *testing.T) {
	s := open(t)
	ctx := context.Background()
	for _, id := range []string{"job_old1", "job_old2", "job_old3"} {
		s.applyTx(t, history(t, id, "k-"+id)) // succeeded at 2026-03-01 10:00:12
	}
	s.applyTx(t, history(t, "job_open", "")[:2]) // running since 2026-03-01
	recent := history(t, "job_recent", "")
	s.applyTx(t, recent)
	if _, err := s.pool.Exec(ctx, `UPDATE jobs SET finished_at = now() WHERE id = 'job_recent'`); err != nil {
		t.Fatal(err)
	}
	// Two more tenants: one with an old finished job, one with nothing to delete.
	if _, err := s.pool.Exec(ctx, `UPDATE jobs SET tenant_id = CASE id WHEN 'job_old3' THEN 'globex' ELSE 'zeta' END
		WHERE id IN ('job_old3', 'job_recent')`); err != nil {
		t.Fatal(err)
	}
	cutoff := time.Now().Add(-24 * time.Hour)
	if n, err := s.DeleteFinished(ctx, cutoff, 2); err != nil || n != 2 {
		t.Fatalf("first batch deleted %d %v", n, err)
	}
	if n, err := s.DeleteFinished(ctx, cutoff, 2); err != nil || n != 1 {
		t.Fatalf("second batch deleted %d %v", n, err)
	}
	if n, err := s.DeleteFinished(ctx, cutoff, 2); err != nil || n != 0 {
		t.Fatalf("third batch deleted %d %v", n, err)
	}
	for id, want := range map[string]bool{"job_old1": false, "job_old2": false, "globex/job_old3": false, "job_open": true, "zeta/job_recent": true} {
		tenant, id, found := strings.Cut(id, "/")
		if !found {
			tenant, id = "acme", tenant
		}
		j, ok, err := s.Get(ctx, tenant, id)
		if err != nil || ok != want {
			t.Fatalf("%s: found %v, want %v (%v)", id, ok, want, err)
		}
		if ok && id == "job_open" && j.Status() != schema.StatusRunning {
			t.Fatalf("%s: %s", id, j.Status())
		}
	}
	// The durable idempotency backstop goes with the row.
	if held, err := s.ByIdempotencyKeys(ctx, "acme", []string{"k-job_old1"}); err != nil || len(held) != 0 {
		t.Fatalf("key of a deleted job still held: %v %v", held, err)
	}
	// Each tenant's candidates come from the list index, oldest first,
	// without a sort, and each next tenant from a probe of an index: no
	// scan of the table (the planner prefers one on a table this small, so
	// scans are disabled for the check).
	text := s.planWithoutScans(t, finishedBefore, time.Now(), 10)
	if !strings.Contains(text, "Index Scan Backward using jobs_list") || strings.Contains(text, "Seq Scan") || strings.Contains(text, "Sort") {
		t.Fatalf("plan does not read jobs_list in order:\n%s", text)
	}
}

// planWithoutScans returns the plan of query with sequential scans
// disabled: on a test table this small the planner prefers one, so a
// check that an index can serve a query needs them off.
func (s *Store) planWithoutScans(t *testing.T, query string, args ...any) string {
	t.Helper()
	ctx := context.Background()
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // read-only
	if _, err := tx.Exec(ctx, `SET LOCAL enable_seqscan = off`); err != nil {
		t.Fatal(err)
	}
	return strings.Join(testenv.Column(t, tx, `EXPLAIN `+query, args...), "\n")
}
