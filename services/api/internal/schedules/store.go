// Package schedules holds Ferry's cron schedules: the expressions and their
// fire times (spec.go), the catch-up and overlap policies (plan.go) and the
// schedules table in Postgres (this file). The api service fires them
// through its own submission path (schedule_fire.go there).
package schedules

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ferryhq/ferry/events/schema"
	"github.com/ferryhq/ferry/platform/pgstore"
)

//go:embed migrations/*.sql
var migrations embed.FS

// Migrations create the schedules table; `ferry migrate` applies them.
var Migrations = pgstore.Register("schedules", migrations, "migrations")

// Channel is the Postgres NOTIFY channel a change of a schedule's timing
// is announced on, so that every replica's firing loop re-reads its next
// due time at once.
const Channel = "ferry_schedules"

// Errors of the store.
var (
	ErrNotFound  = errors.New("schedules: not found")
	ErrNameTaken = errors.New("schedules: name taken")
	ErrTooMany   = errors.New("schedules: tenant at its limit")
)

// Schedule is a row of the schedules table.
type Schedule struct {
	TenantID     string
	ID           string
	Name         string
	Cron         string
	TimeZone     string
	Template     json.RawMessage
	Overlap      string
	Catchup      string
	CatchupLimit int
	Paused       bool
	NextFireAt   *time.Time
	QueuedFireAt *time.Time
	DueAt        *time.Time
	LastFireAt   *time.Time
	LastJobID    string
	LastError    string
	Fired        int64
	Skipped      int64
	CreatedAt    time.Time
	UpdatedAt    time.Time
}

// NewID returns a new schedule id.
func NewID() string { return "sch_" + strings.ReplaceAll(schema.NewEventID(), "-", "") }

const columns = `tenant_id, id, name, cron, timezone, template, overlap, catchup, catchup_limit, paused,
	next_fire_at, queued_fire_at, due_at, last_fire_at, last_job_id, last_error, fired, skipped, created_at, updated_at`

func scan(row pgx.CollectableRow) (Schedule, error) {
	var s Schedule
	err := row.Scan(&s.TenantID, &s.ID, &s.Name, &s.Cron, &s.TimeZone, &s.Template, &s.Overlap, &s.Catchup,
		&s.CatchupLimit, &s.Paused, &s.NextFireAt, &s.QueuedFireAt, &s.DueAt, &s.LastFireAt, &s.LastJobID,
		&s.LastError, &s.Fired, &s.Skipped, &s.CreatedAt, &s.UpdatedAt)
	for _, t := range []*time.Time{s.NextFireAt, s.QueuedFireAt, s.DueAt, s.LastFireAt, &s.CreatedAt, &s.UpdatedAt} {
		if t != nil {
			*t = t.UTC()
		}
	}
	return s, err
}

// Recorder records a change of a schedule inside the transaction that
// makes it, after the write and before the commit: before is nil when the
// schedule is created, after when it is deleted. Its error rolls the
// change back, so a change it cannot record is not made. nil records
// nothing.
type Recorder func(ctx context.Context, before, after *Schedule) error

func (r Recorder) record(ctx context.Context, before, after *Schedule) error {
	if r == nil {
		return nil
	}
	return r(ctx, before, after)
}

// Store reads and writes the schedules table.
type Store struct{ pool *pgxpool.Pool }

// New returns a store over pool, applying the migrations.
func New(ctx context.Context, pool *pgxpool.Pool) (*Store, error) {
	if err := Migrations.Apply(ctx, pool); err != nil {
		return nil, err
	}
	return &Store{pool: pool}, nil
}

