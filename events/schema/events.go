package schema

import (
	"encoding/json"
	"slices"
	"time"
)

// EventType is the short name of a lifecycle event, as used in topic names,
// SSE "event:" lines and webhook filters.
type EventType string

// The lifecycle events of docs/design.md §2.
const (
	EventEnqueued  EventType = "enqueued"
	EventStarted   EventType = "started"
	EventProgress  EventType = "progress"
	EventCompleted EventType = "completed"
	EventFailed    EventType = "failed"
	EventDLQ       EventType = "dlq"
	EventCancelled EventType = "cancelled"
)

// EventTypes lists every lifecycle event type.
var EventTypes = []EventType{EventEnqueued, EventStarted, EventProgress, EventCompleted, EventFailed, EventDLQ, EventCancelled}

// Valid reports whether t is a known lifecycle event type.
func (t EventType) Valid() bool {
	for _, v := range EventTypes {
		if v == t {
			return true
		}
	}
	return false
}

// CEType is the CloudEvents type of a lifecycle event: ferry.job.<name>.v1.
func (t EventType) CEType() string {
	if ce, ok := lifecycleCETypes[t]; ok {
		return ce
	}
	return ceTypeOf(t)
}

func ceTypeOf(t EventType) string { return "ferry.job." + string(t) + ".v1" }

// lifecycleCETypes holds the CloudEvents types of the known lifecycle
// events, built once: every record a producer makes asks for one, and
// building it each time was an allocation per record.
var lifecycleCETypes = func() map[EventType]string {
	m := make(map[EventType]string, len(EventTypes))
	for _, t := range EventTypes {
		m[t] = ceTypeOf(t)
	}
	return m
}()

// CloudEvents types of the records that are not lifecycle events.
const (
	CETypeDispatch     = "ferry.job.dispatch.v1"
	CETypeWorkerStatus = "ferry.worker.status.v1"
)

// ErrorClass says why an attempt failed and so what the scheduler does next
// (docs/design.md §3).
type ErrorClass string

// The failure classes.
const (
	// ClassAppError is a handler error: retried with exponential backoff.
	ClassAppError ErrorClass = "app_error"
	// ClassRetryable is a transient failure with an optional retry_after hint.
	ClassRetryable ErrorClass = "retryable"
	// ClassPermanent is dead-lettered at once.
	ClassPermanent ErrorClass = "permanent"
	// ClassTimeout gets one retry, then the dead-letter queue.
	ClassTimeout ErrorClass = "timeout"
	// ClassWorkerLost is a lease that expired; re-dispatched without using an attempt.
	ClassWorkerLost ErrorClass = "worker_lost"
	// ClassExpired is a job whose not_after passed before it ran.
	ClassExpired ErrorClass = "expired"
	// ClassCancelled is a handler stopped because its job was cancelled.
	ClassCancelled ErrorClass = "cancelled"
)

// ErrorClasses are the failure classes, in the order the docs list them.
var ErrorClasses = []ErrorClass{ClassAppError, ClassRetryable, ClassPermanent, ClassTimeout, ClassWorkerLost, ClassExpired, ClassCancelled}

// Valid reports whether c is a known class.
func (c ErrorClass) Valid() bool { return slices.Contains(ErrorClasses, c) }

// JobRef identifies one attempt of one job; every event carries it.
type JobRef struct {
	JobID    string `json:"job_id"`
	TenantID string `json:"tenant_id"`
	Attempt  int    `json:"attempt"`
}

// Backoff overrides the retry backoff of one job: min(base·2^(n-1), max),
// spread by ±Jitter.
type Backoff struct {
	Base Duration `json:"base,omitempty"`
	Max  Duration `json:"max,omitempty"`
	// Jitter is the relative spread of each delay, 0 to 1; 0 makes the
	// delays exact. Unset: the scheduler's default (±25 %).
	Jitter *float64 `json:"jitter,omitempty"`
}

