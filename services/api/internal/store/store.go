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
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferryhq/ferry/events/schema"
	"github.com/ferryhq/ferry/platform/background"
	"github.com/ferryhq/ferry/platform/pgstore"
	"github.com/ferryhq/ferry/platform/projection"
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

//go:embed migrations_hot/*.sql
var hotMigrations embed.FS

// HotMigrations narrow the jobs table's indexes to columns that do not
// change after a job's enqueued event, so status updates are HOT;
// registered after the migrations whose indexes they replace.
var HotMigrations = pgstore.Register("api-hot", hotMigrations, "migrations_hot")

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
	if err := HotMigrations.Apply(ctx, pool); err != nil {
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

// Job is a row with its version.
type Job struct {
	status.Row
	Version int64
}

// jobKey is one job of one tenant.
type jobKey struct{ tenant, id string }

// Apply is the projection's ApplyFunc: it folds recs into the jobs table
// inside tx, in named steps — group the batch's events by job, load (and
// lock) the rows they touch, fold each job's events into its row in
// memory, then write each changed job once: new rows with one INSERT,
// changed rows with one UPDATE of the state columns (or, when the
// specification changed, of every column), and the counters last. Records
// that do not decode are logged and skipped.
func (s *Store) Apply(ctx context.Context, tx pgx.Tx, recs []*kgo.Record) error {
	batch := s.groupByJob(ctx, recs)
	if len(batch.order) == 0 {
		return nil
	}
	loaded, err := loadForUpdate(ctx, tx, batch)
	if err != nil {
		return err
	}
	writes, counts := fold(batch, loaded.rows, time.Now())
	if len(writes) == 0 {
		return nil
	}
	if err := s.resolveIdempotencyConflicts(ctx, tx, writes); err != nil {
		return err
	}
	if err := writeJobs(ctx, tx, writes, loaded); err != nil {
		return err
	}
	// Last, so the counter rows are locked for the shortest time.
	return counts.apply(ctx, tx)
}

// batchEvents are a batch's lifecycle events by job, jobs in the order
// their first event came; spec holds the jobs one of whose events carries
// their specification (status.CarriesSpec).
type batchEvents struct {
	order []jobKey
	byJob map[jobKey][]schema.Event
	spec  map[jobKey]bool
}

// groupByJob decodes recs (each once, and once for every projection of a
// shared reader: projection.Decode, so the events are read, never changed)
// and groups the lifecycle events by job; other records are skipped,
// undecodable ones logged.
func (s *Store) groupByJob(ctx context.Context, recs []*kgo.Record) batchEvents {
	// Sized for a job per record up front: a batch of thousands rehashed
	// its maps several times as they grew.
	b := batchEvents{byJob: make(map[jobKey][]schema.Event, len(recs)), spec: make(map[jobKey]bool, len(recs)),
		order: make([]jobKey, 0, len(recs))}
	for _, rec := range recs {
		ev, err := projection.Decode(ctx, rec)
		if err != nil {
			s.log.Warn("status projection: skipping undecodable record", "topic", rec.Topic, "partition", rec.Partition, "offset", rec.Offset, "err", err)
			continue
		}
		lc, ok := ev.Data.(schema.Lifecycle)
		if !ok {
			continue
		}
		k := jobKey{lc.Ref().TenantID, lc.Ref().JobID}
		if _, seen := b.byJob[k]; !seen {
			b.order = append(b.order, k)
		}
		b.byJob[k] = append(b.byJob[k], ev)
		if status.CarriesSpec(ev) {
			b.spec[k] = true
		}
	}
	return b
}

// loadedJobs are the stored rows of a batch's jobs. A row of partial
// holds foldColumns only: none of the batch's events for it carries a
// specification, so its fold needs no more (status.CarriesSpec).
type loadedJobs struct {
	rows    map[jobKey]*Job
	partial map[jobKey]bool
}

// loadForUpdate reads and locks the existing rows of the batch's jobs, in
// key order so two projection transactions never deadlock: foldColumns of
// each, then the whole row of those the batch brings a specification for
// (few: a job's enqueued event nearly always comes before its row exists).
func loadForUpdate(ctx context.Context, tx pgx.Tx, batch batchEvents) (loadedJobs, error) {
	sorted := slices.Clone(batch.order)
	slices.SortFunc(sorted, compareKeys)
	jobs, err := selectJobs(ctx, tx, foldSelect+" FROM jobs", " FOR UPDATE", sorted, foldColumns)
	if err != nil {
		return loadedJobs{}, err
	}
	out := loadedJobs{rows: make(map[jobKey]*Job, len(jobs)), partial: make(map[jobKey]bool, len(jobs))}
	var whole []jobKey
	for i := range jobs {
		k := jobKey{jobs[i].TenantID, jobs[i].ID}
		out.rows[k] = &jobs[i]
		if batch.spec[k] {
			whole = append(whole, k)
		} else {
			out.partial[k] = true
		}
	}
	if len(whole) == 0 {
		return out, nil
	}
	// Locked by the first read: a plain read sees them as they are.
	full, err := selectJobs(ctx, tx, selectColumns+" FROM jobs", "", whole, jobColumns)
	if err != nil {
		return loadedJobs{}, err
	}
	for i := range full {
		out.rows[jobKey{full[i].TenantID, full[i].ID}] = &full[i]
	}
	return out, nil
}

// selectJobs reads the rows of keys (in that order) with the SELECT list
// (of cols) and table of what and the locking clause lock, each through
// the primary key (a lateral subquery per key: the planner cannot turn it
// into a scan of the table, as it would a join with the key arrays while
// the table is small enough). The result has room for every key from the
// start: a batch's rows are large, and growing the slice copied them.
func selectJobs(ctx context.Context, tx pgx.Tx, what, lock string, keys []jobKey, cols []column) ([]Job, error) {
	tenants, ids := make([]string, len(keys)), make([]string, len(keys))
	for i, k := range keys {
		tenants[i], ids[i] = k.tenant, k.id
	}
	rows, err := tx.Query(ctx, `SELECT j.* FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS k(t, i, n)
		CROSS JOIN LATERAL (SELECT `+what+` WHERE tenant_id = k.t AND id = k.i`+lock+`) j
		ORDER BY k.n`, tenants, ids)
	if err != nil {
		return nil, fmt.Errorf("store: load jobs: %w", err)
	}
	jobs, err := pgx.AppendRows(make([]Job, 0, len(keys)), rows, newRowScanner(cols).scan)
	if err != nil {
		return nil, fmt.Errorf("store: load jobs: %w", err)
	}
	return jobs, nil
}

// compareKeys orders jobs by tenant, then id: the order every statement
// of the projection takes its row locks in.
func compareKeys(a, b jobKey) int {
	if c := strings.Compare(a.tenant, b.tenant); c != 0 {
		return c
	}
	return strings.Compare(a.id, b.id)
}

// fold applies each job's events to its loaded row (or a new one) with the
// merge rules of internal/status and returns the rows that changed, with
// the counter changes they make.
func fold(batch batchEvents, loaded map[jobKey]*Job, now time.Time) ([]*Job, *countChanges) {
	writes := make([]*Job, 0, len(batch.order))
	rows := make([]Job, len(batch.order)) // one allocation for the batch, not one per job
	counts := newCountChanges()
	for i, k := range batch.order {
		background.Step()
		before := loaded[k]
		j := &rows[i]
		if before != nil {
			*j = *before
		}
		changed := false
		for _, ev := range batch.byJob[k] {
			if status.Apply(&j.Row, ev) {
				changed = true
			}
		}
		if !changed {
			continue
		}
		writes = append(writes, j)
		counts.move(before, j, now)
	}
	return writes, counts
}

// writeJobs writes each changed job, in key order: new rows with one COPY
// (copyNewJobs), then one statement per kind of update: rows whose
// specification is unchanged get their state columns only; rows whose
// specification changed (rare: an enqueued event after the row was
// created from a later one) are written whole. A row read partially
// (loadedJobs) is written whole only while it has no specification, whose
// columns then all hold their defaults, as the partial row does. A row
// another transaction wrote meanwhile fails the batch with
// ErrConcurrentWrite; the retry merges into it.
func writeJobs(ctx context.Context, tx pgx.Tx, writes []*Job, loaded loadedJobs) error {
	slices.SortFunc(writes, func(a, b *Job) int { return compareKeys(jobKey{a.TenantID, a.ID}, jobKey{b.TenantID, b.ID}) })
	var fresh, whole, state []*Job
	for _, j := range writes {
		k := jobKey{j.TenantID, j.ID}
		before := loaded.rows[k]
		switch {
		case before == nil:
			fresh = append(fresh, j)
		case sameSpec(before, j):
			state = append(state, j)
		case loaded.partial[k] && before.SpecAttempt != 0:
			// status.CarriesSpec promises this cannot happen.
			return fmt.Errorf("store: job %s of %s: an event without a specification changed it", j.ID, j.TenantID)
		default:
			whole = append(whole, j)
		}
	}
	if err := copyNewJobs(ctx, tx, fresh); err != nil {
		return err
	}
	for _, w := range []struct {
		stmt batchWrite
		jobs []*Job
	}{{writeWhole, whole}, {writeState, state}} {
		if len(w.jobs) == 0 {
			continue
		}
		tag, err := tx.Exec(ctx, w.stmt.sql, w.stmt.args(w.jobs)...)
		if err != nil {
			return fmt.Errorf("store: write jobs: %w", err)
		}
		if int(tag.RowsAffected()) != len(w.jobs) {
			return ErrConcurrentWrite
		}
	}
	return nil
}

// copyNewJobs inserts rows no transaction had written when the batch
// loaded them, with one COPY: Postgres reads each value as it is stored
// and inserts the rows a page at a time (one WAL record per page, not per
// row), where an INSERT … SELECT FROM unnest would first decode one array
// per column and materialize the rows. When another transaction inserted
// one of the jobs meanwhile, the primary key stops the COPY (the batch's
// transaction is then void) and the batch is retried as
// ErrConcurrentWrite, never as a poison record (a unique violation
// otherwise is one, platform/quarantine).
func copyNewJobs(ctx context.Context, tx pgx.Tx, jobs []*Job) error {
	if len(jobs) == 0 {
		return nil
	}
	w := pgstore.NewCopyWriter()
	for _, j := range jobs {
		copyRow(w, j)
	}
	n, err := w.Copy(ctx, tx, pgx.Identifier{"jobs"}, columnNames)
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &pgErr) && pgErr.Code == "23505" && pgErr.ConstraintName == "jobs_pkey":
		return ErrConcurrentWrite
	case err != nil:
		return fmt.Errorf("store: insert jobs: %w", err)
	case int(n) != len(jobs):
		return fmt.Errorf("store: insert jobs: %d of %d copied", n, len(jobs))
	}
	return nil
}

