// Package store is the dlq service's Postgres adapter: the DLQ projection
// (dlq_entries), re-drive claims (dlq_redrives), purge tombstones
// (dlq_purged) and the queries over them.
package store

import (
	"bytes"
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferryhq/ferry/events/schema"
	"github.com/ferryhq/ferry/platform/pgstore"
	"github.com/ferryhq/ferry/platform/projection"
)

//go:embed migrations/*.sql
var migrations embed.FS

// Migrations are the dlq schema migrations; `ferry migrate` applies them.
var Migrations = pgstore.Register("dlq", migrations, "migrations")

// Migrate applies the dlq migrations.
func Migrate(ctx context.Context, pool *pgxpool.Pool) error {
	return Migrations.Apply(ctx, pool)
}

// ErrNotFound is returned for an entry that does not exist for the tenant.
var ErrNotFound = errors.New("store: dlq entry not found")

// Re-drive states of dlq_redrives.
const (
	StatePending  = "pending"
	StateReleased = "released"
	StateDone     = "done"
)

// Store reads and writes the DLQ tables.
type Store struct {
	pool   *pgxpool.Pool
	topics schema.Topics
	log    *slog.Logger
}

// New returns a store over pool; topics tells the projection which topic a
// record came from.
func New(pool *pgxpool.Pool, topics schema.Topics, log *slog.Logger) *Store {
	return &Store{pool: pool, topics: topics, log: log}
}

// Redrive is the re-drive of one entry.
type Redrive struct {
	JobID       string
	State       string
	Actor       string
	Spec        schema.JobSpec
	ClaimedAt   *time.Time
	RedrivenAt  *time.Time
	ConfirmedAt *time.Time
}

// Entry is one dead-lettered job.
type Entry struct {
	TenantID     string
	JobID        string
	Attempt      int
	Type         string
	Queue        string
	Spec         schema.JobSpec
	History      []schema.Attempt
	ErrorClass   string
	ErrorMessage string
	CreatedAt    time.Time
	DeadAt       time.Time
	RedrivenFrom string
	SuppressedAt *time.Time
	SuppressedBy string
	// Redrive is nil when the entry was never re-driven (or its only
	// attempt was released).
	Redrive *Redrive
}

const entryColumns = `e.tenant_id, e.job_id, e.attempt, e.type, e.queue, e.spec::text, e.history::text,
	e.error_class, e.error_message, e.created_at, e.dead_at, e.redriven_from, e.suppressed_at, e.suppressed_by,
	r.job_id, r.state, r.actor, r.spec::text, r.claimed_at, r.redriven_at, r.confirmed_at`

const entryFrom = ` FROM dlq_entries e LEFT JOIN dlq_redrives r ON r.tenant_id = e.tenant_id AND r.dead_job_id = e.job_id`

func scanEntry(row pgx.CollectableRow) (Entry, error) {
	var e Entry
	var spec, history string
	var rJob, rState, rActor, rSpec *string
	var rClaimed, rAt, rConfirmed *time.Time
	if err := row.Scan(&e.TenantID, &e.JobID, &e.Attempt, &e.Type, &e.Queue, &spec, &history,
		&e.ErrorClass, &e.ErrorMessage, &e.CreatedAt, &e.DeadAt, &e.RedrivenFrom, &e.SuppressedAt, &e.SuppressedBy,
		&rJob, &rState, &rActor, &rSpec, &rClaimed, &rAt, &rConfirmed); err != nil {
		return e, err
	}
	if err := json.Unmarshal([]byte(spec), &e.Spec); err != nil {
		return e, fmt.Errorf("entry %s spec: %w", e.JobID, err)
	}
	if err := json.Unmarshal([]byte(history), &e.History); err != nil {
		return e, fmt.Errorf("entry %s history: %w", e.JobID, err)
	}
	if rJob != nil && *rState != StateReleased {
		rd := &Redrive{JobID: *rJob, State: *rState, Actor: *rActor, ClaimedAt: rClaimed, RedrivenAt: rAt, ConfirmedAt: rConfirmed}
		if err := json.Unmarshal([]byte(*rSpec), &rd.Spec); err != nil {
			return e, fmt.Errorf("entry %s redrive spec: %w", e.JobID, err)
		}
		e.Redrive = rd
	}
	return e, nil
}

