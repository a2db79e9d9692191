package qstore

// The protocol between Go and the apply script. Each operation is a named
// struct whose args method is its one encoder: it lists the arguments in
// the order apply.lua's op of the same code reads them. The batch sends
// each op as its code, its argument count and its arguments; the script
// checks the count against its ARITY table and refuses the call when they
// differ, so a field added on one side only fails at once instead of
// shifting every later argument. ops_test.go runs every op through the
// real script.

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/ferryhq/ferry/events/schema"
	"github.com/ferryhq/ferry/platform/jobs"
)

// op is one operation of an apply script call.
type op interface {
	// code is the op's one-letter code in apply.lua.
	code() string
	// args are its arguments, in the script's order.
	args() []any
}

// enqueueOp (E) adds an attempt: ready, or delayed until RunAtMs.
type enqueueOp struct {
	JobID, TenantID string
	Attempt         int
	Queue, Pool     string
	Priority        int
	// RunAtMs is the due time rounded up to the ms (0: ready now).
	RunAtMs int64
	// NotAfterMs is the not_after deadline in ms ("" when none).
	NotAfterMs string
	// CreatedAt and ReadyAt are RFC 3339 times.
	CreatedAt, ReadyAt string
	// Spec and History are JSON (History "" when none).
	Spec, History    string
	RedrivenFrom     string
	Type             string
	ConcurrencyKey   string
	ConcurrencyLimit string
	TraceParent      string
}

func (enqueueOp) code() string { return "E" }
func (o enqueueOp) args() []any {
	return []any{o.JobID, o.TenantID, o.Attempt, o.Queue, o.Pool, o.Priority, o.RunAtMs, o.NotAfterMs,
		o.CreatedAt, o.ReadyAt, o.Spec, o.History, o.RedrivenFrom, o.Type, o.ConcurrencyKey, o.ConcurrencyLimit,
		o.TraceParent}
}

// extendOp (S) renews the lease of a dispatch; HoldMs > 0 holds it outside
// Ferry's workers for that long.
type extendOp struct {
	JobID, DispatchID string
	HoldMs            int64
}

func (extendOp) code() string  { return "S" }
func (o extendOp) args() []any { return []any{o.JobID, o.DispatchID, o.HoldMs} }

// completeOp (C) marks a job done; StartedMs and FinishedMs (0 when
// unknown) are the measured run of the dispatch, as in a usageOp.
type completeOp struct {
	JobID, TenantID, DispatchID string
	StartedMs, FinishedMs       int64
}

func (completeOp) code() string { return "C" }
func (o completeOp) args() []any {
	return []any{o.JobID, o.TenantID, o.DispatchID, o.StartedMs, o.FinishedMs}
}

// failOp (F) records a failed run of a dispatch; StartedMs and FinishedMs
// (0 when unknown) are its measured run, as in a usageOp.
type failOp struct {
	JobID, DispatchID     string
	Class                 schema.ErrorClass
	StartedMs, FinishedMs int64
}

func (failOp) code() string { return "F" }
func (o failOp) args() []any {
	return []any{o.JobID, o.DispatchID, string(o.Class), o.StartedMs, o.FinishedMs}
}

// cancelOp (X) cancels a job.
type cancelOp struct{ JobID, TenantID string }

func (cancelOp) code() string  { return "X" }
func (o cancelOp) args() []any { return []any{o.JobID, o.TenantID} }

// workerOp (W) records a worker's announcement.
type workerOp struct {
	Pool, WorkerID string
	Slots          int
	ExpiresMs      int64
	Stopping       bool
	// Routing is routingArg's JSON ("" when none).
	Routing string
	// Hold is how many dispatches leased ahead the worker holds for their
	// not-before outside its slots (0: none, so the scheduler leases nothing
	// ahead to it).
	Hold int
}

func (workerOp) code() string { return "W" }
func (o workerOp) args() []any {
	return []any{o.Pool, o.WorkerID, o.Slots, o.ExpiresMs, flag(o.Stopping), o.Routing, o.Hold}
}

