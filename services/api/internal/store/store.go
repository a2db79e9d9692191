// Package store is the Postgres side of the api's status projection: the
// batch writer that folds lifecycle records into job rows (with the merge
// rules of internal/status) and the queries behind the job routes.
package store

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferryhq/ferry/events/schema"
	"github.com/ferryhq/ferry/platform/pgstore"
	"github.com/ferryhq/ferry/services/api/internal/status"
)

//go:embed migrations/*.sql
var migrations embed.FS

// Migrations are the api schema migrations; `ferry migrate` applies them.
var Migrations = pgstore.Register("api", migrations, "migrations")

//go:embed migrations_unique/*.sql
var uniqueMigrations embed.FS

// UniqueMigrations add the unique-key columns to the jobs table; a
// component of their own, registered after Migrations.
var UniqueMigrations = pgstore.Register("api-unique", uniqueMigrations, "migrations_unique")

//go:embed migrations_schedule/*.sql
var scheduleMigrations embed.FS

// ScheduleMigrations add the jobs' schedule_id column; registered after
// Migrations, whose table they alter.
var ScheduleMigrations = pgstore.Register("api-schedule", scheduleMigrations, "migrations_schedule")

//go:embed migrations_concurrency/*.sql
var concurrencyMigrations embed.FS

// ConcurrencyMigrations add the jobs' concurrency key columns; registered
// after Migrations, whose table they alter.
var ConcurrencyMigrations = pgstore.Register("api-concurrency", concurrencyMigrations, "migrations_concurrency")

// Migrate creates or upgrades the jobs table and tenant_throughput.
func Migrate(ctx context.Context, pool *pgxpool.Pool) error {
	if err := Migrations.Apply(ctx, pool); err != nil {
		return err
	}
	if err := UniqueMigrations.Apply(ctx, pool); err != nil {
		return err
	}
	if err := ScheduleMigrations.Apply(ctx, pool); err != nil {
		return err
	}
	if err := ConcurrencyMigrations.Apply(ctx, pool); err != nil {
		return err
	}
	return ThroughputMigrations.Apply(ctx, pool)
}

// ErrConcurrentWrite is returned when another transaction inserted a job of
// the batch first; the projection retries the batch, which then merges into
// that row.
var ErrConcurrentWrite = errors.New("store: job row written concurrently; retry the batch")

// Store reads and writes the jobs table.
type Store struct {
	pool *pgxpool.Pool
	log  *slog.Logger
}

// New returns a Store over pool.
func New(pool *pgxpool.Pool, log *slog.Logger) *Store {
	if log == nil {
		log = slog.Default()
	}
	return &Store{pool: pool, log: log}
}

const columns = `tenant_id, id, type, queue, priority, pool, status, attempt, max_attempts, payload, tags,
	created_at, scheduled_for, started_at, finished_at, worker_id, progress_percent, progress_message, progress_at,
	result, last_error_class, last_error_message, trace_id, redriven_from, idempotency_key, request_hash, schedule_id,
	pos_attempt, pos_phase, spec_attempt, enq_attempt, delayed, run_attempt, progress_attempt, error_rank, version,
	unique_key, unique_while, unique_until, concurrency_key, concurrency_limit`

var numColumns = len(strings.Split(columns, ","))

// Job is a row with its version.
type Job struct {
	status.Row
	Version int64
}

func scanJob(row pgx.CollectableRow) (Job, error) {
	var (
		j              Job
		st             string
		idem, uniq     *string
		payload, res   []byte
		phase          int
		attemptIgnored int
	)
	err := row.Scan(&j.TenantID, &j.ID, &j.Type, &j.Queue, &j.Priority, &j.Pool, &st, &attemptIgnored, &j.MaxAttempts,
		&payload, &j.Tags, &j.CreatedAt, &j.ScheduledFor, &j.StartedAt, &j.FinishedAt, &j.WorkerID,
		&j.ProgressPercent, &j.ProgressMessage, &j.ProgressAt, &res, &j.LastErrorClass, &j.LastErrorMessage,
		&j.TraceID, &j.RedrivenFrom, &idem, &j.RequestHash, &j.ScheduleID, &j.Pos.Attempt, &phase, &j.SpecAttempt, &j.EnqAttempt,
		&j.Delayed, &j.RunAttempt, &j.ProgressAttempt, &j.ErrorRank, &j.Version, &uniq, &j.UniqueWhile, &j.UniqueUntil,
		&j.ConcurrencyKey, &j.ConcurrencyLimit)
	if err != nil {
		return j, err
	}
	j.Pos.Phase = schema.Phase(phase)
	if idem != nil {
		j.IdempotencyKey = *idem
	}
	if uniq != nil {
		j.UniqueKey = *uniq
	}
	if len(payload) > 0 {
		j.Payload = payload
	}
	if len(res) > 0 {
		j.Result = res
	}
	if len(j.Tags) == 0 {
		j.Tags = nil
	}
	utc(&j.CreatedAt)
	for _, t := range []*time.Time{j.ScheduledFor, j.StartedAt, j.FinishedAt, j.ProgressAt, j.UniqueUntil} {
		if t != nil {
			utc(t)
		}
	}
	return j, nil
}