// ---- projection ----

type entryKey struct{ tenant, job string }

// Apply is the projection's ApplyFunc: it folds the batch's dlq events into
// dlq_entries (the highest attempt of a job wins, repeats are ignored,
// purged jobs stay purged) and records the re-drives its enqueued events
// with reason "redrive" confirm. Records that fail to decode are logged and
// skipped. Events come from projection.Decode: read, never changed.
func (s *Store) Apply(ctx context.Context, tx pgx.Tx, recs []*kgo.Record) error {
	dead := map[entryKey]schema.DeadLettered{}
	deadIDs := map[entryKey]string{}
	var order []entryKey
	redrives := map[entryKey]schema.Enqueued{}
	var rorder []entryKey
	for _, r := range recs {
		et, ok := s.topics.EventTypeOf(r.Topic)
		if !ok {
			continue
		}
		switch et {
		case schema.EventDLQ:
			ev, err := projection.Decode(ctx, r)
			if err != nil {
				s.log.WarnContext(ctx, "skipping undecodable dlq record", "topic", r.Topic, "partition", r.Partition, "offset", r.Offset, "err", err)
				continue
			}
			d, ok := ev.Data.(schema.DeadLettered)
			if !ok {
				s.log.WarnContext(ctx, "skipping record of unexpected type on dlq topic", "type", ev.Type, "offset", r.Offset)
				continue
			}
			k := entryKey{d.TenantID, d.JobID}
			cur, seen := dead[k]
			if !seen {
				order = append(order, k)
			}
			if !seen || d.Attempt > cur.Attempt {
				dead[k], deadIDs[k] = d, ev.ID
			}
		case schema.EventEnqueued:
			// Only re-drives matter; skip the bulk of submissions and
			// retries without decoding them.
			if !bytes.Contains(r.Value, []byte(`"redrive"`)) {
				continue
			}
			ev, err := projection.Decode(ctx, r)
			if err != nil {
				s.log.WarnContext(ctx, "skipping undecodable enqueued record", "partition", r.Partition, "offset", r.Offset, "err", err)
				continue
			}
			e, ok := ev.Data.(schema.Enqueued)
			if !ok || e.Reason != schema.ReasonRedrive || e.RedrivenFrom == "" {
				continue
			}
			k := entryKey{e.TenantID, e.RedrivenFrom}
			if _, seen := redrives[k]; !seen {
				rorder = append(rorder, k)
				redrives[k] = e
			}
		}
	}
	if err := s.upsertEntries(ctx, tx, order, dead, deadIDs); err != nil {
		return err
	}
	return s.confirmRedrives(ctx, tx, rorder, redrives)
}

