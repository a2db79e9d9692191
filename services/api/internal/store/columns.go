package store

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/ferryhq/ferry/events/schema"
	"github.com/ferryhq/ferry/platform/pgstore"
)

// The jobs table's columns are listed once, in jobColumns: every SELECT
// list, the scan of a row, the INSERT and both UPDATEs of the projection
// are built from that table, so a column cannot be misplaced in one of
// them and a jsonb column is marked by its own entry, not by an index.
//
// sqlc was considered and not used: it generates one Go struct per query
// from the SQL, but the store's writes are batch statements over unnest
// arrays (one array per column) and its reads share one row type with the
// merge rules of internal/status. Generated code would repeat the ~40
// columns in each generated query and still need hand-written glue from
// status.Row to the arrays; a typed table in Go keeps one definition and
// no build step.

// columnGroup says when the projection writes a column.
type columnGroup int

const (
	// keyColumn: tenant_id and id, written on insert only.
	keyColumn columnGroup = iota
	// specColumn: the job's specification (from its enqueued event), written
	// on insert and rewritten only by an update that changes one of them.
	// A spec rarely changes after insert, and leaving it out of an update
	// keeps the payload (jsonb, possibly TOASTed) from being sent, parsed
	// and stored again with every status change.
	specColumn
	// stateColumn: where the job is, rewritten by every update. No index
	// covers a state column (migrations_hot), so such updates can be HOT.
	stateColumn
)

// column is one column of the jobs table.
type column struct {
	name  string
	group columnGroup
	// param is the element type of the column's array parameter in a
	// batch write (unnest($n::<param>[])).
	param string
	// expr turns the parameter's value (x.<name>) into the stored value;
	// "" stores it as it is.
	expr string
	// values collects the column's value of each job written.
	values func(n int) columnValues
	// put writes the column's value of one job into a COPY of new rows,
	// where it goes as it is stored (no expr).
	put func(w *pgstore.CopyWriter, j *Job)
	// dest is where a read row's value is scanned.
	dest func(r *scannedRow) any
}

// columnValues is one column's array parameter of a batch write.
type columnValues interface {
	add(j *Job)
	array() any
}

type typedValues[T any] struct {
	get  func(*Job) T
	vals []T
}

func (v *typedValues[T]) add(j *Job) { v.vals = append(v.vals, v.get(j)) }
func (v *typedValues[T]) array() any { return v.vals }

// col declares a column whose written value get returns.
func col[T any](name string, g columnGroup, param string, get func(*Job) T, dest func(*scannedRow) any) column {
	return column{
		name: name, group: g, param: param, dest: dest,
		values: func(n int) columnValues { return &typedValues[T]{get: get, vals: make([]T, 0, n)} },
		put:    copyPut(param, get),
	}
}

// copyPut is how a column whose value get returns goes into a COPY,
// chosen once by the value's Go type (and, for JSON, the column's type).
// A type without a case panics when the table is declared, at start-up.
func copyPut[T any](param string, get func(*Job) T) func(*pgstore.CopyWriter, *Job) {
	switch g := any(get).(type) {
	case func(*Job) string:
		return func(w *pgstore.CopyWriter, j *Job) { w.Text(g(j)) }
	case func(*Job) int:
		return func(w *pgstore.CopyWriter, j *Job) { w.Int4(g(j)) }
	case func(*Job) int64:
		return func(w *pgstore.CopyWriter, j *Job) { w.Int8(g(j)) }
	case func(*Job) bool:
		return func(w *pgstore.CopyWriter, j *Job) { w.Bool(g(j)) }
	case func(*Job) time.Time:
		return func(w *pgstore.CopyWriter, j *Job) { w.Timestamptz(g(j)) }
	case func(*Job) *time.Time:
		return func(w *pgstore.CopyWriter, j *Job) { w.NullTimestamptz(g(j)) }
	case func(*Job) *float64:
		return func(w *pgstore.CopyWriter, j *Job) { w.NullFloat8(g(j)) }
	case func(*Job) pgtype.Text:
		return func(w *pgstore.CopyWriter, j *Job) {
			if v := g(j); v.Valid {
				w.Text(v.String)
			} else {
				w.Null()
			}
		}
	case func(*Job) json.RawMessage:
		if param == "jsonb" {
			return func(w *pgstore.CopyWriter, j *Job) { w.JSONB(g(j)) }
		}
		return func(w *pgstore.CopyWriter, j *Job) { w.Bytes(g(j)) }
	}
	panic(fmt.Sprintf("store: no COPY encoding for a column of %s read by %T", param, get))
}