func utc(t *time.Time) { *t = t.UTC() }

// Apply is the projection's ApplyFunc: it folds recs into the jobs table
// inside tx. Records that do not decode are logged and skipped. All events
// of one job in the batch collapse into one row write; the batch's existing
// rows are loaded (and locked) with one query and written with one
// multi-row upsert per 1,000 jobs.
func (s *Store) Apply(ctx context.Context, tx pgx.Tx, recs []*kgo.Record) error {
	type key struct{ tenant, id string }
	byJob := map[key][]schema.Event{}
	var order []key
	for _, rec := range recs {
		ev, err := schema.Decode(rec)
		if err != nil {
			s.log.Warn("status projection: skipping undecodable record", "topic", rec.Topic, "partition", rec.Partition, "offset", rec.Offset, "err", err)
			continue
		}
		lc, ok := ev.Data.(schema.Lifecycle)
		if !ok {
			continue
		}
		k := key{lc.Ref().TenantID, lc.Ref().JobID}
		if _, seen := byJob[k]; !seen {
			order = append(order, k)
		}
		byJob[k] = append(byJob[k], ev)
	}
	if len(order) == 0 {
		return nil
	}
	ids := make([]string, 0, len(order))
	for _, k := range order {
		ids = append(ids, k.id)
	}
	rows, err := tx.Query(ctx, `SELECT `+columns+` FROM jobs WHERE id = ANY($1) ORDER BY tenant_id, id FOR UPDATE`, ids)
	if err != nil {
		return fmt.Errorf("store: load jobs: %w", err)
	}
	loaded, err := pgx.CollectRows(rows, scanJob)
	if err != nil {
		return fmt.Errorf("store: load jobs: %w", err)
	}
	existing := make(map[key]Job, len(loaded))
	for _, j := range loaded {
		existing[key{j.TenantID, j.ID}] = j
	}
	var writes []Job
	deltas := map[string]*countDelta{}
	qdeltas := map[queueKey]*countDelta{}
	outcomes := map[minuteKey]*Outcomes{}
	for _, k := range order {
		j, found := existing[k]
		before, queueBefore := "", ""
		if found {
			before, queueBefore = string(j.Status()), j.Queue
		}
		changed := false
		for _, ev := range byJob[k] {
			if status.Apply(&j.Row, ev) {
				changed = true
			}
		}
		if !changed {
			continue
		}
		if !found {
			j.Version = 0
		}
		writes = append(writes, j)
		d := deltas[j.TenantID]
		if d == nil {
			d = &countDelta{}
			deltas[j.TenantID] = d
		}
		d.add(before, -1)
		d.add(string(j.Status()), +1)
		addQueueDelta(qdeltas, queueKey{j.TenantID, queueBefore}, before, -1)
		addQueueDelta(qdeltas, queueKey{j.TenantID, j.Queue}, string(j.Status()), +1)
		if !terminal(schema.Status(before)) && terminal(j.Status()) {
			addOutcome(outcomes, j.TenantID, j.Status(), j.FinishedAt, time.Now())
		}
	}
	if len(writes) == 0 {
		return nil
	}
	if err := s.resolveIdempotencyConflicts(ctx, tx, writes); err != nil {
		return err
	}
	for start := 0; start < len(writes); start += 1000 {
		if err := upsert(ctx, tx, writes[start:min(start+1000, len(writes))]); err != nil {
			return err
		}
	}
	// Last, so the counter rows are locked for the shortest time; tenants in
	// a fixed order so two projection transactions never deadlock.
	if err := applyCounts(ctx, tx, deltas); err != nil {
		return err
	}
	if err := applyQueueCounts(ctx, tx, qdeltas); err != nil {
		return err
	}
	return applyThroughput(ctx, tx, outcomes)
}