// countChanges are a batch's changes of the counter tables kept beside
// the jobs (tenant_job_counts, tenant_queue_counts, tenant_throughput).
type countChanges struct {
	tenants  map[string]*countDelta
	queues   map[queueKey]*countDelta
	outcomes map[minuteKey]*Outcomes
}

func newCountChanges() *countChanges {
	return &countChanges{tenants: map[string]*countDelta{}, queues: map[queueKey]*countDelta{}, outcomes: map[minuteKey]*Outcomes{}}
}

// move counts job j leaving its status before the batch (before, nil for
// a new row) for its status now.
func (c *countChanges) move(before, j *Job, now time.Time) {
	from, queueFrom := "", ""
	if before != nil {
		from, queueFrom = string(before.Status()), before.Queue
	}
	to := string(j.Status())
	d := c.tenants[j.TenantID]
	if d == nil {
		d = &countDelta{}
		c.tenants[j.TenantID] = d
	}
	d.add(from, -1)
	d.add(to, +1)
	addQueueDelta(c.queues, queueKey{j.TenantID, queueFrom}, from, -1)
	addQueueDelta(c.queues, queueKey{j.TenantID, j.Queue}, to, +1)
	if !terminal(schema.Status(from)) && terminal(j.Status()) {
		addOutcome(c.outcomes, j.TenantID, j.Status(), j.FinishedAt, now)
	}
}