// jsonbCol is a jsonb column, sent in jsonb's binary format (the JSON
// text as it is, no copy into a Go string); an empty value is NULL.
func jsonbCol(name string, g columnGroup, get func(*Job) json.RawMessage, dest func(*scannedRow) any) column {
	return col(name, g, "jsonb", func(j *Job) json.RawMessage { return nullJSON(get(j)) }, dest)
}

// scannedRow is a read row before it becomes a Job: the columns that are
// stored in another shape than status.Row keeps them.
type scannedRow struct {
	Job
	status           string // derived from the position; stored for queries
	attempt          int    // likewise
	phase            int
	idemKey, uniqKey *string
	payload, result  []byte
}

// jobColumns is the jobs table, in the order of every statement built
// from it.
var jobColumns = []column{
	col("tenant_id", keyColumn, "text", func(j *Job) string { return j.TenantID }, func(r *scannedRow) any { return &r.TenantID }),
	col("id", keyColumn, "text", func(j *Job) string { return j.ID }, func(r *scannedRow) any { return &r.ID }),
	col("type", specColumn, "text", func(j *Job) string { return j.Type }, func(r *scannedRow) any { return &r.Type }),
	col("queue", specColumn, "text", func(j *Job) string { return j.Queue }, func(r *scannedRow) any { return &r.Queue }),
	col("priority", specColumn, "int", func(j *Job) int { return j.Priority }, func(r *scannedRow) any { return &r.Priority }),
	col("pool", specColumn, "text", func(j *Job) string { return j.Pool }, func(r *scannedRow) any { return &r.Pool }),
	col("status", stateColumn, "text", func(j *Job) string { return string(j.Status()) }, func(r *scannedRow) any { return &r.status }),
	col("attempt", stateColumn, "int", func(j *Job) int { return j.Pos.Attempt }, func(r *scannedRow) any { return &r.attempt }),
	col("max_attempts", specColumn, "int", func(j *Job) int { return j.MaxAttempts }, func(r *scannedRow) any { return &r.MaxAttempts }),
	jsonbCol("payload", specColumn, func(j *Job) json.RawMessage { return j.Payload }, func(r *scannedRow) any { return &r.payload }),
	tagsColumn,
	col("created_at", specColumn, "timestamptz", createdAt, func(r *scannedRow) any { return &r.CreatedAt }),
	col("scheduled_for", stateColumn, "timestamptz", func(j *Job) *time.Time { return j.ScheduledFor }, func(r *scannedRow) any { return &r.ScheduledFor }),
	col("started_at", stateColumn, "timestamptz", func(j *Job) *time.Time { return j.StartedAt }, func(r *scannedRow) any { return &r.StartedAt }),
	col("finished_at", stateColumn, "timestamptz", func(j *Job) *time.Time { return j.FinishedAt }, func(r *scannedRow) any { return &r.FinishedAt }),
	col("worker_id", stateColumn, "text", func(j *Job) string { return j.WorkerID }, func(r *scannedRow) any { return &r.WorkerID }),
	col("progress_percent", stateColumn, "float8", func(j *Job) *float64 { return j.ProgressPercent }, func(r *scannedRow) any { return &r.ProgressPercent }),
	col("progress_message", stateColumn, "text", func(j *Job) string { return j.ProgressMessage }, func(r *scannedRow) any { return &r.ProgressMessage }),
	col("progress_at", stateColumn, "timestamptz", func(j *Job) *time.Time { return j.ProgressAt }, func(r *scannedRow) any { return &r.ProgressAt }),
	jsonbCol("result", stateColumn, func(j *Job) json.RawMessage { return j.Result }, func(r *scannedRow) any { return &r.result }),
	col("last_error_class", stateColumn, "text", func(j *Job) string { return j.LastErrorClass }, func(r *scannedRow) any { return &r.LastErrorClass }),
	col("last_error_message", stateColumn, "text", func(j *Job) string { return j.LastErrorMessage }, func(r *scannedRow) any { return &r.LastErrorMessage }),
	col("trace_id", specColumn, "text", func(j *Job) string { return j.TraceID }, func(r *scannedRow) any { return &r.TraceID }),
	col("redriven_from", specColumn, "text", func(j *Job) string { return j.RedrivenFrom }, func(r *scannedRow) any { return &r.RedrivenFrom }),
	col("idempotency_key", specColumn, "text", func(j *Job) pgtype.Text { return nonEmpty(j.IdempotencyKey) }, func(r *scannedRow) any { return &r.idemKey }),
	col("request_hash", specColumn, "text", func(j *Job) string { return j.RequestHash }, func(r *scannedRow) any { return &r.RequestHash }),
	col("schedule_id", specColumn, "text", func(j *Job) string { return j.ScheduleID }, func(r *scannedRow) any { return &r.ScheduleID }),
	col("pos_attempt", stateColumn, "int", func(j *Job) int { return j.Pos.Attempt }, func(r *scannedRow) any { return &r.Pos.Attempt }),
	col("pos_phase", stateColumn, "int", func(j *Job) int { return int(j.Pos.Phase) }, func(r *scannedRow) any { return &r.phase }),
	col("spec_attempt", specColumn, "int", func(j *Job) int { return j.SpecAttempt }, func(r *scannedRow) any { return &r.SpecAttempt }),
	col("enq_attempt", stateColumn, "int", func(j *Job) int { return j.EnqAttempt }, func(r *scannedRow) any { return &r.EnqAttempt }),
	col("delayed", stateColumn, "bool", func(j *Job) bool { return j.Delayed }, func(r *scannedRow) any { return &r.Delayed }),
	col("run_attempt", stateColumn, "int", func(j *Job) int { return j.RunAttempt }, func(r *scannedRow) any { return &r.RunAttempt }),
	col("progress_attempt", stateColumn, "int", func(j *Job) int { return j.ProgressAttempt }, func(r *scannedRow) any { return &r.ProgressAttempt }),
	col("error_rank", stateColumn, "int", func(j *Job) int { return j.ErrorRank }, func(r *scannedRow) any { return &r.ErrorRank }),
	// A write stores the row's next version; a read returns the stored one.
	col("version", stateColumn, "bigint", func(j *Job) int64 { return j.Version + 1 }, func(r *scannedRow) any { return &r.Version }),
	col("unique_key", specColumn, "text", func(j *Job) pgtype.Text { return nonEmpty(j.UniqueKey) }, func(r *scannedRow) any { return &r.uniqKey }),
	col("unique_while", specColumn, "text", func(j *Job) string { return j.UniqueWhile }, func(r *scannedRow) any { return &r.UniqueWhile }),
	col("unique_until", specColumn, "timestamptz", func(j *Job) *time.Time { return j.UniqueUntil }, func(r *scannedRow) any { return &r.UniqueUntil }),
	col("concurrency_key", specColumn, "text", func(j *Job) string { return j.ConcurrencyKey }, func(r *scannedRow) any { return &r.ConcurrencyKey }),
	col("concurrency_limit", specColumn, "int", func(j *Job) int { return j.ConcurrencyLimit }, func(r *scannedRow) any { return &r.ConcurrencyLimit }),
}