// countDelta is the change of one tenant's tenant_job_counts row.
type countDelta struct{ pending, running int64 }

func (d *countDelta) add(st string, n int64) {
	switch schema.Status(st) {
	case schema.StatusQueued, schema.StatusScheduled:
		d.pending += n
	case schema.StatusRunning:
		d.running += n
	}
}

func applyCounts(ctx context.Context, tx pgx.Tx, deltas map[string]*countDelta) error {
	var tenants []string
	for t, d := range deltas {
		if d.pending != 0 || d.running != 0 {
			tenants = append(tenants, t)
		}
	}
	if len(tenants) == 0 {
		return nil
	}
	sort.Strings(tenants)
	pending, running := make([]int64, len(tenants)), make([]int64, len(tenants))
	for i, t := range tenants {
		pending[i], running[i] = deltas[t].pending, deltas[t].running
	}
	_, err := tx.Exec(ctx, `INSERT INTO tenant_job_counts AS c (tenant_id, pending, running)
		SELECT t, p, r FROM unnest($1::text[], $2::bigint[], $3::bigint[]) AS d(t, p, r) ORDER BY t
		ON CONFLICT (tenant_id) DO UPDATE SET
			pending = c.pending + EXCLUDED.pending,
			running = c.running + EXCLUDED.running`, tenants, pending, running)
	if err != nil {
		return fmt.Errorf("store: tenant job counts: %w", err)
	}
	return nil
}

// Counts are a tenant's unfinished jobs as the projection last saw them.
type Counts struct {
	Pending int64
	Running int64
}

// TenantCounts returns tenant's row of tenant_job_counts (zero if none).
func (s *Store) TenantCounts(ctx context.Context, tenant string) (Counts, error) {
	var c Counts
	err := s.pool.QueryRow(ctx, `SELECT pending, running FROM tenant_job_counts WHERE tenant_id = $1`, tenant).Scan(&c.Pending, &c.Running)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return Counts{}, fmt.Errorf("store: tenant job counts: %w", err)
	}
	// A row is created by its first delta; a negative one (a job whose
	// rows predate the counter) reads as zero.
	c.Pending, c.Running = max(c.Pending, 0), max(c.Running, 0)
	return c, nil
}

// resolveIdempotencyConflicts drops the idempotency key from a new row when
// another job of the tenant already holds it (two jobs accepted for one key,
// possible only if Redis lost the key while the first was in flight), so the
// unique index never stops the projection. The job that holds the key keeps
// it; within the batch the smallest id wins.
func (s *Store) resolveIdempotencyConflicts(ctx context.Context, tx pgx.Tx, writes []Job) error {
	var tenants, keys []string
	for _, j := range writes {
		if j.IdempotencyKey != "" {
			tenants, keys = append(tenants, j.TenantID), append(keys, j.IdempotencyKey)
		}
	}
	if len(keys) == 0 {
		return nil
	}
	rows, err := tx.Query(ctx, `SELECT j.tenant_id, j.idempotency_key, j.id FROM jobs j
		JOIN unnest($1::text[], $2::text[]) AS k(t, k) ON j.tenant_id = k.t AND j.idempotency_key = k.k`, tenants, keys)
	if err != nil {
		return fmt.Errorf("store: idempotency keys: %w", err)
	}
	owner := map[[2]string]string{}
	for rows.Next() {
		var t, k, id string
		if err := rows.Scan(&t, &k, &id); err != nil {
			rows.Close()
			return err
		}
		owner[[2]string{t, k}] = id
	}
	if err := rows.Err(); err != nil {
		return err
	}
	idx := make([]int, 0, len(writes))
	for i := range writes {
		idx = append(idx, i)
	}
	sort.Slice(idx, func(a, b int) bool { return writes[idx[a]].ID < writes[idx[b]].ID })
	for _, i := range idx {
		j := &writes[i]
		if j.IdempotencyKey == "" {
			continue
		}
		k := [2]string{j.TenantID, j.IdempotencyKey}
		if o, taken := owner[k]; taken && o != j.ID {
			s.log.Warn("status projection: idempotency key already held by another job; dropping it from this one",
				"tenant", j.TenantID, "job_id", j.ID, "holder", o, "idempotency_key", j.IdempotencyKey)
			j.IdempotencyKey = ""
			continue
		}
		owner[k] = j.ID
	}
	return nil
}

