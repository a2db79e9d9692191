// Package status holds the merge rules of the job status projection: how the
// lifecycle events of one job, delivered in any order, any number of times,
// fold into one row. It is pure domain code; the store package loads and
// writes rows around it.
//
// Every field is kept by a rule that does not depend on arrival order:
//
//   - the position (attempt, phase) only moves forward (schema.Position.Advances);
//   - the job's specification (type, queue, payload, …, trace id, idempotency
//     key) comes from the enqueued event with the lowest attempt;
//   - scheduled_for comes from the enqueued event with the highest attempt;
//   - the run (started_at, worker_id) from the highest (attempt, started_at);
//   - progress from the highest (attempt, event time);
//   - the last error from the highest (attempt, dead-letter over failure);
//   - finished_at and result from the terminal event the position rests on.
package status

import (
	"bytes"
	"encoding/json"
	"slices"
	"time"

	"github.com/ferryhq/ferry/events/schema"
	"github.com/ferryhq/ferry/platform/telemetry"
)

// Row is one job of the status projection.
type Row struct {
	TenantID string
	ID       string

	// Specification, from the enqueued event of SpecAttempt (0: none seen yet).
	SpecAttempt    int
	Type           string
	Queue          string
	Priority       int
	MaxAttempts    int
	Payload        json.RawMessage
	Tags           []string
	Pool           string
	TraceID        string
	RedrivenFrom   string
	IdempotencyKey string
	RequestHash    string
	// UniqueKey, UniqueWhile and UniqueUntil are the job's unique key
	// (schema.Unique), empty without one; see HoldsUnique.
	UniqueKey   string
	UniqueWhile string
	UniqueUntil *time.Time
	// ScheduleID is the schedule that created the job ("" if none), from
	// the enqueued event that carries it (the first attempt's).
	ScheduleID string
	// ConcurrencyKey and ConcurrencyLimit are the job's concurrency key
	// (schema.Concurrency), empty without one.
	ConcurrencyKey   string
	ConcurrencyLimit int

	// CreatedAt is the submission time; until the enqueued event is seen,
	// the earliest event time of the job.
	CreatedAt time.Time

	// EnqAttempt is the highest attempt an enqueued event was seen for;
	// ScheduledFor is its run_at and Delayed whether run_at lay after the
	// event's time (a delay or a backoff).
	EnqAttempt   int
	ScheduledFor *time.Time
	Delayed      bool

	// Pos is where the job is.
	Pos schema.Position

	// Run is the latest run seen: RunAttempt, StartedAt, WorkerID.
	RunAttempt int
	StartedAt  *time.Time
	WorkerID   string

	FinishedAt *time.Time
	Result     json.RawMessage

	// Progress of the latest report: ProgressAttempt, ProgressAt.
	ProgressAttempt int
	ProgressAt      *time.Time
	ProgressPercent *float64
	ProgressMessage string

	// ErrorRank orders error reports: 2·attempt, +1 for a dead-letter.
	ErrorRank        int
	LastErrorClass   string
	LastErrorMessage string
}

// Status is the stored status of the row: the status at its position, with
// an enqueued attempt shown as scheduled while it waits for a delay or a
// backoff. Readers turn a scheduled row whose ScheduledFor has passed into
// queued (see Effective).
func (r *Row) Status() schema.Status {
	return r.Pos.Status(r.Delayed && r.Pos.Attempt == r.EnqAttempt)
}

// Effective is the status as of now.
func (r *Row) Effective(now time.Time) schema.Status {
	s := r.Status()
	if s == schema.StatusScheduled && r.Pos.Phase == schema.PhaseEnqueued && r.ScheduledFor != nil && !r.ScheduledFor.After(now) {
		return schema.StatusQueued
	}
	return s
}