// tagsColumn is written as a JSON array of strings: a batch write passes
// one array element per job, and Postgres arrays of arrays must be
// rectangular, so a text[] per job cannot be an element.
var tagsColumn = func() column {
	c := col("tags", specColumn, "text", tagsJSON, func(r *scannedRow) any { return &r.Tags })
	c.expr = "ARRAY(SELECT jsonb_array_elements_text(x.tags::jsonb))"
	c.put = func(w *pgstore.CopyWriter, j *Job) { w.TextArray(j.Tags) } // a COPY sends the text[] itself; NOT NULL: nil is {}
	return c
}()

func tagsJSON(j *Job) string {
	if len(j.Tags) == 0 {
		return "[]"
	}
	b, _ := json.Marshal(j.Tags) // []string always encodes
	return string(b)
}

// createdAt is the stored creation time; a row without one (no event
// carried a time) gets the time of its first write.
func createdAt(j *Job) time.Time {
	if j.CreatedAt.IsZero() {
		return time.Now().UTC()
	}
	return j.CreatedAt
}

// nonEmpty is s, or NULL when s is empty.
func nonEmpty(s string) pgtype.Text { return pgtype.Text{String: s, Valid: s != ""} }

// nullJSON is b, or nil (NULL) when b is empty.
func nullJSON(b json.RawMessage) json.RawMessage {
	if len(b) == 0 {
		return nil
	}
	return b
}