// Create inserts s unless its tenant already has limit schedules. Creates
// of one tenant are serialised by an advisory lock, so concurrent ones
// cannot overshoot the limit.
func (st *Store) Create(ctx context.Context, s Schedule, limit int, rec Recorder) (Schedule, error) {
	var out Schedule
	err := pgx.BeginFunc(ctx, st.pool, func(tx pgx.Tx) error {
		var n int
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('ferry_schedules:' || $1, 0))`, s.TenantID); err != nil {
			return err
		}
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM schedules WHERE tenant_id = $1`, s.TenantID).Scan(&n); err != nil {
			return err
		}
		if n >= limit {
			return ErrTooMany
		}
		rows, err := tx.Query(ctx, `INSERT INTO schedules (tenant_id, id, name, cron, timezone, template, overlap, catchup,
			catchup_limit, paused, next_fire_at, due_at) VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12) RETURNING `+columns,
			s.TenantID, s.ID, s.Name, s.Cron, s.TimeZone, s.Template, s.Overlap, s.Catchup, s.CatchupLimit, s.Paused, s.NextFireAt, s.DueAt)
		if err != nil {
			return err
		}
		if out, err = pgx.CollectExactlyOneRow(rows, scan); err != nil {
			return err
		}
		if err := rec.record(ctx, nil, &out); err != nil {
			return err
		}
		return notify(ctx, tx)
	})
	return out, wrap("create", err)
}

// Get returns schedule id of tenant.
func (st *Store) Get(ctx context.Context, tenant, id string) (Schedule, error) {
	rows, err := st.pool.Query(ctx, `SELECT `+columns+` FROM schedules WHERE tenant_id = $1 AND id = $2`, tenant, id)
	if err != nil {
		return Schedule{}, wrap("get", err)
	}
	s, err := pgx.CollectExactlyOneRow(rows, scan)
	return s, wrap("get", err)
}

// List returns up to limit schedules of tenant with ids after after
// (oldest first: ids are time-ordered).
func (st *Store) List(ctx context.Context, tenant, after string, limit int) ([]Schedule, error) {
	rows, err := st.pool.Query(ctx, `SELECT `+columns+` FROM schedules WHERE tenant_id = $1 AND id > $2 ORDER BY id LIMIT $3`,
		tenant, after, limit)
	if err != nil {
		return nil, wrap("list", err)
	}
	out, err := pgx.CollectRows(rows, scan)
	return out, wrap("list", err)
}

// Delete removes schedule id of tenant.
func (st *Store) Delete(ctx context.Context, tenant, id string, rec Recorder) (Schedule, error) {
	var out Schedule
	err := pgx.BeginFunc(ctx, st.pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `DELETE FROM schedules WHERE tenant_id = $1 AND id = $2 RETURNING `+columns, tenant, id)
		if err != nil {
			return err
		}
		if out, err = pgx.CollectExactlyOneRow(rows, scan); err != nil {
			return err
		}
		if err := rec.record(ctx, &out, nil); err != nil {
			return err
		}
		return notify(ctx, tx)
	})
	return out, wrap("delete", err)
}

// Change locks schedule id of tenant, lets fn change it and stores the
// result, in one transaction; fn runs with the row locked, so it never
// races a firing loop (which skips locked rows) or another change.
func (st *Store) Change(ctx context.Context, tenant, id string, fn func(*Schedule) error, rec Recorder) (Schedule, error) {
	var out Schedule
	err := pgx.BeginFunc(ctx, st.pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT `+columns+` FROM schedules WHERE tenant_id = $1 AND id = $2 FOR UPDATE`, tenant, id)
		if err != nil {
			return err
		}
		s, err := pgx.CollectExactlyOneRow(rows, scan)
		if err != nil {
			return err
		}
		before := s
		if err := fn(&s); err != nil {
			return err
		}
		if out, err = save(ctx, tx, s); err != nil {
			return err
		}
		if err := rec.record(ctx, &before, &out); err != nil {
			return err
		}
		return notify(ctx, tx)
	})
	return out, wrap("change", err)
}

// Claim locks up to limit schedules due at now that no other transaction
// holds (FOR UPDATE SKIP LOCKED: replicas share the due rows, never the
// same row), lets fire handle each (concurrently: fire must be safe for
// that) and stores what it changed, all in one transaction. A crash before the commit leaves the rows due; their next
// claim fires the same fire times again, which the caller makes idempotent.
// It returns how many schedules it claimed.
func (st *Store) Claim(ctx context.Context, now time.Time, limit int, fire func(context.Context, *Schedule)) (int, error) {
	n := 0
	err := pgx.BeginFunc(ctx, st.pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT `+columns+` FROM schedules WHERE due_at <= $1
			ORDER BY due_at LIMIT $2 FOR UPDATE SKIP LOCKED`, now, limit)
		if err != nil {
			return err
		}
		due, err := pgx.CollectRows(rows, scan)
		if err != nil {
			return err
		}
		n = len(due)
		// The schedules fire concurrently (each is a produce round trip),
		// then the transaction stores them all.
		var wg sync.WaitGroup
		for i := range due {
			wg.Go(func() { fire(ctx, &due[i]) })
		}
		wg.Wait()
		for i := range due {
			if _, err := save(ctx, tx, due[i]); err != nil {
				return err
			}
		}
		return nil
	})
	return n, wrap("claim", err)
}