// Apply folds ev into r. r.TenantID and r.ID are set from the event when
// empty. Events of other record types (dispatch, worker status) are ignored.
// Apply reports whether the row changed.
func Apply(r *Row, ev schema.Event) bool {
	lc, ok := ev.Data.(schema.Lifecycle)
	if !ok {
		return false
	}
	// A shallow copy is a true snapshot: Apply replaces the slices and
	// pointers of r, it never writes through them.
	before := *r
	ref := lc.Ref()
	if r.ID == "" {
		r.ID, r.TenantID = ref.JobID, ref.TenantID
	}
	if t := ts(ev.Time); r.SpecAttempt == 0 && !t.IsZero() && (r.CreatedAt.IsZero() || t.Before(r.CreatedAt)) {
		r.CreatedAt = t
	}
	pos := schema.PositionOf(lc.EventType(), ref.Attempt)
	advances := pos.Advances(r.Pos)
	if advances {
		r.Pos = pos
		r.FinishedAt, r.Result = nil, nil
	}
	switch e := lc.(type) {
	case schema.Enqueued:
		applyEnqueued(r, e, ev.Meta)
	case schema.Started:
		applyRun(r, e.Attempt, &e.StartedAt, e.WorkerID)
	case schema.Progress:
		applyRun(r, e.Attempt, nil, e.WorkerID)
		at := ts(e.At)
		if e.Attempt > r.ProgressAttempt || (e.Attempt == r.ProgressAttempt && (r.ProgressAt == nil || at.After(*r.ProgressAt))) {
			p := e.Percent
			r.ProgressAttempt, r.ProgressAt, r.ProgressPercent, r.ProgressMessage = e.Attempt, &at, &p, e.Message
		}
	case schema.Completed:
		applyRun(r, e.Attempt, &e.StartedAt, e.WorkerID)
		if advances {
			r.FinishedAt, r.Result = utcPtr(e.FinishedAt), cloneRaw(e.Result)
		}
	case schema.Failed:
		applyRun(r, e.Attempt, &e.StartedAt, e.WorkerID)
		applyError(r, 2*e.Attempt, e.Error)
	case schema.DeadLettered:
		applySpec(r, e.Attempt, e.Job, e.CreatedAt, submission{}, e.RedrivenFrom)
		applyError(r, 2*e.Attempt+1, e.Error)
		if advances {
			r.FinishedAt = utcPtr(e.DeadAt)
		}
	case schema.Cancelled:
		if advances {
			r.FinishedAt = utcPtr(e.At)
		}
	}
	return !before.equal(r)
}

// CarriesSpec reports whether ev carries a job's specification (enqueued,
// dead-lettered). Apply changes a row's specification only for such an
// event, but for one field: an event folded into a row without a
// specification yet (SpecAttempt 0) may move its CreatedAt. So a store may
// fold any other event into a row of which it read only the state, the
// key, SpecAttempt, CreatedAt and Queue (TestEventsWithoutSpecReadOnlyTheState).
func CarriesSpec(ev schema.Event) bool {
	switch ev.Data.(type) {
	case schema.Enqueued, schema.DeadLettered:
		return true
	}
	return false
}

func applyEnqueued(r *Row, e schema.Enqueued, m schema.Meta) {
	sub := submission{traceID: telemetry.TraceIDOf(m.TraceParent), idemKey: e.IdempotencyKey, reqHash: e.RequestHash, unique: e.Unique}
	applySpec(r, e.Attempt, e.Job, e.CreatedAt, sub, e.RedrivenFrom)
	if e.ScheduleID != "" {
		r.ScheduleID = e.ScheduleID
	}
	if e.Attempt >= r.EnqAttempt {
		at := ts(e.RunAt)
		r.EnqAttempt, r.ScheduledFor = e.Attempt, &at
		r.Delayed = !m.Time.IsZero() && at.After(m.Time)
	}
}

// submission is what only a job's enqueued events carry beside its
// specification.
type submission struct {
	traceID, idemKey, reqHash string
	unique                    *schema.Unique
}

// applySpec takes the specification of the event with the lowest attempt.
// A dead-letter event carries the specification too (but no trace,
// idempotency or unique data), so it fills a row whose enqueued events are
// missing; an enqueued event of the same attempt replaces it.
func applySpec(r *Row, attempt int, spec schema.JobSpec, createdAt time.Time, sub submission, redrivenFrom string) {
	full := sub.idemKey != "" || sub.reqHash != "" || sub.traceID != "" || sub.unique != nil
	switch {
	case r.SpecAttempt == 0, attempt < r.SpecAttempt:
	case attempt == r.SpecAttempt && full && r.TraceID == "" && r.IdempotencyKey == "" && r.RequestHash == "" && r.UniqueKey == "":
	default:
		return
	}
	r.SpecAttempt = attempt
	r.Type, r.Queue, r.Priority, r.MaxAttempts = spec.Type, spec.Queue, spec.Priority, spec.MaxAttempts
	r.Payload, r.Tags, r.Pool = cloneRaw(spec.Payload), append([]string(nil), spec.Tags...), spec.Pool
	r.ConcurrencyKey, r.ConcurrencyLimit = "", 0
	if c := spec.Concurrency; c != nil {
		r.ConcurrencyKey, r.ConcurrencyLimit = c.Key, c.Limit
	}
	r.TraceID, r.IdempotencyKey, r.RequestHash, r.RedrivenFrom = sub.traceID, sub.idemKey, sub.reqHash, redrivenFrom
	r.UniqueKey, r.UniqueWhile, r.UniqueUntil = "", "", nil
	if u := sub.unique; u != nil {
		r.UniqueKey, r.UniqueWhile, r.UniqueUntil = u.Key, u.While, utcPtr(u.Until)
	}
	if !createdAt.IsZero() {
		r.CreatedAt = ts(createdAt)
	}
}