func upsert(ctx context.Context, tx pgx.Tx, jobs []Job) error {
	var sb strings.Builder
	sb.WriteString(`INSERT INTO jobs (` + columns + `) VALUES `)
	args := make([]any, 0, len(jobs)*numColumns)
	for i, j := range jobs {
		if i > 0 {
			sb.WriteByte(',')
		}
		sb.WriteByte('(')
		for c := range numColumns {
			if c > 0 {
				sb.WriteByte(',')
			}
			n := len(args) + c + 1
			sb.WriteString("$" + strconv.Itoa(n))
			switch c {
			case 9, 19: // payload, result
				sb.WriteString("::jsonb")
			}
		}
		sb.WriteByte(')')
		var idem, uniq *string
		if j.IdempotencyKey != "" {
			idem = &j.IdempotencyKey
		}
		if j.UniqueKey != "" {
			uniq = &j.UniqueKey
		}
		tags := j.Tags
		if tags == nil {
			tags = []string{}
		}
		created := j.CreatedAt
		if created.IsZero() {
			created = time.Now().UTC()
		}
		args = append(args, j.TenantID, j.ID, j.Type, j.Queue, j.Priority, j.Pool, string(j.Status()), j.Pos.Attempt,
			j.MaxAttempts, rawArg(j.Payload), tags, created, j.ScheduledFor, j.StartedAt, j.FinishedAt, j.WorkerID,
			j.ProgressPercent, j.ProgressMessage, j.ProgressAt, rawArg(j.Result), j.LastErrorClass, j.LastErrorMessage,
			j.TraceID, j.RedrivenFrom, idem, j.RequestHash, j.ScheduleID, j.Pos.Attempt, int(j.Pos.Phase), j.SpecAttempt, j.EnqAttempt,
			j.Delayed, j.RunAttempt, j.ProgressAttempt, j.ErrorRank, j.Version+1, uniq, j.UniqueWhile, j.UniqueUntil,
			j.ConcurrencyKey, j.ConcurrencyLimit)
	}
	sb.WriteString(` ON CONFLICT (tenant_id, id) DO UPDATE SET `)
	for i, c := range strings.Split(columns, ",") {
		c = strings.TrimSpace(c)
		if c == "tenant_id" || c == "id" {
			continue
		}
		if i > 2 {
			sb.WriteByte(',')
		}
		sb.WriteString(c + " = EXCLUDED." + c)
	}
	sb.WriteString(`, updated_at = now() WHERE jobs.version = EXCLUDED.version - 1`)
	tag, err := tx.Exec(ctx, sb.String(), args...)
	if err != nil {
		return fmt.Errorf("store: upsert jobs: %w", err)
	}
	if int(tag.RowsAffected()) != len(jobs) {
		return ErrConcurrentWrite
	}
	return nil
}

func rawArg(b []byte) *string {
	if len(b) == 0 {
		return nil
	}
	s := string(b)
	return &s
}

// Get returns the job id of tenant, or found=false.
func (s *Store) Get(ctx context.Context, tenant, id string) (Job, bool, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+columns+` FROM jobs WHERE tenant_id = $1 AND id = $2`, tenant, id)
	if err != nil {
		return Job{}, false, fmt.Errorf("store: get job: %w", err)
	}
	j, err := pgx.CollectExactlyOneRow(rows, scanJob)
	if errors.Is(err, pgx.ErrNoRows) {
		return Job{}, false, nil
	}
	if err != nil {
		return Job{}, false, fmt.Errorf("store: get job: %w", err)
	}
	return j, true, nil
}

// ByIdempotencyKeys returns the jobs of tenant holding any of keys, by key.
func (s *Store) ByIdempotencyKeys(ctx context.Context, tenant string, keys []string) (map[string]Job, error) {
	out := map[string]Job{}
	if len(keys) == 0 {
		return out, nil
	}
	jobs, err := s.query(ctx, "jobs by idempotency key", `SELECT `+columns+` FROM jobs WHERE tenant_id = $1 AND idempotency_key = ANY($2)`, tenant, keys)
	for _, j := range jobs {
		out[j.IdempotencyKey] = j
	}
	return out, err
}