// handBackOp (H) re-queues an attempt a stopping worker gave back.
type handBackOp struct {
	JobID   string
	Attempt int
}

func (handBackOp) code() string  { return "H" }
func (o handBackOp) args() []any { return []any{o.JobID, o.Attempt} }

// releaseOp (R) re-queues a dispatch whose record was not produced.
type releaseOp struct{ JobID, DispatchID string }

func (releaseOp) code() string  { return "R" }
func (o releaseOp) args() []any { return []any{o.JobID, o.DispatchID} }

// deadOp (D) marks a job dead-lettered (rebuild).
type deadOp struct{ JobID, TenantID string }

func (deadOp) code() string  { return "D" }
func (o deadOp) args() []any { return []any{o.JobID, o.TenantID} }

// refailOp (B) marks a job failed by a dispatch (rebuild).
type refailOp struct{ JobID, DispatchID string }

func (refailOp) code() string  { return "B" }
func (o refailOp) args() []any { return []any{o.JobID, o.DispatchID} }

// ackExpiredOp (A) records that an expired job's dlq record was produced.
type ackExpiredOp struct{ Pool, JobID string }

func (ackExpiredOp) code() string  { return "A" }
func (o ackExpiredOp) args() []any { return []any{o.Pool, o.JobID} }

// usageOp (U) is the measured run of a dispatch (0, 0 when unknown).
type usageOp struct {
	JobID, DispatchID     string
	StartedMs, FinishedMs int64
}

func (usageOp) code() string  { return "U" }
func (o usageOp) args() []any { return []any{o.JobID, o.DispatchID, o.StartedMs, o.FinishedMs} }

// traceOp (T) records the traceparent of an enqueued attempt.
type traceOp struct {
	JobID       string
	Attempt     int
	TraceParent string
}

func (traceOp) code() string  { return "T" }
func (o traceOp) args() []any { return []any{o.JobID, o.Attempt, o.TraceParent} }

// encodeOp appends o's arguments a as the script reads them: code,
// argument count, arguments.
func encodeOp(dst []any, o op, a []any) []any {
	dst = append(dst, o.code(), len(a))
	return append(dst, a...)
}

// Batch collects lifecycle facts for one Apply. The zero value is empty and
// ready to use.
type Batch struct {
	ops []op
	// extends indexes the batch's lease renewals by job, so that a
	// completion or failure of the same dispatch later in the batch drops
	// its renewal: the slot is freed anyway. endedBy is each job's
	// dispatch that ended in the batch, so that a renewal of it that comes
	// after its end (a poll takes the started and completed topics in no
	// set order) is not added at all.
	extends map[string][]int
	endedBy map[string]string
	dropped int
}

// Len is the number of operations in the batch.
func (b *Batch) Len() int { return len(b.ops) - b.dropped }

func (b *Batch) add(o op) { b.ops = append(b.ops, o) }

// ended drops the pending lease renewal of jobID's dispatchID: the
// dispatch ended in the same batch.
func (b *Batch) ended(jobID, dispatchID string) {
	for _, k := range b.extends[jobID] {
		if e, _ := b.ops[k].(extendOp); e.DispatchID == dispatchID {
			b.ops[k] = nil
			b.dropped++
		}
	}
	delete(b.extends, jobID)
	if b.endedBy == nil {
		b.endedBy = map[string]string{}
	}
	b.endedBy[jobID] = dispatchID
}