// NextDue returns the earliest due time of any schedule (nil: none).
func (st *Store) NextDue(ctx context.Context) (*time.Time, error) {
	var t *time.Time
	err := st.pool.QueryRow(ctx, `SELECT min(due_at) FROM schedules WHERE due_at IS NOT NULL`).Scan(&t)
	return t, wrap("next due", err)
}

// save writes the mutable columns of s.
func save(ctx context.Context, tx pgx.Tx, s Schedule) (Schedule, error) {
	rows, err := tx.Query(ctx, `UPDATE schedules SET name = $3, cron = $4, timezone = $5, template = $6, overlap = $7,
		catchup = $8, catchup_limit = $9, paused = $10, next_fire_at = $11, queued_fire_at = $12, due_at = $13,
		last_fire_at = $14, last_job_id = $15, last_error = $16, fired = $17, skipped = $18, updated_at = now()
		WHERE tenant_id = $1 AND id = $2 RETURNING `+columns,
		s.TenantID, s.ID, s.Name, s.Cron, s.TimeZone, s.Template, s.Overlap, s.Catchup, s.CatchupLimit, s.Paused,
		s.NextFireAt, s.QueuedFireAt, s.DueAt, s.LastFireAt, s.LastJobID, s.LastError, s.Fired, s.Skipped)
	if err != nil {
		return Schedule{}, err
	}
	return pgx.CollectExactlyOneRow(rows, scan)
}

func notify(ctx context.Context, tx pgx.Tx) error {
	_, err := tx.Exec(ctx, `SELECT pg_notify($1, '')`, Channel)
	return err
}

// wrap maps Postgres errors to the store's and names the operation.
func wrap(op string, err error) error {
	var pe *pgconn.PgError
	switch {
	case err == nil:
		return nil
	case errors.Is(err, pgx.ErrNoRows):
		return ErrNotFound
	case errors.Is(err, ErrTooMany), errors.Is(err, ErrNotFound):
		return err
	case errors.As(err, &pe) && pe.Code == "23505":
		return ErrNameTaken
	}
	return fmt.Errorf("schedules: %s: %w", op, err)
}

// Listen calls wake for every notification on Channel until ctx is done,
// on a connection of its own, reconnecting after a failure (and waking
// then too: a notification may have been missed meanwhile).
func (st *Store) Listen(ctx context.Context, wake func(), log *slog.Logger) {
	for ctx.Err() == nil {
		err := st.listenOnce(ctx, wake)
		if ctx.Err() != nil {
			return
		}
		log.WarnContext(ctx, "schedules: listen failed; reconnecting", "err", err)
		wake()
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

func (st *Store) listenOnce(ctx context.Context, wake func()) error {
	c, err := st.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	conn := c.Hijack() // a LISTENing connection never goes back to the pool
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "LISTEN "+Channel); err != nil {
		return err
	}
	for {
		if _, err := conn.WaitForNotification(ctx); err != nil {
			return err
		}
		wake()
	}
}
