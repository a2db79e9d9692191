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

// Channel is the LISTEN/NOTIFY channel the projection notifies after
// committing new rows.
const Channel = "ferry_sse_log"

// writerLock is the advisory lock key that serialises writers of the log.
const writerLock = 0x5e5e_1065

// Migrate creates the log's tables.
func Migrate(ctx context.Context, pool *pgxpool.Pool) error {
	return pgstore.MigrateEmbedded(ctx, pool, "sse-bridge", migrations, "migrations")
}

// Log reads and writes the event log.
type Log struct {
	pool *pgxpool.Pool
	log  *slog.Logger
}

// New returns the log over pool.
func New(pool *pgxpool.Pool, log *slog.Logger) *Log { return &Log{pool: pool, log: log} }

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

type decoded struct {
	meta schema.Meta
	data schema.Lifecycle
	wire []byte
}

// Apply is the projection.ApplyFunc of the log: it appends the batch's
// lifecycle events, skipping duplicates (by ce_id), events of a job after
// its terminal event and events whose tenant disagrees with the job's, and
// notifies tailers on commit. Within a batch, events are ordered by event
// time and then lifecycle rank, which undoes most cross-topic reordering.
func (l *Log) Apply(ctx context.Context, tx pgx.Tx, recs []*kgo.Record) error {
	evs := make([]decoded, 0, len(recs))
	seen := make(map[string]bool, len(recs))
	for _, r := range recs {
		e, err := schema.Decode(r)
		if err != nil {
			l.log.Warn("sse-bridge: skipping undecodable record", "topic", r.Topic, "offset", r.Offset, "err", err)
			continue
		}
		lc, ok := e.Data.(schema.Lifecycle)
		if !ok || seen[e.ID] {
			continue
		}
		seen[e.ID] = true
		ref := lc.Ref()
		// Marshal compacts a RawMessage itself (Decode accepted it as JSON).
		wire, err := json.Marshal(wireEvent{ID: e.ID, Type: string(lc.EventType()), Time: e.Time.UTC(),
			JobID: ref.JobID, TenantID: ref.TenantID, Attempt: ref.Attempt, Data: r.Value})
		if err != nil {
			return err
		}
		evs = append(evs, decoded{meta: e.Meta, data: lc, wire: wire})
	}
	if len(evs) == 0 {
		return nil
	}
	slices.SortStableFunc(evs, func(a, b decoded) int {
		if c := a.meta.Time.Compare(b.meta.Time); c != 0 {
			return c
		}
		pa := schema.PositionOf(a.data.EventType(), a.data.Ref().Attempt)
		pb := schema.PositionOf(b.data.EventType(), b.data.Ref().Attempt)
		return cmp.Or(cmp.Compare(pa.Attempt, pb.Attempt), cmp.Compare(pa.Phase, pb.Phase))
	})

	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(writerLock)); err != nil {
		return fmt.Errorf("eventlog: lock: %w", err)
	}
	jobs, err := loadJobs(ctx, tx, evs)
	if err != nil {
		return err
	}
	var keep []decoded
	for _, e := range evs {
		ref := e.data.Ref()
		j := jobs[ref.JobID]
		if j == nil {
			// Not logged yet: the row is inserted.
			j = &jobRow{tenant: ref.TenantID, dirty: true}
			jobs[ref.JobID] = j
		}
		if j.tenant != ref.TenantID {
			l.log.Warn("sse-bridge: dropping event whose tenant disagrees with its job", "job_id", ref.JobID, "ce_id", e.meta.ID)
			continue
		}
		// An event of a known job rewrites its row only when it changes
		// something (attributes, terminal_seq below) or when last_at, which
		// retention reads, is older than lastAtRefresh.
		if j.stale {
			j.dirty = true
		}
		if enq, ok := e.data.(schema.Enqueued); ok && j.queue == "" {
			j.queue, j.jobType, j.tags = enq.Job.Queue, enq.Job.Type, enq.Job.Tags
			j.dirty = true
		}
		if j.terminal || j.terminalSeq != nil {
			continue
		}
		j.terminal = hub.IsTerminal(e.data.EventType())
		keep = append(keep, e)
	}
	if len(keep) > 0 {
		if err := insertEvents(ctx, tx, keep, jobs); err != nil {
			return err
		}
	}
	if err := upsertJobs(ctx, tx, jobs); err != nil {
		return err
	}
	if len(keep) > 0 {
		if _, err := tx.Exec(ctx, `SELECT pg_notify($1, '')`, Channel); err != nil {
			return fmt.Errorf("eventlog: notify: %w", err)
		}
	}
	return nil
}

type jobRow struct {
	tenant, queue, jobType string
	tags                   []string
	terminalSeq            *int64
	terminal               bool // a terminal event is in this batch
	stale                  bool // last_at is older than lastAtRefresh
	dirty                  bool // the row must be written
}

// lastAtRefresh bounds how stale an sse_jobs row's last_at may get while
// its job still has events: rows are rewritten only when an event changes
// them (a new job, its enqueued attributes, its terminal seq) or last_at is
// older than this, so retention (FERRY_SSE_RETENTION, at least 1m) deletes
// a job's row at most this much earlier than "retention after its last
// event", and a started event costs no write.
const lastAtRefresh = "10 seconds"

func loadJobs(ctx context.Context, tx pgx.Tx, evs []decoded) (map[string]*jobRow, error) {
	ids := make([]string, 0, len(evs))
	for _, e := range evs {
		ids = append(ids, e.data.Ref().JobID)
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

func insertEvents(ctx context.Context, tx pgx.Tx, evs []decoded, jobs map[string]*jobRow) error {
	n := len(evs)
	ids, tenants, jobIDs, types, datas := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	times := make([]time.Time, n)
	for i, e := range evs {
		ref := e.data.Ref()
		ids[i], tenants[i], jobIDs[i], types[i], datas[i], times[i] = e.meta.ID, ref.TenantID, ref.JobID, string(e.data.EventType()), string(e.wire), e.meta.Time
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

// Querier is what the log's reads need: a pool or a connection.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// After returns up to limit events of the whole log with seq > after, in
// order.
func After(ctx context.Context, q Querier, after int64, limit int) ([]*hub.Event, error) {
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