// Enqueue adds an attempt. readyAt is recorded as the attempt's ready time
// for immediate attempts (the record's time when RunAt is zero).
func (b *Batch) Enqueue(e schema.Enqueued, recordTime time.Time) error {
	spec, err := schema.MarshalSpec(&e.Job)
	if err != nil {
		return fmt.Errorf("qstore: encode job spec: %w", err)
	}
	o := enqueueOp{JobID: e.JobID, TenantID: e.TenantID, Attempt: e.Attempt, Queue: jobs.QueueOf(e.Job), Pool: jobs.PoolOf(e.Job),
		Priority: min(max(e.Job.Priority, 0), 9), Spec: string(spec), RedrivenFrom: e.RedrivenFrom, Type: e.Job.Type,
		CreatedAt: e.CreatedAt.UTC().Format(time.RFC3339Nano)}
	if len(e.History) > 0 {
		h, err := json.Marshal(e.History)
		if err != nil {
			return fmt.Errorf("qstore: encode history: %w", err)
		}
		o.History = string(h)
	}
	ready := e.RunAt
	if ready.IsZero() {
		ready = recordTime
	} else {
		o.RunAtMs = msCeil(e.RunAt)
	}
	o.ReadyAt = ready.UTC().Format(time.RFC3339Nano)
	if e.Job.NotAfter != nil {
		o.NotAfterMs = strconv.FormatInt(e.Job.NotAfter.UnixMilli(), 10)
	}
	o.ConcurrencyKey, o.ConcurrencyLimit = concurrencyArgs(e.Job.Concurrency)
	b.add(o)
	return nil
}

// Trace records the W3C traceparent of an enqueued attempt in its job hash
// (field tp), so its dispatch continues the job's trace. Add it after the
// attempt's Enqueue (which then carries it); it does nothing when the job
// hash holds another attempt.
func (b *Batch) Trace(ref schema.JobRef, traceparent string) {
	if traceparent == "" {
		return
	}
	if n := len(b.ops); n > 0 {
		if e, ok := b.ops[n-1].(enqueueOp); ok && e.JobID == ref.JobID && e.Attempt == ref.Attempt {
			e.TraceParent = traceparent
			b.ops[n-1] = e
			return
		}
	}
	b.add(traceOp{JobID: ref.JobID, Attempt: ref.Attempt, TraceParent: traceparent})
}

// Extend renews the lease of the job's current dispatch (started, progress),
// unless that dispatch ended earlier in the batch.
func (b *Batch) Extend(jobID, dispatchID string) {
	if d, ok := b.endedBy[jobID]; ok && d == dispatchID {
		return
	}
	if b.extends == nil {
		b.extends = map[string][]int{}
	}
	b.extends[jobID] = append(b.extends[jobID], len(b.ops))
	b.add(extendOp{JobID: jobID, DispatchID: dispatchID})
}

// Hold renews the lease of the job's current dispatch for lease, as held
// outside Ferry's workers (a progress event with a lease: an async http
// job): the job moves to its pool's held set and stops counting against
// the pool's worker slots.
func (b *Batch) Hold(jobID, dispatchID string, lease time.Duration) {
	b.add(extendOp{JobID: jobID, DispatchID: dispatchID, HoldMs: max(lease.Milliseconds(), 1)})
}

// Usage records the measured run of a dispatch (from its started_at to its
// finished_at); add it before the Complete or Fail of that dispatch. It
// reconciles the slot-time charged at dispatch and teaches the estimate of
// the job's (tenant, type).
func (b *Batch) Usage(jobID, dispatchID string, started, finished time.Time) {
	o := usageOp{JobID: jobID, DispatchID: dispatchID}
	if !started.IsZero() && !finished.IsZero() {
		o.StartedMs, o.FinishedMs = started.UnixMilli(), finished.UnixMilli()
	}
	b.add(o)
}

// Complete marks the job done for good and frees its slot. When another
// dispatch than dispatchID is in flight, Apply reports it in Superseded.
// The Usage of the same dispatch just before it travels in the completion.
func (b *Batch) Complete(jobID, tenantID, dispatchID string) {
	b.ended(jobID, dispatchID)
	o := completeOp{JobID: jobID, TenantID: tenantID, DispatchID: dispatchID}
	o.StartedMs, o.FinishedMs = b.takeUsage(jobID, dispatchID)
	b.add(o)
}

