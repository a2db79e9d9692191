package webhooks_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ferryhq/ferry/platform/testenv"
	"github.com/ferryhq/ferry/services/webhooks"
)

func TestRetentionDeletesOldFinishedDeliveriesAndJobs(t *testing.T) {
	now := time.Now()
	b := setup(t, opts{cfg: webhooks.Config{
		Retention: time.Hour, RetentionInterval: 50 * time.Millisecond, RetentionChunk: 2,
		Now: func() time.Time { return now },
	}})
	ep, _ := b.register(t, b.keyA, map[string]any{"url": "http://127.0.0.1:9/hook"})
	ctx := context.Background()
	pg := b.deps.Postgres

	old, recent, ancient := now.Add(-2*time.Hour), now.Add(-30*time.Minute), now.Add(-1000*time.Hour)
	deliveries := []struct {
		id, status string
		at         time.Time
		attempts   int
	}{
		{"msg_old_delivered", "delivered", old, 2},
		{"msg_old_failed", "failed", old, 3},
		{"msg_old_cancelled", "cancelled", old, 0},
		{"msg_recent_delivered", "delivered", recent, 1},
		{"msg_recent_failed", "failed", recent, 1},
		{"msg_ancient_pending", "pending", ancient, 2},
		{"msg_old_pending", "pending", old, 0},
	}
	jobs := []struct {
		id      string
		updated time.Time
		runAt   *time.Time
	}{
		{"job_old", old, &old},
		{"job_old_no_run_at", old, nil},
		{"job_recent", recent, &recent},
		{"job_recently_seen_old_run_at", recent, &ancient},
		{"job_scheduled_ahead", ancient, ptr(now.Add(24 * time.Hour))},
	}
	err := pgx.BeginFunc(ctx, pg, func(tx pgx.Tx) error {
		for _, d := range deliveries {
			var next *time.Time
			if d.status == "pending" {
				next = ptr(now.Add(time.Hour))
			}
			if _, err := tx.Exec(ctx, `INSERT INTO webhook_deliveries (id, tenant_id, endpoint_id, event_id, event_type, job_id,
					body, status, attempts, next_attempt_at, created_at, updated_at)
				VALUES ($1, 'acme', $2, $1, 'job.completed', 'job_x', '{}', $3, $4, $5, $6, $6)`,
				d.id, ep, d.status, d.attempts, next, d.at); err != nil {
				return err
			}
			for n := 1; n <= d.attempts; n++ {
				if _, err := tx.Exec(ctx, `INSERT INTO webhook_attempts (delivery_id, attempt, at, status_code, latency_ms)
					VALUES ($1, $2, $3, 500, 10)`, d.id, n, d.at); err != nil {
					return err
				}
			}
		}
		for _, j := range jobs {
			if _, err := tx.Exec(ctx, `INSERT INTO webhook_jobs (job_id, tenant_id, queue, type, updated_at, run_at)
				VALUES ($1, 'acme', 'default', 'x', $2, $3)`, j.id, j.updated, j.runAt); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	wantDeliveries := "msg_ancient_pending,msg_old_pending,msg_recent_delivered,msg_recent_failed"
	wantAttempts := "msg_ancient_pending/1,msg_ancient_pending/2,msg_recent_delivered/1,msg_recent_failed/1"
	wantJobs := "job_recent,job_recently_seen_old_run_at,job_scheduled_ahead"
	deadline := time.Now().Add(wait)
	for {
		gotD := column(t, pg, `SELECT id FROM webhook_deliveries ORDER BY id`)
		gotA := column(t, pg, `SELECT delivery_id || '/' || attempt FROM webhook_attempts ORDER BY 1`)
		gotJ := column(t, pg, `SELECT job_id FROM webhook_jobs ORDER BY job_id`)
		if gotD == wantDeliveries && gotA == wantAttempts && gotJ == wantJobs {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after retention:\ndeliveries %s (want %s)\nattempts %s (want %s)\njobs %s (want %s)",
				gotD, wantDeliveries, gotA, wantAttempts, gotJ, wantJobs)
		}
		time.Sleep(50 * time.Millisecond)
	}

	// The delivery log shows what is left.
	r := b.do(t, b.keyA, "GET", "/v1/webhooks/"+ep+"/deliveries", nil)
	var ids []string
	for _, d := range r.Body["deliveries"].([]any) {
		ids = append(ids, d.(map[string]any)["id"].(string))
	}
	slices.Sort(ids)
	if got := strings.Join(ids, ","); got != wantDeliveries {
		t.Fatalf("delivery log %s, want %s (%s)", got, wantDeliveries, r.Raw)
	}
}

// A job seen again (a retry) restarts its retention and keeps the latest run_at.
func TestJobRowRetentionRestartsWhenSeenAgain(t *testing.T) {
	b := setup(t, opts{})
	b.register(t, b.keyA, map[string]any{"url": "http://127.0.0.1:9/hook", "filter": map[string]any{"queue": "mail"}})
	pg := b.deps.Postgres
	ctx := context.Background()

	e := enqueued("acme", "job_r", "mail", "email.send")
	e.RunAt = time.Now().Add(48 * time.Hour).UTC().Truncate(time.Microsecond)
	b.emit(t, e)
	var runAt time.Time
	waitFor(t, func() error {
		return pg.QueryRow(ctx, `SELECT run_at FROM webhook_jobs WHERE job_id = 'job_r'`).Scan(&runAt)
	})
	if !runAt.Equal(e.RunAt) {
		t.Fatalf("run_at %s, want %s", runAt, e.RunAt)
	}
	if _, err := pg.Exec(ctx, `UPDATE webhook_jobs SET updated_at = now() - interval '1000 hours' WHERE job_id = 'job_r'`); err != nil {
		t.Fatal(err)
	}

	// A retry with an earlier run_at: seen now, run_at stays the latest.
	retry := enqueued("acme", "job_r", "mail", "email.send")
	retry.Attempt, retry.Reason = 2, "retry"
	b.emit(t, retry)
	waitFor(t, func() error {
		var updated time.Time
		if err := pg.QueryRow(ctx, `SELECT updated_at, run_at FROM webhook_jobs WHERE job_id = 'job_r'`).Scan(&updated, &runAt); err != nil {
			return err
		}
		if time.Since(updated) > time.Hour {
			return fmt.Errorf("updated_at not refreshed (%s)", updated)
		}
		if !runAt.Equal(e.RunAt) {
			return fmt.Errorf("run_at %s, want %s", runAt, e.RunAt)
		}
		return nil
	})
}

func waitFor(t *testing.T, f func() error) {
	t.Helper()
	testenv.Eventually(t, wait, f)
}

func column(t *testing.T, pg testenv.Querier, sql string) string {
	t.Helper()
	return strings.Join(testenv.Column(t, pg, sql), ",")
}

func ptr[T any](v T) *T { return &v }