func (s *Store) upsertEntries(ctx context.Context, tx pgx.Tx, order []entryKey, dead map[entryKey]schema.DeadLettered, ids map[entryKey]string) error {
	if len(order) == 0 {
		return nil
	}
	n := len(order)
	var (
		tenants, jobs, types, queues, specs, hists, classes, msgs, froms, evIDs = mk(n), mk(n), mk(n), mk(n), mk(n), mk(n), mk(n), mk(n), mk(n), mk(n)
		attempts                                                                = make([]int32, 0, n)
		created, deadAt                                                         = make([]time.Time, 0, n), make([]time.Time, 0, n)
		tags                                                                    = mk(n)
	)
	for _, k := range order {
		d := dead[k]
		spec, err := json.Marshal(d.Job)
		if err != nil {
			return err
		}
		history := d.History
		if history == nil {
			history = []schema.Attempt{}
		}
		hist, err := json.Marshal(history)
		if err != nil {
			return err
		}
		deadTime := d.DeadAt
		if deadTime.IsZero() {
			deadTime = time.Now()
		}
		tenants, jobs, types, queues = append(tenants, d.TenantID), append(jobs, d.JobID), append(types, d.Job.Type), append(queues, d.Job.Queue)
		specs, hists, classes, msgs = append(specs, string(spec)), append(hists, string(hist)), append(classes, string(d.Error.Class)), append(msgs, d.Error.Message)
		froms, evIDs = append(froms, d.RedrivenFrom), append(evIDs, ids[k])
		attempts, created, deadAt = append(attempts, int32(d.Attempt)), append(created, d.CreatedAt), append(deadAt, deadTime)
		tags = append(tags, tagsJSON(d.Job.Tags))
	}
	_, err := tx.Exec(ctx, `
		INSERT INTO dlq_entries (tenant_id, job_id, attempt, type, queue, spec, history, error_class, error_message,
			created_at, dead_at, redriven_from, event_id, tags, projected_at)
		SELECT x.t, x.j, x.a, x.ty, x.q, x.s::json, x.h::json, x.c, x.m, x.ca, x.da, x.f, x.ev,
			ARRAY(SELECT json_array_elements_text(x.tg::json)), clock_timestamp()
		FROM unnest($1::text[], $2::text[], $3::int[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[],
			$9::text[], $10::timestamptz[], $11::timestamptz[], $12::text[], $13::text[], $14::text[])
			AS x(t, j, a, ty, q, s, h, c, m, ca, da, f, ev, tg)
		WHERE NOT EXISTS (SELECT 1 FROM dlq_purged p WHERE p.tenant_id = x.t AND p.job_id = x.j)
		ON CONFLICT (tenant_id, job_id) DO UPDATE SET
			attempt = EXCLUDED.attempt, type = EXCLUDED.type, queue = EXCLUDED.queue, spec = EXCLUDED.spec,
			history = EXCLUDED.history, error_class = EXCLUDED.error_class, error_message = EXCLUDED.error_message,
			created_at = EXCLUDED.created_at, dead_at = EXCLUDED.dead_at, redriven_from = EXCLUDED.redriven_from,
			event_id = EXCLUDED.event_id, tags = EXCLUDED.tags, projected_at = EXCLUDED.projected_at
		WHERE EXCLUDED.attempt > dlq_entries.attempt`,
		tenants, jobs, attempts, types, queues, specs, hists, classes, msgs, created, deadAt, froms, evIDs, tags)
	if err != nil {
		return fmt.Errorf("store: upsert dlq entries: %w", err)
	}
	return nil
}

func (s *Store) confirmRedrives(ctx context.Context, tx pgx.Tx, order []entryKey, evs map[entryKey]schema.Enqueued) error {
	if len(order) == 0 {
		return nil
	}
	n := len(order)
	tenants, deads, jobs, actors, specs := mk(n), mk(n), mk(n), mk(n), mk(n)
	at := make([]time.Time, 0, n)
	for _, k := range order {
		e := evs[k]
		spec, err := json.Marshal(e.Job)
		if err != nil {
			return err
		}
		tenants, deads, jobs, actors, specs = append(tenants, k.tenant), append(deads, k.job), append(jobs, e.JobID), append(actors, e.Actor), append(specs, string(spec))
		at = append(at, e.CreatedAt)
	}
	_, err := tx.Exec(ctx, `
		INSERT INTO dlq_redrives (tenant_id, dead_job_id, job_id, state, actor, spec, redriven_at, confirmed_at)
		SELECT x.t, x.d, x.j, 'done', x.a, x.s::json, x.at, now()
		FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::timestamptz[]) AS x(t, d, j, a, s, at)
		ON CONFLICT (tenant_id, dead_job_id) DO UPDATE SET
			state = 'done', claimed_at = NULL,
			redriven_at = COALESCE(dlq_redrives.redriven_at, EXCLUDED.redriven_at),
			confirmed_at = COALESCE(dlq_redrives.confirmed_at, EXCLUDED.confirmed_at)
		WHERE dlq_redrives.job_id = EXCLUDED.job_id`,
		tenants, deads, jobs, actors, specs, at)
	if err != nil {
		return fmt.Errorf("store: confirm re-drives: %w", err)
	}
	return nil
}