// takeUsage removes the Usage of jobID's dispatchID when it is the last op
// of the batch and returns its run (0, 0 when there is none): the end of
// the run that follows carries it, which saves the U op's reads and write
// of the job hash.
func (b *Batch) takeUsage(jobID, dispatchID string) (startedMs, finishedMs int64) {
	n := len(b.ops)
	if n == 0 {
		return 0, 0
	}
	u, ok := b.ops[n-1].(usageOp)
	if !ok || u.JobID != jobID || u.DispatchID != dispatchID {
		return 0, 0
	}
	b.ops = b.ops[:n-1]
	return u.StartedMs, u.FinishedMs
}

// Dead marks the job dead-lettered for good (used by the rebuild).
func (b *Batch) Dead(jobID, tenantID string) { b.add(deadOp{JobID: jobID, TenantID: tenantID}) }

// Refail marks a job (enqueued earlier in the batch) failed by dispatchID,
// and returns its template in ApplyResult.Failed for the retry decision;
// the rebuild uses it for a failure whose decision is not in the log.
func (b *Batch) Refail(jobID, dispatchID string) {
	b.add(refailOp{JobID: jobID, DispatchID: dispatchID})
}

// Fail records a failed run of the current dispatch and frees its slot.
// worker_lost re-queues the same attempt at the front and cancelled marks
// the job cancelled, inside Redis; any other class leaves the job "failed"
// and Apply returns its template for the retry decision. The Usage of the
// same dispatch just before it travels in the failure.
func (b *Batch) Fail(jobID, dispatchID string, class schema.ErrorClass) {
	b.ended(jobID, dispatchID)
	o := failOp{JobID: jobID, DispatchID: dispatchID, Class: class}
	o.StartedMs, o.FinishedMs = b.takeUsage(jobID, dispatchID)
	b.add(o)
}

// Cancel removes the job from its queues and marks it cancelled; a job in
// flight keeps its slot until its worker reports or the lease expires.
func (b *Batch) Cancel(jobID, tenantID string) { b.add(cancelOp{JobID: jobID, TenantID: tenantID}) }

// Worker records a worker's announcement at now. A worker is live until
// WorkerTTL after its announcement; Stopping removes it. Its routing (the
// types it handles, the partitions it owns) decides what it is sent
// (route.go).
func (b *Batch) Worker(ws schema.WorkerStatus, expires time.Time) {
	b.add(workerOp{Pool: ws.Pool, WorkerID: ws.WorkerID, Slots: ws.Slots, ExpiresMs: expires.UnixMilli(),
		Stopping: ws.Stopping, Routing: routingArg(ws.Routing), Hold: ws.Hold})
}

// HandBack re-queues, at the front, an attempt a stopping worker gave back.
func (b *Batch) HandBack(jobID string, attempt int) {
	b.add(handBackOp{JobID: jobID, Attempt: attempt})
}

// Release re-queues, at the front, a dispatch whose record was not produced.
func (b *Batch) Release(jobID, dispatchID string) {
	b.add(releaseOp{JobID: jobID, DispatchID: dispatchID})
}

// AckExpired records that the dlq record of an expired job was produced.
func (b *Batch) AckExpired(pool, jobID string) { b.add(ackExpiredOp{Pool: pool, JobID: jobID}) }

// chunks encodes the batch as the arguments of script calls of at most
// perCall ops each, every call starting with head. Each call's arguments
// are one slice of the exact size (a batch of hundreds of enqueues is
// thousands of arguments: growing the slice by appends copied it a dozen
// times).
func (b *Batch) chunks(head []any, perCall int) [][]any {
	var out [][]any
	pending := make([]op, 0, min(perCall, b.Len()))
	flush := func() {
		args := make([][]any, len(pending))
		n := len(head)
		for k, o := range pending {
			args[k] = o.args()
			n += 2 + len(args[k])
		}
		call := append(make([]any, 0, n), head...)
		for k, o := range pending {
			call = encodeOp(call, o, args[k])
		}
		out, pending = append(out, call), pending[:0]
	}
	for _, o := range b.ops {
		if o == nil {
			continue
		}
		if pending = append(pending, o); len(pending) == perCall {
			flush()
		}
	}
	if len(pending) > 0 {
		flush()
	}
	return out
}
