package store

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/ferryhq/ferry/platform/testenv"
)

// TestJobFilterPlan: on an analyzed month of one tenant's events, a page
// of one job's events is found through the hash index on job_id, not by
// walking the tenant's time index and filtering (which reads the tenant's
// whole history for a job near its end), and comes back in order; a page
// without a job filter walks the time index.
func TestJobFilterPlan(t *testing.T) {
	ctx := context.Background()
	pool := testenv.Pool(t, 4)
	if err := Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	if _, _, err := New(pool, slog.New(slog.DiscardHandler), func() time.Time { return now }).EnsurePartitions(ctx, now, now); err != nil {
		t.Fatal(err)
	}
	// 60,000 events of 20,000 jobs (three each), 10 ms apart.
	if _, err := pool.Exec(ctx, `INSERT INTO audit_events (event_id, tenant_id, job_id, type, attempt, occurred_at,
			actor, data, chain_id, seq, prev_hash, hash)
		SELECT format('ev-%s', lpad(g::text, 6, '0')), 'acme', format('job-%s', lpad((g / 3)::text, 6, '0')),
			(ARRAY['enqueued', 'started', 'completed'])[g % 3 + 1], 1, $1::timestamptz + g * interval '10 ms',
			'ferry/api', '{}', 'acme/c/0', g, '\x00', '\x00'
		FROM generate_series(1, 60000) g`, now.Add(-time.Hour)); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `ANALYZE audit_events`); err != nil {
		t.Fatal(err)
	}
	plan := func(f Filter, after *Cursor) string {
		t.Helper()
		q, args := pageQuery(f, after, 100)
		return strings.Join(testenv.Column(t, pool, "EXPLAIN "+q, args...), "\n")
	}
	const timeIndex = "tenant_id_occurred_at_event_id_idx"
	// byJob: an index condition (or a bitmap's recheck) on the job id.
	byJob := func(p string) bool {
		for _, line := range strings.Split(p, "\n") {
			if strings.Contains(line, "Cond:") && strings.Contains(line, "job_id = ") {
				return true
			}
		}
		return false
	}
	job := Filter{TenantID: "acme", JobID: "job-019000"}
	for _, after := range []*Cursor{nil, {Occurred: now.Add(-time.Hour), EventID: "ev-000000"}} {
		if p := plan(job, after); !byJob(p) || strings.Contains(p, timeIndex) {
			t.Errorf("job filter (after %v) not through the job index:\n%s", after, p)
		}
	}
	if p := plan(Filter{TenantID: "acme"}, nil); !strings.Contains(p, timeIndex) {
		t.Errorf("tenant page not through the time index:\n%s", p)
	}
	s := New(pool, slog.New(slog.DiscardHandler), time.Now)
	var got []string
	if _, err := s.page(ctx, job, nil, 100, func(e Event) error { got = append(got, e.Type); return nil }); err != nil {
		t.Fatal(err)
	}
	if strings.Join(got, ",") != "enqueued,started,completed" {
		t.Errorf("job-019000's events %v, want its three in time order", got)
	}
}