func mk(n int) []string { return make([]string, 0, n) }

// tagsJSON is a job's tags as a JSON array, the one shape unnest can pass
// per row (a text[] of text[] would have to be rectangular).
func tagsJSON(tags []string) string {
	if len(tags) == 0 {
		return "[]"
	}
	b, _ := json.Marshal(tags)
	return string(b)
}

// ---- queries ----

// Filter selects entries; zero fields match everything.
type Filter struct {
	Type  string
	Queue string
	Class string
	// Q searches the final error message (case-insensitive substring).
	Q string
	// From and To bound dead_at: From ≤ dead_at < To.
	From, To *time.Time
	// Tags must all be on the job.
	Tags []string
}

// Cursor is a position in the newest-first listing.
type Cursor struct {
	DeadAt time.Time
	JobID  string
}

// query is a listing's conditions on dlq_entries e.
type query struct{ pgstore.Where }

func newQuery(tenant string, f Filter) *query {
	q := &query{}
	q.Conds = append(q.Conds, "e.tenant_id = "+q.Arg(tenant))
	if f.Type != "" {
		q.Conds = append(q.Conds, "e.type = "+q.Arg(f.Type))
	}
	if f.Queue != "" {
		q.Conds = append(q.Conds, "e.queue = "+q.Arg(f.Queue))
	}
	if f.Class != "" {
		q.Conds = append(q.Conds, "e.error_class = "+q.Arg(f.Class))
	}
	if f.Q != "" {
		q.Conds = append(q.Conds, "e.error_message ILIKE '%' || "+q.Arg(escapeLike(f.Q))+" || '%'")
	}
	if f.From != nil {
		q.Conds = append(q.Conds, "e.dead_at >= "+q.Arg(*f.From))
	}
	if f.To != nil {
		q.Conds = append(q.Conds, "e.dead_at < "+q.Arg(*f.To))
	}
	if len(f.Tags) > 0 {
		q.Conds = append(q.Conds, "e.tags @> "+q.Arg(f.Tags)+"::text[]")
	}
	return q
}

// redrivable restricts a query to the entries a bulk re-drive takes: not
// suppressed, and not re-driven or being re-driven.
func (q *query) redrivable() *query {
	q.Conds = append(q.Conds, "e.suppressed_at IS NULL",
		"NOT EXISTS (SELECT 1 FROM dlq_redrives r2 WHERE r2.tenant_id = e.tenant_id AND r2.dead_job_id = e.job_id AND r2.state <> 'released')")
	return q
}

// listedBy restricts a query to the entries already listed at asOf (a
// Postgres clock reading, see Store.Clock): an entry's projected_at is the
// Postgres clock when the projection wrote it, after its record was read.
// A zero asOf restricts nothing.
func (q *query) listedBy(asOf time.Time) *query {
	if !asOf.IsZero() {
		q.Conds = append(q.Conds, "e.projected_at < "+q.Arg(asOf))
	}
	return q
}

