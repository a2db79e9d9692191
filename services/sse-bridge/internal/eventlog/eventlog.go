// Package eventlog is the sse-bridge's Postgres event log: the projection
// that writes it, the tailer that feeds the hub, the replay queries behind
// Last-Event-ID, and retention.
package eventlog

import (
	"cmp"
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferryhq/ferry/events/schema"
	"github.com/ferryhq/ferry/platform/pgstore"
	"github.com/ferryhq/ferry/services/sse-bridge/internal/hub"
)

//go:embed migrations/*.sql
var migrations embed.FS

// Migrations are the sse-bridge schema migrations; `ferry migrate` applies them.
var Migrations = pgstore.Register("sse-bridge", migrations, "migrations")

// Channel is the LISTEN/NOTIFY channel the projection notifies after
// committing new rows.
const Channel = "ferry_sse_log"

// writerLock is the advisory lock key that serialises writers of the log.
const writerLock = 0x5e5e_1065

// Migrate creates the log's tables.
func Migrate(ctx context.Context, pool *pgxpool.Pool) error {
	return Migrations.Apply(ctx, pool)
}

// Log reads and writes the event log.
type Log struct {
	pool *pgxpool.Pool
	log  *slog.Logger
	hold time.Duration
}

// New returns the log over pool. hold is the longest an event waits for
// its predecessor (see Apply); 0 logs every event at once, in arrival order.
func New(pool *pgxpool.Pool, log *slog.Logger, hold time.Duration) *Log {
	return &Log{pool: pool, log: log, hold: hold}
}

// wireEvent is the JSON of an SSE data line.
type wireEvent struct {
	ID       string          `json:"id"`
	Type     string          `json:"type"`
	Time     time.Time       `json:"time"`
	JobID    string          `json:"job_id"`
	TenantID string          `json:"tenant_id"`
	Attempt  int             `json:"attempt"`
	Data     json.RawMessage `json:"data"`
}

// logEvent is one lifecycle event on its way into the log.
type logEvent struct {
	id, tenant, job string
	attempt         int
	typ             schema.EventType
	at              time.Time
	spec            *schema.JobSpec // enqueued only: the job's attributes
	wire            []byte
	// waitFor is the event type that must be logged first (awaits).
	waitFor schema.EventType
	// heldAt is when the event was first held (zero: never); expired: it
	// was held for the whole hold and is logged whether or not its
	// predecessor arrived.
	heldAt  *time.Time
	expired bool
}

// awaits returns the event type that must be in the log, for the same job
// (and, but for enqueued, the same attempt), before an event of type t: a
// job's events travel on different topics and may be consumed out of
// order, but a stream must show enqueued → started → completed. "" for
// events that wait for nothing. (A failed of class expired, reported
// without a start, waits for nothing either; see Apply.)
func awaits(t schema.EventType) schema.EventType {
	switch t {
	case schema.EventStarted:
		return schema.EventEnqueued
	case schema.EventProgress, schema.EventCompleted, schema.EventFailed:
		return schema.EventStarted
	}
	return ""
}