// JobSpec is an accepted submission with defaults applied. It travels with
// the job (enqueued, dispatch, dlq) so no consumer needs another service's
// state to act on it.
type JobSpec struct {
	Type        string          `json:"type"`
	Queue       string          `json:"queue"`
	Priority    int             `json:"priority"`
	Payload     json.RawMessage `json:"payload,omitempty"`
	MaxAttempts int             `json:"max_attempts"`
	Timeout     Duration        `json:"timeout,omitempty"`
	NotAfter    *time.Time      `json:"not_after,omitempty"`
	Tags        []string        `json:"tags,omitempty"`
	Pool        string          `json:"pool"`
	Backoff     *Backoff        `json:"backoff,omitempty"`
	// Concurrency caps how many jobs of the tenant with the same key run
	// at once (flow control; docs/flow-control.md).
	Concurrency *Concurrency `json:"concurrency,omitempty"`
}

// Concurrency is a job's concurrency key: at most Limit jobs of its tenant
// carrying Key run at once across the cluster; the others wait, in order.
type Concurrency struct {
	Key   string `json:"key"`
	Limit int    `json:"limit"`
}

// ErrorInfo is a failure as reported to users.
type ErrorInfo struct {
	Class   ErrorClass `json:"class"`
	Message string     `json:"message"`
}

// Attempt is one finished attempt in a job's history.
type Attempt struct {
	Attempt    int        `json:"attempt"`
	Class      ErrorClass `json:"class,omitempty"`
	Error      string     `json:"error,omitempty"`
	WorkerID   string     `json:"worker_id,omitempty"`
	StartedAt  *time.Time `json:"started_at,omitempty"`
	FinishedAt *time.Time `json:"finished_at,omitempty"`
}

// Reasons an Enqueued event is emitted.
const (
	ReasonSubmitted = "submitted"
	ReasonRetry     = "retry"
	ReasonRedrive   = "redrive"
)

// ReasonSuperseded is the reason of the cancelled event the scheduler
// emits when a job completed by one dispatch while another copy of it was
// in flight (a late completion after a lost lease): workers stop that copy
// without reporting, and projections keep the job succeeded.
const ReasonSuperseded = "superseded"

// Enqueued puts an attempt of a job in line: a submission (attempt 1, from
// api), a retry decision (attempt n+1, from scheduler) or a re-drive (from dlq).
type Enqueued struct {
	JobRef
	Job JobSpec `json:"job"`
	// CreatedAt is when the job was first submitted.
	CreatedAt time.Time `json:"created_at"`
	// RunAt is the earliest time this attempt may start.
	RunAt  time.Time `json:"run_at"`
	Reason string    `json:"reason"`
	// Actor is the API key id or service that caused the event.
	Actor string `json:"actor,omitempty"`
	// IdempotencyKey and RequestHash let the status projection act as the
	// durable idempotency backstop.
	IdempotencyKey string `json:"idempotency_key,omitempty"`
	RequestHash    string `json:"request_hash,omitempty"`
	// Unique is the job's unique key, when it was submitted with one: the
	// status projection keeps it so the api finds the job holding a key
	// when Redis has forgotten the claim.
	Unique *Unique `json:"unique,omitempty"`
	// RedrivenFrom is the dead job this one re-drives.
	RedrivenFrom string `json:"redriven_from,omitempty"`
	// ScheduleID is the schedule whose fire created the job (attempt 1
	// only; retries and re-drives leave it out).
	ScheduleID string `json:"schedule_id,omitempty"`
	// History holds the attempts already made, so a later dlq event can
	// carry the full story without any service keeping it.
	History []Attempt `json:"history,omitempty"`
}

// Unique is a job's unique key: while the job is in the While state (and
// until Until), another submission of the tenant with the same Key answers
// with this job instead of creating one.
type Unique struct {
	Key string `json:"key"`
	// While is UniqueQueued, UniqueActive or UniqueUntilDone.
	While string `json:"while"`
	// Until is when the key stops holding whatever the job's state.
	Until time.Time `json:"until"`
}