func escapeLike(s string) string {
	return strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`).Replace(s)
}

// Get returns the entry of job id of tenant.
func (s *Store) Get(ctx context.Context, tenant, id string) (Entry, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+entryColumns+entryFrom+` WHERE e.tenant_id = $1 AND e.job_id = $2`, tenant, id)
	if err != nil {
		return Entry{}, fmt.Errorf("store: get entry: %w", err)
	}
	e, err := pgx.CollectExactlyOneRow(rows, scanEntry)
	if errors.Is(err, pgx.ErrNoRows) {
		return Entry{}, ErrNotFound
	}
	if err != nil {
		return Entry{}, fmt.Errorf("store: get entry: %w", err)
	}
	return e, nil
}

// List returns up to limit entries of tenant matching f, newest dead
// first, after the cursor.
func (s *Store) List(ctx context.Context, tenant string, f Filter, after *Cursor, limit int) ([]Entry, error) {
	q := newQuery(tenant, f)
	return s.list(ctx, q, after, limit)
}

// Redrivable returns the first limit entries a bulk re-drive with f would
// take, in listing order.
func (s *Store) Redrivable(ctx context.Context, tenant string, f Filter, limit int) ([]Entry, error) {
	return s.list(ctx, newQuery(tenant, f).redrivable(), nil, limit)
}

func (s *Store) list(ctx context.Context, q *query, after *Cursor, limit int) ([]Entry, error) {
	if after != nil {
		q.Conds = append(q.Conds, "(e.dead_at, e.job_id) < ("+q.Arg(after.DeadAt)+"::timestamptz, "+q.Arg(after.JobID)+"::text)")
	}
	sql := `SELECT ` + entryColumns + entryFrom + ` WHERE ` + q.SQL() + ` ORDER BY e.dead_at DESC, e.job_id DESC LIMIT ` + q.Arg(limit)
	rows, err := s.pool.Query(ctx, sql, q.Args...)
	if err != nil {
		return nil, fmt.Errorf("store: list entries: %w", err)
	}
	out, err := pgx.CollectRows(rows, scanEntry)
	if err != nil {
		return nil, fmt.Errorf("store: list entries: %w", err)
	}
	return out, nil
}

// Clock reads Postgres's clock (clock_timestamp, the clock projected_at is
// written with), to bound a bulk re-drive to the entries listed before it.
func (s *Store) Clock(ctx context.Context) (time.Time, error) {
	var now time.Time
	if err := s.pool.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&now); err != nil {
		return now, fmt.Errorf("store: clock: %w", err)
	}
	return now, nil
}

// CountRedrivable counts the entries a bulk re-drive with f would take of
// those listed by asOf (zero: all).
func (s *Store) CountRedrivable(ctx context.Context, tenant string, f Filter, asOf time.Time) (int, error) {
	q := newQuery(tenant, f).redrivable().listedBy(asOf)
	var n int
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM dlq_entries e WHERE `+q.SQL(), q.Args...).Scan(&n); err != nil {
		return 0, fmt.Errorf("store: count entries: %w", err)
	}
	return n, nil
}

// ---- re-drive claims ----

// Claim is a re-drive a caller now owns: it must produce the enqueued event
// for JobID and then call MarkDone or Release.
type Claim struct {
	DeadJobID string
	JobID     string
	Spec      schema.JobSpec
	// Entry is the dead job's entry (bulk claims only).
	Entry Entry
}

// ClaimOne claims the re-drive of entry deadID for actor with spec,
// reserving newID as the new job's id unless an earlier released attempt
// reserved one already. It claims nothing (ok false) when the entry does
// not exist, was re-driven, or is being re-driven by a claim younger than
// staleBefore.
func (s *Store) ClaimOne(ctx context.Context, tenant, deadID, newID, actor string, spec schema.JobSpec, now, staleBefore time.Time) (jobID string, ok bool, err error) {
	js, err := json.Marshal(spec)
	if err != nil {
		return "", false, err
	}
	err = s.pool.QueryRow(ctx, `
		INSERT INTO dlq_redrives (tenant_id, dead_job_id, job_id, state, actor, spec, claimed_at)
		SELECT e.tenant_id, e.job_id, $3, 'pending', $4, $5::json, $6
		FROM dlq_entries e WHERE e.tenant_id = $1 AND e.job_id = $2
		ON CONFLICT (tenant_id, dead_job_id) DO UPDATE SET
			state = 'pending', actor = EXCLUDED.actor, spec = EXCLUDED.spec, claimed_at = EXCLUDED.claimed_at
		WHERE dlq_redrives.state = 'released' OR (dlq_redrives.state = 'pending' AND dlq_redrives.claimed_at < $7)
		RETURNING job_id`, tenant, deadID, newID, actor, string(js), now, staleBefore).Scan(&jobID)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("store: claim re-drive: %w", err)
	}
	return jobID, true, nil
}

// SpecFunc gives the submission a bulk re-drive runs for an entry.
type SpecFunc func(Entry) schema.JobSpec

