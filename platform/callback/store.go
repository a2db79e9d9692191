package callback

import (
	"context"
	"embed"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ferryhq/ferry/platform/pgstore"
)

//go:embed migrations/*.sql
var migrations embed.FS

// Migrations are the schema of the held async attempts, known to
// `ferry migrate`.
var Migrations = pgstore.Register("http_callbacks", migrations, "migrations")

// Migrate creates the table of held async attempts. Both its writers (the
// workers, the api) run it, so neither depends on the other having started.
func Migrate(ctx context.Context, pool *pgxpool.Pool) error {
	return Migrations.Apply(ctx, pool)
}

// States of a job's row.
const (
	StateHeld      = "held"
	StateCompleted = "completed"
	StateFailed    = "failed"
	// StateSettled: the worker reported the attempt itself (the receiver
	// answered something else than 202, or did not answer).
	StateSettled = "settled"
)

// Verdict is what the api does with a report.
type Verdict int

const (
	// Apply: the token's dispatch holds the job; the report is applied.
	Apply Verdict = iota
	// Repeat: the same outcome was already recorded for this dispatch (a
	// retried complete or fail): answer as before, change nothing.
	Repeat
	// Superseded: another dispatch or attempt holds the job now, or this
	// one already ended otherwise: change nothing, tell the receiver to stop.
	Superseded
)

// Attempts is the table of async attempts in Postgres.
type Attempts struct{ pool *pgxpool.Pool }

// NewAttempts returns the table over pool.
func NewAttempts(pool *pgxpool.Pool) *Attempts { return &Attempts{pool: pool} }

// Hold records c's dispatch as the one of its attempt that may report,
// before its request is sent. It reports false when a later attempt of the
// job has a row already (a stale dispatch): the request must not be sent.
func (a *Attempts) Hold(ctx context.Context, c Claims, now time.Time) (bool, error) {
	tag, err := a.pool.Exec(ctx, `
		INSERT INTO http_callbacks AS h (job_id, attempt, tenant_id, dispatch_id, state, updated_at)
		SELECT $1, $3, $2, $4, 'held', $5
		WHERE NOT EXISTS (SELECT 1 FROM http_callbacks WHERE job_id = $1 AND attempt > $3)
		ON CONFLICT (job_id, attempt) DO UPDATE SET dispatch_id = EXCLUDED.dispatch_id,
			state = 'held', updated_at = EXCLUDED.updated_at
		WHERE h.tenant_id = EXCLUDED.tenant_id`,
		c.JobID, c.TenantID, c.Attempt, c.DispatchID, now)
	if err != nil {
		return false, fmt.Errorf("callback: hold %s: %w", c.JobID, err)
	}
	return tag.RowsAffected() == 1, nil
}

// Settle ends c's dispatch as reported by the worker itself: its receiver
// did not take the job, so no callback of it counts any more.
func (a *Attempts) Settle(ctx context.Context, c Claims, now time.Time) error {
	_, err := a.pool.Exec(ctx, `
		UPDATE http_callbacks SET state = 'settled', updated_at = $4
		WHERE job_id = $1 AND attempt = $2 AND dispatch_id = $3 AND state = 'held'`, c.JobID, c.Attempt, c.DispatchID, now)
	if err != nil {
		return fmt.Errorf("callback: settle %s: %w", c.JobID, err)
	}
	return nil
}

// holds is the condition that c's dispatch holds its job ($1 job, $2
// tenant, $3 attempt, $4 dispatch): its row is held and no later attempt
// has one.
const holds = `job_id = $1 AND tenant_id = $2 AND attempt = $3 AND dispatch_id = $4 AND state = 'held'
		AND NOT EXISTS (SELECT 1 FROM http_callbacks n WHERE n.job_id = $1 AND n.attempt > $3)`

// Check is the verdict on a heartbeat or progress report of c: Apply while
// c's dispatch holds the job, else Superseded.
func (a *Attempts) Check(ctx context.Context, c Claims) (Verdict, error) {
	var held bool
	err := a.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM http_callbacks WHERE `+holds+`)`,
		c.JobID, c.TenantID, c.Attempt, c.DispatchID).Scan(&held)
	if err != nil {
		return Superseded, fmt.Errorf("callback: check %s: %w", c.JobID, err)
	}
	if held {
		return Apply, nil
	}
	return Superseded, nil
}

// Claim records outcome (StateCompleted or StateFailed) for c's dispatch
// if it still holds the job, in one statement: of two racing outcomes one
// wins. A repeat of the recorded outcome is Repeat.
func (a *Attempts) Claim(ctx context.Context, c Claims, outcome string, now time.Time) (Verdict, error) {
	tag, err := a.pool.Exec(ctx, `UPDATE http_callbacks SET state = $5, updated_at = $6 WHERE `+holds,
		c.JobID, c.TenantID, c.Attempt, c.DispatchID, outcome, now)
	if err != nil {
		return Superseded, fmt.Errorf("callback: claim %s: %w", c.JobID, err)
	}
	if tag.RowsAffected() == 1 {
		return Apply, nil
	}
	return a.Recorded(ctx, c, outcome)
}

// Recorded is Repeat when outcome is the one recorded for c's dispatch,
// else Superseded: the verdict on an outcome reported by a dispatch that
// no longer holds its job.
func (a *Attempts) Recorded(ctx context.Context, c Claims, outcome string) (Verdict, error) {
	var same bool
	err := a.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM http_callbacks
		WHERE job_id = $1 AND tenant_id = $2 AND attempt = $3 AND dispatch_id = $4 AND state = $5)`,
		c.JobID, c.TenantID, c.Attempt, c.DispatchID, outcome).Scan(&same)
	if err != nil {
		return Superseded, fmt.Errorf("callback: read %s: %w", c.JobID, err)
	}
	if same {
		return Repeat, nil
	}
	return Superseded, nil
}

// Unclaim gives a claimed outcome back (its event could not be produced),
// so the receiver's retry of the same report is applied.
func (a *Attempts) Unclaim(ctx context.Context, c Claims, outcome string) error {
	_, err := a.pool.Exec(ctx, `
		UPDATE http_callbacks SET state = 'held'
		WHERE job_id = $1 AND attempt = $2 AND dispatch_id = $3 AND state = $4`, c.JobID, c.Attempt, c.DispatchID, outcome)
	if err != nil {
		return fmt.Errorf("callback: unclaim %s: %w", c.JobID, err)
	}
	return nil
}

// Prune deletes the rows last changed before before (jobs long finished:
// no token outlives its TTL), in batches, and returns how many went.
func (a *Attempts) Prune(ctx context.Context, before time.Time) (int64, error) {
	tag, err := a.pool.Exec(ctx, `
		DELETE FROM http_callbacks WHERE (job_id, attempt) IN (
			SELECT job_id, attempt FROM http_callbacks WHERE updated_at < $1 LIMIT 5000)`, before)
	if err != nil {
		return 0, fmt.Errorf("callback: prune: %w", err)
	}
	return tag.RowsAffected(), nil
}