// HoldsUnique reports whether the job holds its unique key at now: it has
// one, now is before its end, and the job is in the key's state —
//
//   - queued: its first attempt has not started;
//   - active: its first attempt has not started, or an attempt runs (a
//     job waiting out a retry backoff does not hold the key);
//   - until_done: it has not succeeded, been dead-lettered or cancelled.
func (r *Row) HoldsUnique(now time.Time) bool {
	if r.UniqueKey == "" || r.UniqueUntil == nil || !now.Before(*r.UniqueUntil) {
		return false
	}
	firstWait := r.Pos.Phase == schema.PhaseEnqueued && r.Pos.Attempt <= 1
	switch r.UniqueWhile {
	case schema.UniqueQueued:
		return firstWait
	case schema.UniqueActive:
		return firstWait || r.Pos.Phase == schema.PhaseRunning
	case schema.UniqueUntilDone:
		return !r.Pos.Phase.Terminal()
	}
	return false
}

// applyRun keeps the run with the highest (attempt, started_at, worker_id).
func applyRun(r *Row, attempt int, startedAt *time.Time, workerID string) {
	var st *time.Time
	if startedAt != nil && !startedAt.IsZero() {
		st = utcPtr(*startedAt)
	}
	switch {
	case attempt > r.RunAttempt:
	case attempt < r.RunAttempt:
		return
	case st != nil && (r.StartedAt == nil || st.After(*r.StartedAt)):
	case timeEq(st, r.StartedAt) && workerID > r.WorkerID:
	default:
		return
	}
	r.RunAttempt, r.StartedAt, r.WorkerID = attempt, st, workerID
}

func applyError(r *Row, rank int, e schema.ErrorInfo) {
	if rank < r.ErrorRank || (rank == r.ErrorRank && (string(e.Class)+"\x00"+e.Message) <= (r.LastErrorClass+"\x00"+r.LastErrorMessage)) {
		return
	}
	r.ErrorRank, r.LastErrorClass, r.LastErrorMessage = rank, string(e.Class), e.Message
}

// ts normalises a time the way Postgres stores it (UTC, microseconds), so a
// row read back compares equal to the one written.
func ts(t time.Time) time.Time { return t.UTC().Truncate(time.Microsecond) }

func utcPtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	u := ts(t)
	return &u
}

func cloneRaw(b json.RawMessage) json.RawMessage {
	if len(b) == 0 {
		return nil
	}
	return append(json.RawMessage(nil), b...)
}

func timeEq(a, b *time.Time) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Equal(*b)
}

// equal reports whether r and o hold the same values, field by field
// (an empty slice equals nil, pointers compare what they point to).
// TestEqualSeesEveryField fails when a field of Row is missing here.
func (r *Row) equal(o *Row) bool {
	return r.TenantID == o.TenantID && r.ID == o.ID && r.SameSpec(o) &&
		r.CreatedAt.Equal(o.CreatedAt) && r.EnqAttempt == o.EnqAttempt && timeEq(r.ScheduledFor, o.ScheduledFor) &&
		r.Delayed == o.Delayed && r.Pos == o.Pos &&
		r.RunAttempt == o.RunAttempt && timeEq(r.StartedAt, o.StartedAt) && r.WorkerID == o.WorkerID &&
		timeEq(r.FinishedAt, o.FinishedAt) && bytes.Equal(r.Result, o.Result) &&
		r.ProgressAttempt == o.ProgressAttempt && timeEq(r.ProgressAt, o.ProgressAt) &&
		floatEq(r.ProgressPercent, o.ProgressPercent) && r.ProgressMessage == o.ProgressMessage &&
		r.ErrorRank == o.ErrorRank && r.LastErrorClass == o.LastErrorClass && r.LastErrorMessage == o.LastErrorMessage
}

// SameSpec reports whether r and o hold the same specification: the
// fields taken from the enqueued event of SpecAttempt (CreatedAt aside,
// which moves before that event is seen).
func (r *Row) SameSpec(o *Row) bool {
	return r.SpecAttempt == o.SpecAttempt && r.Type == o.Type && r.Queue == o.Queue &&
		r.Priority == o.Priority && r.MaxAttempts == o.MaxAttempts && bytes.Equal(r.Payload, o.Payload) &&
		slices.Equal(r.Tags, o.Tags) && r.Pool == o.Pool && r.TraceID == o.TraceID &&
		r.RedrivenFrom == o.RedrivenFrom && r.IdempotencyKey == o.IdempotencyKey && r.RequestHash == o.RequestHash &&
		r.UniqueKey == o.UniqueKey && r.UniqueWhile == o.UniqueWhile && timeEq(r.UniqueUntil, o.UniqueUntil) &&
		r.ScheduleID == o.ScheduleID && r.ConcurrencyKey == o.ConcurrencyKey && r.ConcurrencyLimit == o.ConcurrencyLimit
}

func floatEq(a, b *float64) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}