// ClaimBatch claims the re-drives of up to limit entries of tenant matching
// f that a bulk re-drive takes (oldest dead first) among those listed by
// asOf (see Clock), reserving a new job id from newID for each. Entries
// another caller is claiming are skipped. asOf keeps a bulk re-drive from
// taking the entries its own re-driven jobs make when they die again.
func (s *Store) ClaimBatch(ctx context.Context, tenant string, f Filter, asOf time.Time, limit int, actor string, now time.Time,
	newID func() string, specOf SpecFunc) ([]Claim, error) {
	var claims []Claim
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		q := newQuery(tenant, f).redrivable().listedBy(asOf)
		rows, err := tx.Query(ctx, `SELECT `+entryColumns+entryFrom+` WHERE `+q.SQL()+
			` ORDER BY e.dead_at, e.job_id LIMIT `+q.Arg(limit)+` FOR UPDATE OF e SKIP LOCKED`, q.Args...)
		if err != nil {
			return err
		}
		cands, err := pgx.CollectRows(rows, scanEntry)
		if err != nil {
			return err
		}
		if len(cands) == 0 {
			return nil
		}
		byID := make(map[string]Claim, len(cands))
		deads, jobs, specs := mk(len(cands)), mk(len(cands)), mk(len(cands))
		for _, e := range cands {
			c := Claim{DeadJobID: e.JobID, JobID: newID(), Spec: specOf(e), Entry: e}
			js, err := json.Marshal(c.Spec)
			if err != nil {
				return err
			}
			byID[e.JobID] = c
			deads, jobs, specs = append(deads, c.DeadJobID), append(jobs, c.JobID), append(specs, string(js))
		}
		rows, err = tx.Query(ctx, `
			INSERT INTO dlq_redrives (tenant_id, dead_job_id, job_id, state, actor, spec, claimed_at)
			SELECT $1, x.d, x.j, 'pending', $2, x.s::json, $3
			FROM unnest($4::text[], $5::text[], $6::text[]) AS x(d, j, s)
			ON CONFLICT (tenant_id, dead_job_id) DO UPDATE SET
				state = 'pending', actor = EXCLUDED.actor, spec = EXCLUDED.spec, claimed_at = EXCLUDED.claimed_at
			WHERE dlq_redrives.state = 'released'
			RETURNING dead_job_id, job_id`, tenant, actor, now, deads, jobs, specs)
		if err != nil {
			return err
		}
		var dead, job string
		_, err = pgx.ForEachRow(rows, []any{&dead, &job}, func() error {
			c := byID[dead]
			c.JobID = job // a released earlier attempt keeps its reserved id
			claims = append(claims, c)
			return nil
		})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("store: claim re-drives: %w", err)
	}
	return claims, nil
}

// MarkDone records the claimed re-drives of tenant (dead job id → new job
// id) as produced at at.
func (s *Store) MarkDone(ctx context.Context, tenant string, claims []Claim, at time.Time) error {
	return s.finish(ctx, tenant, claims, `UPDATE dlq_redrives r SET state = 'done', claimed_at = NULL,
		redriven_at = COALESCE(r.redriven_at, $4)
		FROM unnest($2::text[], $3::text[]) AS x(d, j)
		WHERE r.tenant_id = $1 AND r.dead_job_id = x.d AND r.job_id = x.j AND r.state IN ('pending', 'released')`, at)
}

// Release gives back claims whose enqueued event could not be produced.
// The reserved job ids are kept, so a retry cannot create a second job
// even if the failed produce did reach Kafka.
func (s *Store) Release(ctx context.Context, tenant string, claims []Claim) error {
	return s.finish(ctx, tenant, claims, `UPDATE dlq_redrives r SET state = 'released', claimed_at = NULL
		FROM unnest($2::text[], $3::text[]) AS x(d, j)
		WHERE r.tenant_id = $1 AND r.dead_job_id = x.d AND r.job_id = x.j AND r.state = 'pending'`)
}

func (s *Store) finish(ctx context.Context, tenant string, claims []Claim, sql string, extra ...any) error {
	if len(claims) == 0 {
		return nil
	}
	deads, jobs := mk(len(claims)), mk(len(claims))
	for _, c := range claims {
		deads, jobs = append(deads, c.DeadJobID), append(jobs, c.JobID)
	}
	if _, err := s.pool.Exec(ctx, sql, append([]any{tenant, deads, jobs}, extra...)...); err != nil {
		return fmt.Errorf("store: finish re-drives: %w", err)
	}
	return nil
}