// Apply is the projection.ApplyFunc of the log: it appends the batch's
// lifecycle events, skipping duplicates (by ce_id), events of a job after
// its terminal event and events whose tenant disagrees with the job's, and
// notifies tailers on commit.
//
// Order: within a batch, events are ordered by event time and then
// lifecycle rank. Across batches (a job's events travel on different topics
// and partitions, consumed at different paces), an event whose predecessor
// (awaits) is not logged yet is held in sse_held, in the same transaction,
// until the predecessor is logged or the hold passes; then it is logged
// right after it. So a stream shows started before completed even when
// completed is consumed first, instead of dropping the late started.
func (l *Log) Apply(ctx context.Context, tx pgx.Tx, recs []*kgo.Record) error {
	evs := make([]logEvent, 0, len(recs))
	for _, r := range recs {
		e, err := schema.Decode(r)
		if err != nil {
			l.log.Warn("sse-bridge: skipping undecodable record", "topic", r.Topic, "offset", r.Offset, "err", err)
			continue
		}
		lc, ok := e.Data.(schema.Lifecycle)
		if !ok {
			continue
		}
		ref := lc.Ref()
		// Marshal compacts a RawMessage itself (Decode accepted it as JSON).
		wire, err := json.Marshal(wireEvent{ID: e.ID, Type: string(lc.EventType()), Time: e.Time.UTC(),
			JobID: ref.JobID, TenantID: ref.TenantID, Attempt: ref.Attempt, Data: r.Value})
		if err != nil {
			return err
		}
		ev := logEvent{id: e.ID, tenant: ref.TenantID, job: ref.JobID, attempt: ref.Attempt,
			typ: lc.EventType(), at: e.Time, wire: wire, waitFor: awaits(lc.EventType())}
		switch d := lc.(type) {
		case schema.Enqueued:
			ev.spec = &d.Job
		case schema.Failed:
			if d.Error.Class == schema.ClassExpired {
				ev.waitFor = "" // not_after passed before the worker started it
			}
		}
		evs = append(evs, ev)
	}
	if len(evs) == 0 {
		return nil
	}
	slices.SortStableFunc(evs, func(a, b logEvent) int {
		if c := a.at.Compare(b.at); c != 0 {
			return c
		}
		pa, pb := schema.PositionOf(a.typ, a.attempt), schema.PositionOf(b.typ, b.attempt)
		return cmp.Or(cmp.Compare(pa.Attempt, pb.Attempt), cmp.Compare(pa.Phase, pb.Phase))
	})
	return l.write(ctx, tx, evs)
}