// apply adds the changes, each table's rows in a fixed order so two
// projection transactions never deadlock.
func (c *countChanges) apply(ctx context.Context, tx pgx.Tx) error {
	if err := applyCounts(ctx, tx, c.tenants); err != nil {
		return err
	}
	if err := applyQueueCounts(ctx, tx, c.queues); err != nil {
		return err
	}
	return applyThroughput(ctx, tx, c.outcomes)
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
func (s *Store) resolveIdempotencyConflicts(ctx context.Context, tx pgx.Tx, writes []*Job) error {
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
	byID := slices.Clone(writes)
	slices.SortFunc(byID, func(a, b *Job) int { return strings.Compare(a.ID, b.ID) })
	for _, j := range byID {
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

// Get returns the job id of tenant, or found=false.
func (s *Store) Get(ctx context.Context, tenant, id string) (Job, bool, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+selectColumns+` FROM jobs WHERE tenant_id = $1 AND id = $2`, tenant, id)
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
	jobs, err := s.query(ctx, "jobs by idempotency key", `SELECT `+selectColumns+` FROM jobs WHERE tenant_id = $1 AND idempotency_key = ANY($2)`, tenant, keys)
	for _, j := range jobs {
		out[j.IdempotencyKey] = j
	}
	return out, err
}

// query runs a SELECT of selectColumns and scans its rows; what names it in errors.
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
	jobs, err := s.query(ctx, "jobs by unique key", `SELECT `+selectColumns+` FROM jobs WHERE tenant_id = $1 AND unique_key = ANY($2)
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
	// CreatedFrom and CreatedTo bound created_at: CreatedFrom ≤ created_at < CreatedTo.
	CreatedFrom, CreatedTo *time.Time
	// After lists jobs older than the cursor.
	After *Cursor
	// Limit is the page size.
	Limit int
	// ScanRows bounds the rows a status-filtered page reads; 0 means
	// StatusScanRows.
	ScanRows int
	// Now decides when a scheduled job reads as queued.
	Now time.Time
}

// StatusScanRows is how many rows a status-filtered page reads at most.
// No index covers status (status updates stay HOT), so such a page walks
// the tenant's jobs newest first, through the index of the other filters,
// and keeps the matching ones; a rare status in a large tenant would
// otherwise read every row of the tenant for one page. When the bound is
// reached first, the page ends early, possibly empty, with the cursor of
// the last row read, and the next page carries on from there.
const StatusScanRows = 2000

// List returns up to f.Limit jobs of tenant, newest first, and the cursor
// of the next page (nil on the last one).
func (s *Store) List(ctx context.Context, tenant string, f Filter) ([]Job, *Cursor, error) {
	q := listQuery{pgstore.Where{Conds: []string{"tenant_id = $1"}, Args: []any{tenant}}}
	statusCond := q.statusCond(f)
	q.filters(f)
	if statusCond == "" {
		jobs, err := s.query(ctx, "list jobs", `SELECT `+selectColumns+` FROM jobs WHERE `+q.SQL()+
			` ORDER BY created_at DESC, id DESC LIMIT `+q.Arg(f.Limit+1), q.Args...)
		if err != nil {
			return nil, nil, err
		}
		if len(jobs) > f.Limit {
			jobs = jobs[:f.Limit]
			return jobs, cursorOf(&jobs[f.Limit-1]), nil
		}
		return jobs, nil, nil
	}
	return s.listScanBounded(ctx, q, statusCond, f)
}

// listScanBounded lists a status-filtered page reading at most
// f.ScanRows rows (StatusScanRows) of those the other filters select,
// newest first, numbered n. It returns the rows of the status among them
// and, when the bound stops the page, the cursor of the last row read
// (n = bound); one row more is read only to tell whether any is left.
func (s *Store) listScanBounded(ctx context.Context, q listQuery, statusCond string, f Filter) ([]Job, *Cursor, error) {
	scan := f.ScanRows
	if scan <= 0 {
		scan = StatusScanRows
	}
	scanArg := q.Arg(scan)
	sql := `SELECT ` + selectColumns + `, hit, n FROM (
		SELECT *, ` + statusCond + ` AS hit, row_number() OVER (ORDER BY created_at DESC, id DESC) AS n FROM (
			SELECT * FROM jobs WHERE ` + q.SQL() + ` ORDER BY created_at DESC, id DESC LIMIT ` + scanArg + ` + 1) j
		) s WHERE (hit AND n <= ` + scanArg + `) OR n >= ` + scanArg + `
		ORDER BY created_at DESC, id DESC LIMIT ` + q.Arg(f.Limit+2)
	rows, err := s.pool.Query(ctx, sql, q.Args...)
	if err != nil {
		return nil, nil, fmt.Errorf("store: list jobs: %w", err)
	}
	read, err := pgx.CollectRows(rows, scanJobRead)
	if err != nil {
		return nil, nil, fmt.Errorf("store: list jobs: %w", err)
	}
	var jobs []Job
	var last *Job // the row n = scan, if read
	more := false // a row lies beyond the bound
	for i := range read {
		r := &read[i]
		if r.hit && r.n <= int64(scan) {
			jobs = append(jobs, r.Job)
		}
		if r.n == int64(scan) {
			last = &r.Job
		}
		more = more || r.n > int64(scan)
	}
	switch {
	case len(jobs) > f.Limit:
		jobs = jobs[:f.Limit]
		return jobs, cursorOf(&jobs[f.Limit-1]), nil
	case more && last != nil:
		return jobs, cursorOf(last), nil
	}
	return jobs, nil, nil
}

// readJob is a row a bounded scan read: whether it matches the status
// filter, and its number in the scan.
type readJob struct {
	Job
	hit bool
	n   int64
}

func scanJobRead(row pgx.CollectableRow) (readJob, error) {
	var r readJob
	j, err := scanJobWith(row, &r.hit, &r.n)
	r.Job = j
	return r, err
}

func cursorOf(j *Job) *Cursor { return &Cursor{CreatedAt: j.CreatedAt, ID: j.ID} }

// listQuery is a job listing's conditions and parameters.
type listQuery struct{ pgstore.Where }

// statusCond is the condition of f.Status ("" for none); a scheduled job
// whose time has come reads as queued.
func (q *listQuery) statusCond(f Filter) string {
	enqueued := strconv.Itoa(int(schema.PhaseEnqueued))
	switch f.Status {
	case "":
		return ""
	case schema.StatusQueued:
		return "(status = 'queued' OR (status = 'scheduled' AND pos_phase = " + enqueued + " AND scheduled_for <= " + q.Arg(f.Now) + "))"
	case schema.StatusScheduled:
		return "(status = 'scheduled' AND NOT (pos_phase = " + enqueued + " AND scheduled_for IS NOT NULL AND scheduled_for <= " + q.Arg(f.Now) + "))"
	default:
		return "(status = " + q.Arg(string(f.Status)) + ")"
	}
}

// filters adds the conditions an index serves: type, queue, tags, the
// creation range and the cursor.
func (q *listQuery) filters(f Filter) {
	if f.Type != "" {
		q.Conds = append(q.Conds, "type = "+q.Arg(f.Type))
	}
	if f.Queue != "" {
		q.Conds = append(q.Conds, "queue = "+q.Arg(f.Queue))
	}
	if len(f.Tags) > 0 {
		// tags <> '{}' is jobs_tagged's predicate, implied by a non-empty filter.
		q.Conds = append(q.Conds, "tags @> "+q.Arg(f.Tags)+"::text[] AND tags <> '{}'")
	}
	if f.CreatedFrom != nil {
		q.Conds = append(q.Conds, "created_at >= "+q.Arg(*f.CreatedFrom))
	}
	if f.CreatedTo != nil {
		q.Conds = append(q.Conds, "created_at < "+q.Arg(*f.CreatedTo))
	}
	if f.After != nil {
		q.Conds = append(q.Conds, "(created_at, id) < ("+q.Arg(f.After.CreatedAt)+"::timestamptz, "+q.Arg(f.After.ID)+"::text)")
	}
}

// GetMany returns the jobs of tenant among ids, by id.
func (s *Store) GetMany(ctx context.Context, tenant string, ids []string) (map[string]Job, error) {
	out := map[string]Job{}
	if len(ids) == 0 {
		return out, nil
	}
	jobs, err := s.query(ctx, "get jobs", `SELECT `+selectColumns+` FROM jobs WHERE tenant_id = $1 AND id = ANY($2)`, tenant, ids)
	if err != nil {
		return nil, err
	}
	for _, j := range jobs {
		out[j.ID] = j
	}
	return out, nil
}