// ---- suppress, purge, retention ----

// Suppress marks (or, with on false, unmarks) the entry as suppressed:
// kept, but never taken by a bulk re-drive.
func (s *Store) Suppress(ctx context.Context, tenant, id, actor string, on bool, now time.Time) error {
	var tag interface{ RowsAffected() int64 }
	var err error
	if on {
		tag, err = s.pool.Exec(ctx, `UPDATE dlq_entries SET suppressed_at = COALESCE(suppressed_at, $3),
			suppressed_by = CASE WHEN suppressed_at IS NULL THEN $4 ELSE suppressed_by END
			WHERE tenant_id = $1 AND job_id = $2`, tenant, id, now, actor)
	} else {
		tag, err = s.pool.Exec(ctx, `UPDATE dlq_entries SET suppressed_at = NULL, suppressed_by = ''
			WHERE tenant_id = $1 AND job_id = $2`, tenant, id)
	}
	if err != nil {
		return fmt.Errorf("store: suppress: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return ErrNotFound
	}
	return nil
}

// Purge deletes the entry and its re-drive record, leaving a tombstone so a
// late duplicate of its dlq event does not bring it back.
func (s *Store) Purge(ctx context.Context, tenant, id string, now time.Time) error {
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `DELETE FROM dlq_entries WHERE tenant_id = $1 AND job_id = $2`, tenant, id)
		if err != nil {
			return fmt.Errorf("store: purge: %w", err)
		}
		if tag.RowsAffected() == 0 {
			return ErrNotFound
		}
		if _, err := tx.Exec(ctx, `DELETE FROM dlq_redrives WHERE tenant_id = $1 AND dead_job_id = $2`, tenant, id); err != nil {
			return fmt.Errorf("store: purge: %w", err)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO dlq_purged (tenant_id, job_id, purged_at) VALUES ($1, $2, $3)
			ON CONFLICT (tenant_id, job_id) DO UPDATE SET purged_at = EXCLUDED.purged_at`, tenant, id, now); err != nil {
			return fmt.Errorf("store: purge: %w", err)
		}
		return nil
	})
}

// Expire deletes, in chunks of chunk rows, entries dead before cutoff with
// their re-drive records, and tombstones older than cutoff. It returns how
// many entries it deleted.
func (s *Store) Expire(ctx context.Context, cutoff time.Time, chunk int) (int64, error) {
	var total int64
	for {
		var n int64
		err := s.pool.QueryRow(ctx, `
			WITH gone AS (
				DELETE FROM dlq_entries WHERE ctid IN (SELECT ctid FROM dlq_entries WHERE dead_at < $1 LIMIT $2)
				RETURNING tenant_id, job_id
			), redrives AS (
				DELETE FROM dlq_redrives r USING gone WHERE r.tenant_id = gone.tenant_id AND r.dead_job_id = gone.job_id
			)
			SELECT count(*) FROM gone`, cutoff, chunk).Scan(&n)
		if err != nil {
			return total, fmt.Errorf("store: expire entries: %w", err)
		}
		total += n
		if n < int64(chunk) {
			break
		}
	}
	if _, err := s.pool.Exec(ctx, `DELETE FROM dlq_purged WHERE purged_at < $1`, cutoff); err != nil {
		return total, fmt.Errorf("store: expire tombstones: %w", err)
	}
	// Re-drives confirmed from the log for entries already gone.
	if _, err := s.pool.Exec(ctx, `DELETE FROM dlq_redrives r WHERE COALESCE(r.redriven_at, r.claimed_at) < $1
		AND NOT EXISTS (SELECT 1 FROM dlq_entries e WHERE e.tenant_id = r.tenant_id AND e.job_id = r.dead_job_id)`, cutoff); err != nil {
		return total, fmt.Errorf("store: expire re-drives: %w", err)
	}
	return total, nil
}