// job turns a scanned row into a Job: the stored shapes become
// status.Row's, times UTC.
func (r *scannedRow) job() Job {
	j := r.Job
	j.Pos.Phase = schema.Phase(r.phase)
	if r.idemKey != nil {
		j.IdempotencyKey = *r.idemKey
	}
	if r.uniqKey != nil {
		j.UniqueKey = *r.uniqKey
	}
	if len(r.payload) > 0 {
		j.Payload = r.payload
	}
	if len(r.result) > 0 {
		j.Result = r.result
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
	return j
}

func utc(t *time.Time) { *t = t.UTC() }

// scanJob scans a row of selectColumns.
func scanJob(row pgx.CollectableRow) (Job, error) { return scanJobWith(row) }

// scanJobWith scans a row of selectColumns followed by the columns of extra.
func scanJobWith(row pgx.CollectableRow, extra ...any) (Job, error) {
	return scanColumns(row, jobColumns, extra...)
}

// rowScanner scans rows of its columns into one reused scannedRow: a
// batch's read (selectJobs, the status projection's per-batch load) makes
// its scan destinations once, not once per row.
type rowScanner struct {
	r     scannedRow
	dests []any
}

func newRowScanner(cols []column) *rowScanner {
	s := &rowScanner{dests: make([]any, len(cols))}
	for i, c := range cols {
		s.dests[i] = c.dest(&s.r)
	}
	return s
}

// scan is a pgx.RowToFunc: the row as a Job (job copies what it keeps out
// of the reused scannedRow, which starts empty for every row).
func (s *rowScanner) scan(row pgx.CollectableRow) (Job, error) {
	s.r = scannedRow{}
	if err := row.Scan(s.dests...); err != nil {
		return Job{}, err
	}
	return s.r.job(), nil
}

// scanColumns scans a row of cols followed by the columns of extra; the
// columns not in cols keep their zero value.
func scanColumns(row pgx.CollectableRow, cols []column, extra ...any) (Job, error) {
	var r scannedRow
	dests := make([]any, len(cols), len(cols)+len(extra))
	for i, c := range cols {
		dests[i] = c.dest(&r)
	}
	if err := row.Scan(append(dests, extra...)...); err != nil {
		return Job{}, err
	}
	return r.job(), nil
}

// selectColumns is the SELECT list of a whole row, for scanJob.
var selectColumns = strings.Join(columnNames, ", ")

// foldColumns are what the projection reads of a job none of whose batch's
// events carries a specification (status.CarriesSpec), nearly every
// update: the key, the state, and the three specification columns such a
// fold consults (spec_attempt and created_at: status.Apply moves the
// creation time of a row without a specification; queue: the queue
// counters). The rest of the specification, the payload first, is neither
// read nor written for it (writeState); Postgres does not render a jsonb
// payload and the projection does not scan one for every status change.
var foldColumns = func() []column {
	var cols []column
	for _, c := range jobColumns {
		if c.group != specColumn || c.name == "spec_attempt" || c.name == "created_at" || c.name == "queue" {
			cols = append(cols, c)
		}
	}
	return cols
}()

// foldSelect is the SELECT list of foldColumns.
var foldSelect = func() string {
	names := make([]string, len(foldColumns))
	for i, c := range foldColumns {
		names[i] = c.name
	}
	return strings.Join(names, ", ")
}()

// batchWrite is a statement writing many rows: one array parameter per
// column (unnest), so the statement text is the same whatever the number
// of rows and is prepared once per connection.
type batchWrite struct {
	cols []column
	sql  string
}

// args returns the statement's parameters for jobs.
func (w batchWrite) args(jobs []*Job) []any {
	args := make([]any, len(w.cols))
	for i, c := range w.cols {
		v := c.values(len(jobs))
		for _, j := range jobs {
			v.add(j)
		}
		args[i] = v.array()
	}
	return args
}

// unnestFrom is the FROM item of the columns' array parameters, named x.
func unnestFrom(cols []column) string {
	params, names := make([]string, len(cols)), make([]string, len(cols))
	for i, c := range cols {
		params[i] = "$" + strconv.Itoa(i+1) + "::" + c.param + "[]"
		names[i] = c.name
	}
	return "unnest(" + strings.Join(params, ", ") + ") AS x(" + strings.Join(names, ", ") + ")"
}

func (c column) value() string {
	if c.expr != "" {
		return c.expr
	}
	return "x." + c.name
}

// upsertJobs returns the statement writing the columns of groups: an
// INSERT of every row with ON CONFLICT on the primary key updating the
// existing row (its non-key columns of groups) when it is at the version
// before the written one. Each row's conflict is found through the primary
// key, whatever the table's size, so the statement never turns into a
// scan of the table (an UPDATE … FROM unnest would: the planner prefers a
// hash join over a sequential scan of a table of up to some hundred
// thousand rows). A row another transaction inserted first is neither
// inserted nor updated; the caller compares the count.
//
// created_at is in every INSERT list: it is NOT NULL without a default, so
// the would-be new row of a state-only write needs it too.
func upsertJobs(groups ...columnGroup) batchWrite {
	var cols []column
	for _, c := range jobColumns {
		if c.group == keyColumn || c.name == "created_at" || slices.Contains(groups, c.group) {
			cols = append(cols, c)
		}
	}
	names, values, set := make([]string, len(cols)), make([]string, len(cols)), []string{}
	for i, c := range cols {
		names[i], values[i] = c.name, c.value()
		if slices.Contains(groups, c.group) {
			set = append(set, c.name+" = EXCLUDED."+c.name)
		}
	}
	return batchWrite{cols: cols, sql: `INSERT INTO jobs (` + strings.Join(names, ", ") + `) SELECT ` + strings.Join(values, ", ") +
		` FROM ` + unnestFrom(cols) + ` ON CONFLICT (tenant_id, id) DO UPDATE SET ` + strings.Join(set, ", ") +
		`, updated_at = now() WHERE jobs.version = EXCLUDED.version - 1`}
}

var (
	// writeWhole rewrites rows whose specification changed (new rows go
	// through copyNewJobs).
	writeWhole = upsertJobs(specColumn, stateColumn)
	// writeState rewrites where existing jobs are; their specification is
	// unchanged and not sent.
	writeState = upsertJobs(stateColumn)
)

// columnNames are the names of every column of jobColumns, in order: the
// column list of a COPY of new rows.
var columnNames = func() []string {
	names := make([]string, len(jobColumns))
	for i, c := range jobColumns {
		names[i] = c.name
	}
	return names
}()

// copyRow writes job j as one row of a COPY of columnNames.
func copyRow(w *pgstore.CopyWriter, j *Job) {
	w.Row(len(jobColumns))
	for _, c := range jobColumns {
		c.put(w, j)
	}
}

// sameSpec reports whether a and b hold the same specification columns:
// status.Row's specification and the creation time.
func sameSpec(a, b *Job) bool {
	return a.SameSpec(&b.Row) && a.CreatedAt.Equal(b.CreatedAt)
}