// query runs a SELECT of columns and scans its rows; what names it in errors.
func (s *Store) query(ctx context.Context, what, sql string, args ...any) ([]Job, error) {
	rows, err := s.pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("store: %s: %w", what, err)
	}
	jobs, err := pgx.CollectRows(rows, scanJob)
	if err != nil {
		return nil, fmt.Errorf("store: %s: %w", what, err)
	}
	return jobs, nil
}

// HoldingUnique returns, by key, the jobs of tenant that hold any of keys
// at now (status.Row.HoldsUnique). Should two jobs hold one key (possible
// only after a Redis loss within the projection's lag) the oldest wins.
func (s *Store) HoldingUnique(ctx context.Context, tenant string, keys []string, now time.Time) (map[string]Job, error) {
	out := map[string]Job{}
	if len(keys) == 0 {
		return out, nil
	}
	jobs, err := s.query(ctx, "jobs by unique key", `SELECT `+columns+` FROM jobs WHERE tenant_id = $1 AND unique_key = ANY($2)
		AND unique_until > $3 AND status NOT IN ('succeeded', 'dead', 'cancelled') ORDER BY created_at DESC, id DESC`, tenant, keys, now)
	if err != nil {
		return nil, err
	}
	for _, j := range jobs {
		if j.HoldsUnique(now) {
			out[j.UniqueKey] = j
		}
	}
	return out, nil
}

// Cursor is a position in a newest-first listing.
type Cursor struct {
	CreatedAt time.Time
	ID        string
}

// Filter selects jobs to list.
type Filter struct {
	Status schema.Status
	Type   string
	Queue  string
	// Tags must all be present.
	Tags []string
	// After lists jobs older than the cursor.
	After *Cursor
	Limit int
	// Now decides when a scheduled job reads as queued.
	Now time.Time
}

// List returns up to f.Limit jobs of tenant, newest first.
func (s *Store) List(ctx context.Context, tenant string, f Filter) ([]Job, error) {
	where := []string{"tenant_id = $1"}
	args := []any{tenant}
	arg := func(v any) string { args = append(args, v); return "$" + strconv.Itoa(len(args)) }
	switch f.Status {
	case "":
	case schema.StatusQueued:
		where = append(where, "(status = 'queued' OR (status = 'scheduled' AND pos_phase = "+strconv.Itoa(int(schema.PhaseEnqueued))+" AND scheduled_for <= "+arg(f.Now)+"))")
	case schema.StatusScheduled:
		where = append(where, "status = 'scheduled' AND NOT (pos_phase = "+strconv.Itoa(int(schema.PhaseEnqueued))+" AND scheduled_for IS NOT NULL AND scheduled_for <= "+arg(f.Now)+")")
	default:
		where = append(where, "status = "+arg(string(f.Status)))
	}
	if f.Type != "" {
		where = append(where, "type = "+arg(f.Type))
	}
	if f.Queue != "" {
		where = append(where, "queue = "+arg(f.Queue))
	}
	if len(f.Tags) > 0 {
		where = append(where, "tags @> "+arg(f.Tags)+"::text[]")
	}
	if f.After != nil {
		where = append(where, "(created_at, id) < ("+arg(f.After.CreatedAt)+"::timestamptz, "+arg(f.After.ID)+"::text)")
	}
	q := `SELECT ` + columns + ` FROM jobs WHERE ` + strings.Join(where, " AND ") +
		` ORDER BY created_at DESC, id DESC LIMIT ` + arg(f.Limit)
	return s.query(ctx, "list jobs", q, args...)
}

// GetMany returns the jobs of tenant among ids, by id.
func (s *Store) GetMany(ctx context.Context, tenant string, ids []string) (map[string]Job, error) {
	out := map[string]Job{}
	if len(ids) == 0 {
		return out, nil
	}
	jobs, err := s.query(ctx, "get jobs", `SELECT `+columns+` FROM jobs WHERE tenant_id = $1 AND id = ANY($2)`, tenant, ids)
	if err != nil {
		return nil, err
	}
	for _, j := range jobs {
		out[j.ID] = j
	}
	return out, nil
}