// States a unique key holds in (Unique.While).
const (
	// UniqueQueued: until the job's first attempt starts.
	UniqueQueued = "queued"
	// UniqueActive: while the job waits for its first attempt or runs an
	// attempt; a job waiting out a retry backoff releases the key.
	UniqueActive = "active"
	// UniqueUntilDone: until the job succeeds, is dead-lettered or is
	// cancelled.
	UniqueUntilDone = "until_done"
)

// Started says a worker began running an attempt.
type Started struct {
	JobRef
	WorkerID   string    `json:"worker_id"`
	DispatchID string    `json:"dispatch_id"`
	StartedAt  time.Time `json:"started_at"`
}

// Progress reports how far a running attempt is; it is also the lease heartbeat.
type Progress struct {
	JobRef
	WorkerID   string    `json:"worker_id"`
	DispatchID string    `json:"dispatch_id"`
	Percent    float64   `json:"percent"`
	Message    string    `json:"message,omitempty"`
	At         time.Time `json:"at"`
	// Lease, when set, says the attempt is held outside Ferry's workers (an
	// http job whose receiver answered 202 Accepted): the dispatch's lease
	// runs until At + Lease and no longer holds a worker slot. Zero: the
	// scheduler's own lease (FERRY_SCHEDULER_LEASE), the attempt runs on
	// a worker.
	Lease Duration `json:"lease,omitempty"`
}

// Completed says an attempt succeeded; it is terminal for the job.
type Completed struct {
	JobRef
	WorkerID   string          `json:"worker_id"`
	DispatchID string          `json:"dispatch_id"`
	Result     json.RawMessage `json:"result,omitempty"`
	StartedAt  time.Time       `json:"started_at"`
	FinishedAt time.Time       `json:"finished_at"`
}

// Failed says an attempt failed; the scheduler decides retry or dead-letter.
type Failed struct {
	JobRef
	WorkerID   string    `json:"worker_id"`
	DispatchID string    `json:"dispatch_id"`
	Error      ErrorInfo `json:"error"`
	// RetryAfter is the earliest retry the failing system asked for (429/503).
	RetryAfter Duration  `json:"retry_after,omitempty"`
	StartedAt  time.Time `json:"started_at"`
	FinishedAt time.Time `json:"finished_at"`
}

// DeadLettered is the terminal decision that a job will not run again
// unless an operator re-drives it.
type DeadLettered struct {
	JobRef
	Job          JobSpec   `json:"job"`
	CreatedAt    time.Time `json:"created_at"`
	Error        ErrorInfo `json:"error"`
	History      []Attempt `json:"history"`
	DeadAt       time.Time `json:"dead_at"`
	RedrivenFrom string    `json:"redriven_from,omitempty"`
}

// Cancelled says a job was cancelled; it is terminal. A worker running the
// job cancels its handler's context when it sees this event.
type Cancelled struct {
	JobRef
	Reason string    `json:"reason,omitempty"`
	Actor  string    `json:"actor,omitempty"`
	At     time.Time `json:"at"`
}

// Dispatch is the scheduler's command to a pool: run this attempt.
type Dispatch struct {
	JobRef
	// DispatchID identifies this hand-out; a job re-dispatched after a lost
	// lease gets a new one, so late reports of the old run can be told apart.
	DispatchID string    `json:"dispatch_id"`
	Job        JobSpec   `json:"job"`
	CreatedAt  time.Time `json:"created_at"`
	// ReadyAt is when the attempt became runnable (its run_at or enqueue
	// time), for submission-to-start latency.
	ReadyAt    time.Time `json:"ready_at"`
	LeaseUntil time.Time `json:"lease_until"`
	// NotBefore, when set, is the attempt's due time: the scheduler leased
	// it ahead (a bounded look-ahead) so the dispatch reaches the worker
	// before it is due, and the worker must not start it earlier. Absent on
	// a job dispatched once due.
	NotBefore *time.Time `json:"not_before,omitempty"`
}