// ReleaseHeld logs the held events whose hold has passed. Apply does it
// too; this covers the time no records arrive.
func (l *Log) ReleaseHeld(ctx context.Context) error {
	var due bool
	if err := l.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM sse_held WHERE held_at <= now() - $1::interval)`, l.hold).Scan(&due); err != nil || !due {
		return err // nothing due: no transaction, no writer lock
	}
	return pgx.BeginFunc(ctx, l.pool, func(tx pgx.Tx) error { return l.write(ctx, tx, nil) })
}

// write logs evs (in order) and the held events they or the clock release.
func (l *Log) write(ctx context.Context, tx pgx.Tx, evs []logEvent) error {
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(writerLock)); err != nil {
		return fmt.Errorf("eventlog: lock: %w", err)
	}
	// Held events of the batch's jobs are looked at again after the batch's
	// own events, so one released by its predecessor follows it.
	held, err := takeHeld(ctx, tx, evs, l.hold)
	if err != nil {
		return err
	}
	evs = append(evs, held...)
	if len(evs) == 0 {
		return nil
	}
	a := &admission{hold: l.hold, log: l.log}
	if a.jobs, err = loadJobs(ctx, tx, evs); err != nil {
		return err
	}
	if a.started, err = loggedStarts(ctx, tx, evs); err != nil {
		return err
	}
	a.sort(evs)
	return a.store(ctx, tx)
}

// admission decides, for one write, which events are logged now (keep, in
// log order) and which wait for their predecessor (wait).
type admission struct {
	hold    time.Duration
	log     *slog.Logger
	jobs    map[string]*jobRow
	started map[startKey]bool
	keep    []logEvent
	wait    []logEvent
}

// sort admits or holds each event of evs once (by ce_id), in order.
func (a *admission) sort(evs []logEvent) {
	seen := make(map[string]bool, len(evs))
	for _, e := range evs {
		if seen[e.id] {
			continue
		}
		seen[e.id] = true
		j := a.job(e)
		if j == nil {
			continue
		}
		if a.ready(e, j) {
			a.admit(e)
		} else {
			a.wait = append(a.wait, e)
		}
	}
	// Events of a job that ended meanwhile are dropped, as when logged late.
	a.wait = slices.DeleteFunc(a.wait, func(w logEvent) bool { return a.jobs[w.job].ended() })
}

// job returns e's job row, creating it for a job not logged yet, and marks
// what e changes; nil when e's tenant disagrees with its job's.
func (a *admission) job(e logEvent) *jobRow {
	j := a.jobs[e.job]
	if j == nil {
		// Not logged yet: the row is inserted.
		j = &jobRow{tenant: e.tenant, dirty: true}
		a.jobs[e.job] = j
	}
	if j.tenant != e.tenant {
		a.log.Warn("sse-bridge: dropping event whose tenant disagrees with its job", "job_id", e.job, "ce_id", e.id)
		return nil
	}
	// An event of a known job rewrites its row only when it changes
	// something (attributes, terminal_seq below) or when last_at, which
	// retention reads, is older than lastAtRefresh.
	if j.stale {
		j.dirty = true
	}
	if e.spec != nil && j.queue == "" {
		j.queue, j.jobType, j.tags = e.spec.Queue, e.spec.Type, e.spec.Tags
		j.dirty = true
	}
	return j
}

// ready reports whether e may be logged: its predecessor is, or it waits
// for nothing, or it waited the whole hold.
func (a *admission) ready(e logEvent, j *jobRow) bool {
	if a.hold <= 0 || e.expired {
		return true
	}
	switch e.waitFor {
	case schema.EventEnqueued:
		return j.queue != ""
	case schema.EventStarted:
		return a.started[startKey{e.job, e.attempt}]
	}
	return true
}

// admit logs e, unless its job already ended, then the waiting events of
// its job that e released, right after it (each of those may release more).
func (a *admission) admit(e logEvent) {
	pending := []logEvent{e}
	for len(pending) > 0 {
		e, pending = pending[0], pending[1:]
		j := a.jobs[e.job]
		if j.ended() {
			continue
		}
		if e.typ == schema.EventStarted {
			a.started[startKey{e.job, e.attempt}] = true
		}
		j.terminal = hub.IsTerminal(e.typ)
		a.keep = append(a.keep, e)
		if w, ok := a.released(e.job, j); ok {
			pending = append([]logEvent{w}, pending...)
		}
	}
}

// released takes out of wait the first event of job that is now ready.
func (a *admission) released(job string, j *jobRow) (logEvent, bool) {
	i := slices.IndexFunc(a.wait, func(w logEvent) bool { return w.job == job && a.ready(w, j) })
	if i < 0 {
		return logEvent{}, false
	}
	w := a.wait[i]
	a.wait = slices.Delete(a.wait, i, i+1)
	return w, true
}

// store writes the admission: held events, logged events, job rows, and
// the notification tailers wait for.
func (a *admission) store(ctx context.Context, tx pgx.Tx) error {
	if err := hold(ctx, tx, a.wait); err != nil {
		return err
	}
	if len(a.keep) > 0 {
		if err := insertEvents(ctx, tx, a.keep, a.jobs); err != nil {
			return err
		}
	}
	if err := upsertJobs(ctx, tx, a.jobs); err != nil {
		return err
	}
	if len(a.keep) > 0 {
		if _, err := tx.Exec(ctx, `SELECT pg_notify($1, '')`, Channel); err != nil {
			return fmt.Errorf("eventlog: notify: %w", err)
		}
	}
	return nil
}

// takeHeld removes from sse_held, and returns in the order they were held,
// the events of evs' jobs and those held for longer than hold (marked
// expired). write holds again those still waiting.
func takeHeld(ctx context.Context, tx pgx.Tx, evs []logEvent, hold time.Duration) ([]logEvent, error) {
	jobIDs := make([]string, 0, len(evs))
	for _, e := range evs {
		jobIDs = append(jobIDs, e.job)
	}
	rows, err := tx.Query(ctx, `
		WITH d AS (
			DELETE FROM sse_held WHERE job_id = ANY($1) OR held_at <= now() - $2::interval
			RETURNING n, ce_id, tenant, job_id, attempt, event, data::text, occurred_at, held_at, held_at <= now() - $2::interval AS expired)
		SELECT ce_id, tenant, job_id, attempt, event, data, occurred_at, held_at, expired FROM d ORDER BY n`, jobIDs, hold)
	if err != nil {
		return nil, fmt.Errorf("eventlog: take held events: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (logEvent, error) {
		var e logEvent
		var typ, wire string
		err := r.Scan(&e.id, &e.tenant, &e.job, &e.attempt, &typ, &wire, &e.at, &e.heldAt, &e.expired)
		e.typ, e.wire = schema.EventType(typ), []byte(wire)
		e.waitFor = awaits(e.typ) // only events that wait are held
		return e, err
	})
}

// hold stores events that wait for their predecessor. An event held again
// keeps its first held_at, so the hold bounds its total wait.
func hold(ctx context.Context, tx pgx.Tx, evs []logEvent) error {
	if len(evs) == 0 {
		return nil
	}
	n := len(evs)
	ids, tenants, jobIDs, types, datas := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	attempts, times, heldAt := make([]int32, n), make([]time.Time, n), make([]*time.Time, n)
	for i, e := range evs {
		ids[i], tenants[i], jobIDs[i], types[i], datas[i] = e.id, e.tenant, e.job, string(e.typ), string(e.wire)
		attempts[i], times[i], heldAt[i] = int32(e.attempt), e.at, e.heldAt
	}
	_, err := tx.Exec(ctx, `
		INSERT INTO sse_held (ce_id, tenant, job_id, attempt, event, data, occurred_at, held_at)
		SELECT c, t, j, a, e, d::json, o, COALESCE(h, now())
		FROM unnest($1::text[], $2::text[], $3::text[], $4::int[], $5::text[], $6::text[], $7::timestamptz[], $8::timestamptz[])
			WITH ORDINALITY AS x(c, t, j, a, e, d, o, h, n)
		ORDER BY n
		ON CONFLICT (ce_id) DO NOTHING`, ids, tenants, jobIDs, attempts, types, datas, times, heldAt)
	if err != nil {
		return fmt.Errorf("eventlog: hold events: %w", err)
	}
	return nil
}

type startKey struct {
	job     string
	attempt int
}

// loggedStarts returns which (job, attempt) of the events waiting for a
// started event already have it in the log. Those whose started is in evs
// are not looked up: write sees it first.
func loggedStarts(ctx context.Context, tx pgx.Tx, evs []logEvent) (map[startKey]bool, error) {
	inBatch := map[startKey]bool{}
	for _, e := range evs {
		if e.typ == schema.EventStarted {
			inBatch[startKey{e.job, e.attempt}] = true
		}
	}
	var ids []string
	for _, e := range evs {
		if e.waitFor == schema.EventStarted && !inBatch[startKey{e.job, e.attempt}] {
			ids = append(ids, e.job)
		}
	}
	out := map[startKey]bool{}
	if len(ids) == 0 {
		return out, nil
	}
	rows, err := tx.Query(ctx, `SELECT job_id, (data->>'attempt')::int FROM sse_events WHERE job_id = ANY($1) AND event = 'started'`, ids)
	if err != nil {
		return nil, fmt.Errorf("eventlog: load started events: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var k startKey
		if err := rows.Scan(&k.job, &k.attempt); err != nil {
			return nil, err
		}
		out[k] = true
	}
	return out, rows.Err()
}

type jobRow struct {
	tenant, queue, jobType string
	tags                   []string
	terminalSeq            *int64
	terminal               bool // a terminal event is in this batch
	stale                  bool // last_at is older than lastAtRefresh
	dirty                  bool // the row must be written
}

// ended reports whether the job's final event is logged (by this write or
// an earlier one): the log keeps nothing of a job after it.
func (j *jobRow) ended() bool { return j.terminal || j.terminalSeq != nil }

// lastAtRefresh bounds how stale an sse_jobs row's last_at may get while
// its job still has events: rows are rewritten only when an event changes
// them (a new job, its enqueued attributes, its terminal seq) or last_at is
// older than this, so retention (FERRY_SSE_RETENTION, at least 1m) deletes
// a job's row at most this much earlier than "retention after its last
// event", and a started event costs no write.
const lastAtRefresh = "10 seconds"

func loadJobs(ctx context.Context, tx pgx.Tx, evs []logEvent) (map[string]*jobRow, error) {
	ids := make([]string, 0, len(evs))
	for _, e := range evs {
		ids = append(ids, e.job)
	}
	slices.Sort(ids)
	ids = slices.Compact(ids)
	rows, err := tx.Query(ctx, `SELECT job_id, tenant, queue, job_type, tags, terminal_seq, last_at < now() - interval '`+lastAtRefresh+`'
		FROM sse_jobs WHERE job_id = ANY($1)`, ids)
	if err != nil {
		return nil, fmt.Errorf("eventlog: load jobs: %w", err)
	}
	defer rows.Close()
	out := make(map[string]*jobRow, len(ids))
	for rows.Next() {
		var id string
		j := &jobRow{}
		if err := rows.Scan(&id, &j.tenant, &j.queue, &j.jobType, &j.tags, &j.terminalSeq, &j.stale); err != nil {
			return nil, err
		}
		out[id] = j
	}
	return out, rows.Err()
}

func insertEvents(ctx context.Context, tx pgx.Tx, evs []logEvent, jobs map[string]*jobRow) error {
	n := len(evs)
	ids, tenants, jobIDs, types, datas := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	times := make([]time.Time, n)
	for i, e := range evs {
		ids[i], tenants[i], jobIDs[i], types[i], datas[i], times[i] = e.id, e.tenant, e.job, string(e.typ), string(e.wire), e.at
	}
	// ORDER BY n keeps seq in the batch's order; duplicates of events
	// logged by an earlier batch are dropped.
	rows, err := tx.Query(ctx, `
		INSERT INTO sse_events (ce_id, tenant, job_id, event, data, occurred_at)
		SELECT c, t, j, e, d::json, o
		FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::timestamptz[]) WITH ORDINALITY AS x(c, t, j, e, d, o, n)
		ORDER BY n
		ON CONFLICT (ce_id) DO NOTHING
		RETURNING seq, job_id, event`, ids, tenants, jobIDs, types, datas, times)
	if err != nil {
		return fmt.Errorf("eventlog: insert events: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var seq int64
		var job, et string
		if err := rows.Scan(&seq, &job, &et); err != nil {
			return err
		}
		if j := jobs[job]; j != nil && hub.IsTerminal(schema.EventType(et)) && j.terminalSeq == nil {
			j.terminalSeq = &seq
			j.dirty = true
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("eventlog: insert events: %w", err)
	}
	return nil
}

func upsertJobs(ctx context.Context, tx pgx.Tx, jobs map[string]*jobRow) error {
	var ids, tenants, queues, types, tags []string
	var terms []*int64
	for id, j := range jobs {
		if !j.dirty {
			continue
		}
		enc, _ := json.Marshal(j.tags)
		if j.tags == nil {
			enc = []byte("[]")
		}
		ids, tenants, queues, types = append(ids, id), append(tenants, j.tenant), append(queues, j.queue), append(types, j.jobType)
		tags, terms = append(tags, string(enc)), append(terms, j.terminalSeq)
	}
	if len(ids) == 0 {
		return nil
	}
	_, err := tx.Exec(ctx, `
		INSERT INTO sse_jobs (job_id, tenant, queue, job_type, tags, terminal_seq, last_at)
		SELECT i, t, q, ty, ARRAY(SELECT jsonb_array_elements_text(g::jsonb)), s, now()
		FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::bigint[]) AS x(i, t, q, ty, g, s)
		ON CONFLICT (job_id) DO UPDATE SET
			queue = EXCLUDED.queue, job_type = EXCLUDED.job_type, tags = EXCLUDED.tags,
			terminal_seq = COALESCE(sse_jobs.terminal_seq, EXCLUDED.terminal_seq), last_at = now()`,
		ids, tenants, queues, types, tags, terms)
	if err != nil {
		return fmt.Errorf("eventlog: upsert jobs: %w", err)
	}
	return nil
}

// selectEvents is the read of the log every reader shares: events joined
// with their job's attributes.
const selectEvents = `
	SELECT e.seq, e.tenant, e.job_id, e.event, e.data::text, COALESCE(j.queue, ''), COALESCE(j.job_type, ''), COALESCE(j.tags, '{}')
	FROM sse_events e LEFT JOIN sse_jobs j ON j.job_id = e.job_id `

func scanEvents(rows pgx.Rows) ([]*hub.Event, error) {
	defer rows.Close()
	var out []*hub.Event
	for rows.Next() {
		var e hub.Event
		var data string
		if err := rows.Scan(&e.Seq, &e.Tenant, &e.JobID, &e.Type, &data, &e.Queue, &e.JobType, &e.Tags); err != nil {
			return nil, err
		}
		e.Data = []byte(data)
		out = append(out, hub.NewEvent(e))
	}
	return out, rows.Err()
}

// After returns up to limit events of the whole log with seq > after, in
// order.
func After(ctx context.Context, q pgstore.Querier, after int64, limit int) ([]*hub.Event, error) {
	rows, err := q.Query(ctx, selectEvents+`WHERE e.seq > $1 ORDER BY e.seq LIMIT $2`, after, limit)
	if err != nil {
		return nil, fmt.Errorf("eventlog: tail: %w", err)
	}
	return scanEvents(rows)
}

// Replay returns up to limit events of tenant with seq > after, in order;
// only those of job jobID when it is not empty.
func (l *Log) Replay(ctx context.Context, tenant, jobID string, after int64, limit int) ([]*hub.Event, error) {
	var rows pgx.Rows
	var err error
	if jobID != "" {
		rows, err = l.pool.Query(ctx, selectEvents+`WHERE e.job_id = $1 AND e.tenant = $2 AND e.seq > $3 ORDER BY e.seq LIMIT $4`, jobID, tenant, after, limit)
	} else {
		rows, err = l.pool.Query(ctx, selectEvents+`WHERE e.tenant = $1 AND e.seq > $2 ORDER BY e.seq LIMIT $3`, tenant, after, limit)
	}
	if err != nil {
		return nil, fmt.Errorf("eventlog: replay: %w", err)
	}
	return scanEvents(rows)
}

// ErrJobNotFound is returned for a job the log does not know for a tenant.
var ErrJobNotFound = errors.New("eventlog: job not found")

// Job is what the log knows of one job.
type Job struct {
	// TerminalSeq is the seq of the job's final event; 0 while it runs.
	TerminalSeq int64
}

// Job returns tenant's job id, or ErrJobNotFound.
func (l *Log) Job(ctx context.Context, tenant, id string) (Job, error) {
	var term *int64
	err := l.pool.QueryRow(ctx, `SELECT terminal_seq FROM sse_jobs WHERE job_id = $1 AND tenant = $2`, id, tenant).Scan(&term)
	if errors.Is(err, pgx.ErrNoRows) {
		return Job{}, ErrJobNotFound
	}
	if err != nil {
		return Job{}, fmt.Errorf("eventlog: job: %w", err)
	}
	var j Job
	if term != nil {
		j.TerminalSeq = *term
	}
	return j, nil
}

// Bounds returns the highest seq retention deleted and the highest seq
// logged: positions outside [prunedThrough, head] cannot be resumed.
func (l *Log) Bounds(ctx context.Context) (prunedThrough, head int64, err error) {
	err = l.pool.QueryRow(ctx, `SELECT s.pruned_through, COALESCE((SELECT max(seq) FROM sse_events), 0) FROM sse_state s WHERE s.id = 1`).
		Scan(&prunedThrough, &head)
	if err != nil {
		return 0, 0, fmt.Errorf("eventlog: bounds: %w", err)
	}
	// seq is a sequence: after every row is pruned, max(seq) is gone too.
	return prunedThrough, max(head, prunedThrough), nil
}

// Head returns the highest seq logged so far.
func (l *Log) Head(ctx context.Context) (int64, error) {
	_, head, err := l.Bounds(ctx)
	return head, err
}

// Prune deletes events logged before cutoff, and jobs not heard of since,
// in chunks, recording the highest deleted seq. It returns the number of
// events deleted.
func (l *Log) Prune(ctx context.Context, cutoff time.Time) (int64, error) {
	const chunk = 5000
	var total int64
	for {
		var n int64
		err := pgx.BeginFunc(ctx, l.pool, func(tx pgx.Tx) error {
			var top *int64
			// logged_at grows with seq (writers are serialised), so the
			// oldest rows are the lowest seqs and the scan stops early.
			err := tx.QueryRow(ctx, `
				WITH d AS (
					DELETE FROM sse_events WHERE seq IN (
						SELECT seq FROM sse_events WHERE logged_at < $1 ORDER BY seq LIMIT $2)
					RETURNING seq)
				SELECT count(*), max(seq) FROM d`, cutoff, chunk).Scan(&n, &top)
			if err != nil || top == nil {
				return err
			}
			_, err = tx.Exec(ctx, `UPDATE sse_state SET pruned_through = GREATEST(pruned_through, $1) WHERE id = 1`, *top)
			return err
		})
		if err != nil {
			return total, fmt.Errorf("eventlog: prune: %w", err)
		}
		total += n
		if n < chunk {
			break
		}
	}
	if _, err := l.pool.Exec(ctx, `DELETE FROM sse_jobs WHERE last_at < $1`, cutoff); err != nil {
		return total, fmt.Errorf("eventlog: prune jobs: %w", err)
	}
	return total, nil
}
