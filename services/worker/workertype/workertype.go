// Package workertype holds the types a Ferry job handler is written against:
// [Job], [HandlerFunc] and the errors that steer a failure's class. They
// live in this small package, like rivertype, so that handler packages
// (including the worker's built-in ones) need not import the worker runtime;
// package worker re-exports all of them, and applications should use those
// names (worker.Job, worker.Permanent, …).
package workertype

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/ferryhq/ferry/events/schema"
)

// HandlerFunc runs one attempt of a job. It returns a JSON-encodable result
// on success, or an error whose class tells the scheduler what to do next:
// see [Permanent], [Retryable] and [ClassOf]. The handler must return
// promptly once ctx is done (the job timed out, was cancelled, or the worker
// is stopping).
type HandlerFunc func(ctx context.Context, job *Job) (result any, err error)

// Job is one attempt of a job, as a handler sees it. Delivery is
// at-least-once: use ID and Attempt as idempotency keys for side effects.
type Job struct {
	// ID is the job id, stable across attempts.
	ID string
	// TenantID owns the job.
	TenantID string
	// Attempt counts from 1.
	Attempt int
	// Type is the handler name the job was submitted with.
	Type string
	// Queue is the queue the job was submitted to.
	Queue string
	// Payload is the job's JSON payload as submitted.
	Payload json.RawMessage
	// Tags are the job's tags.
	Tags []string
	// DispatchID identifies this hand-out of the attempt.
	DispatchID string

	progress func(percent float64, message string)
}

// NewJob returns j wired to report progress through progress (which may be
// nil). The worker runtime uses it; it is also handy to call a handler
// directly in a unit test.
func NewJob(j Job, progress func(percent float64, message string)) *Job {
	j.progress = progress
	return &j
}

// Progress reports how far the job is, percent in [0, 100] and an optional
// message. It is cheap and safe to call often and from any goroutine: the
// worker sends at most one progress event per job every ~100ms, always
// including the last report.
func (j *Job) Progress(percent float64, message string) {
	if j == nil || j.progress == nil {
		return
	}
	switch {
	case percent < 0 || percent != percent: // NaN
		percent = 0
	case percent > 100:
		percent = 100
	}
	j.progress(percent, message)
}

// Error is a handler error with an explicit failure class.
type Error struct {
	Class schema.ErrorClass
	// RetryAfter is the earliest retry the failing system asked for; only
	// meaningful for the retryable class.
	RetryAfter time.Duration
	Err        error
}

func (e *Error) Error() string {
	if e.Err == nil {
		return string(e.Class)
	}
	return e.Err.Error()
}

// Unwrap returns the wrapped error.
func (e *Error) Unwrap() error { return e.Err }

// Permanent marks err as permanent: the job is dead-lettered at once,
// without further attempts. Use it for invalid payloads and for requests
// the remote side rejected for good (HTTP 4xx other than 408 and 429).
func Permanent(err error) error {
	if err == nil {
		err = errors.New("permanent failure")
	}
	return &Error{Class: schema.ClassPermanent, Err: err}
}

// Retryable marks err as transient: the scheduler retries the job no sooner
// than retryAfter (zero: its normal backoff), as for HTTP 429 and 503.
func Retryable(err error, retryAfter time.Duration) error {
	if err == nil {
		err = errors.New("retryable failure")
	}
	if retryAfter < 0 {
		retryAfter = 0
	}
	return &Error{Class: schema.ClassRetryable, RetryAfter: retryAfter, Err: err}
}

// ClassOf returns the failure class of a handler error: the class of the
// first *Error in its chain; timeout for an error wrapping
// context.DeadlineExceeded; app_error for anything else.
func ClassOf(err error) (class schema.ErrorClass, retryAfter time.Duration) {
	var e *Error
	switch {
	case errors.As(err, &e):
		return e.Class, e.RetryAfter
	case errors.Is(err, context.DeadlineExceeded):
		return schema.ClassTimeout, 0
	}
	return schema.ClassAppError, 0
}

// PanicError is the error a handler that panicked is reported with (class
// app_error).
type PanicError struct {
	Value any
}

func (e *PanicError) Error() string { return fmt.Sprintf("handler panicked: %v", e.Value) }

// Detached is returned by a handler whose attempt another system took over
// (the http handler's receiver answered 202 Accepted to an async job): that
// system reports progress and the outcome through the api's callback routes,
// at least once per Lease. The worker frees the slot at once and reports
// neither completion nor failure; it tells the scheduler the attempt is
// held elsewhere, with Lease, so a receiver that goes silent makes it
// worker_lost and dispatched again.
type Detached struct {
	Lease time.Duration
	// Message is the progress message the hand-over reports.
	Message string
}

func (d *Detached) Error() string {
	return fmt.Sprintf("attempt detached from the worker (lease %s): %s", d.Lease, d.Message)
}