// WorkerStatus is a worker's flow-control announcement: how many slots it
// has and how many are busy. Stopping marks its last announcement.
type WorkerStatus struct {
	WorkerID string    `json:"worker_id"`
	Pool     string    `json:"pool"`
	Slots    int       `json:"slots"`
	Running  int       `json:"running"`
	At       time.Time `json:"at"`
	Stopping bool      `json:"stopping,omitempty"`
	// Hold is how many dispatches leased ahead of their not-before the
	// worker keeps waiting outside its slots; the scheduler leases at most
	// that many ahead to the pool's workers. 0 (or absent: workers before
	// the hold): none.
	Hold int `json:"hold,omitempty"`
	// HandedBack lists attempts the worker gave up on shutdown without
	// running them, so the scheduler re-dispatches them at once.
	HandedBack []JobRef `json:"handed_back,omitempty"`
	// Routing is what the worker can take: the job types it handles and the
	// dispatch partitions it owns. Absent (workers before routing) means
	// every type, on whatever partition the job id hashes to.
	Routing *WorkerRouting `json:"routing,omitempty"`
	// Rejected lists dispatches of a type the worker has no handler for
	// (its partition moved during a rebalance): the scheduler re-queues
	// each at the front, without using up an attempt, if that dispatch is
	// still the job's current one.
	Rejected []DispatchRef `json:"rejected,omitempty"`
}

// WorkerRouting is the part of a worker's announcement the scheduler routes
// by: a job is dispatched only to a partition owned by a live worker of its
// pool whose Types hold the job's type.
type WorkerRouting struct {
	// Types are the job types the worker has a handler for, sorted.
	Types []string `json:"types"`
	// Partitions are the dispatch topic partitions assigned to the worker
	// now (empty while it joins the group or owns none).
	Partitions []int32 `json:"partitions"`
}

// Handles reports whether a worker announcing r runs jobs of type typ; a
// worker that announces no routing handles every type.
func (r *WorkerRouting) Handles(typ string) bool {
	return r == nil || slices.Contains(r.Types, typ)
}

// DispatchRef is one dispatch of one attempt.
type DispatchRef struct {
	JobRef
	DispatchID string `json:"dispatch_id"`
}

// Data is implemented by every record payload type of this package.
type Data interface {
	// CEType is the CloudEvents type of the payload.
	CEType() string
	// Subject is the CloudEvents subject (the job or worker id).
	Subject() string
	// Tenant is the owning tenant ("" for worker announcements).
	Tenant() string
}

// Lifecycle is implemented by the seven lifecycle events.
type Lifecycle interface {
	Data
	EventType() EventType
	Ref() JobRef
}

func (r JobRef) Subject() string { return r.JobID }
func (r JobRef) Tenant() string  { return r.TenantID }
func (r JobRef) Ref() JobRef     { return r }

func (Enqueued) EventType() EventType     { return EventEnqueued }
func (Started) EventType() EventType      { return EventStarted }
func (Progress) EventType() EventType     { return EventProgress }
func (Completed) EventType() EventType    { return EventCompleted }
func (Failed) EventType() EventType       { return EventFailed }
func (DeadLettered) EventType() EventType { return EventDLQ }
func (Cancelled) EventType() EventType    { return EventCancelled }

func (e Enqueued) CEType() string     { return e.EventType().CEType() }
func (e Started) CEType() string      { return e.EventType().CEType() }
func (e Progress) CEType() string     { return e.EventType().CEType() }
func (e Completed) CEType() string    { return e.EventType().CEType() }
func (e Failed) CEType() string       { return e.EventType().CEType() }
func (e DeadLettered) CEType() string { return e.EventType().CEType() }
func (e Cancelled) CEType() string    { return e.EventType().CEType() }
func (Dispatch) CEType() string       { return CETypeDispatch }
func (WorkerStatus) CEType() string   { return CETypeWorkerStatus }

func (w WorkerStatus) Subject() string { return w.WorkerID }
func (WorkerStatus) Tenant() string    { return "" }
