package jobs

import (
	"encoding/json"
	"time"

	"github.com/ferryhq/ferry/events/schema"
)

// Job is the job resource of the HTTP API (schema Job of
// services/api/openapi.json): what GET /v1/jobs/{id}, the job lists,
// submissions and re-drives answer.
type Job struct {
	ID           string          `json:"id"`
	TenantID     string          `json:"tenant_id"`
	Type         string          `json:"type"`
	Queue        string          `json:"queue"`
	Priority     int             `json:"priority"`
	Pool         string          `json:"pool,omitempty"`
	Status       schema.Status   `json:"status"`
	Attempt      int             `json:"attempt"`
	MaxAttempts  int             `json:"max_attempts"`
	Payload      json.RawMessage `json:"payload"`
	Tags         []string        `json:"tags"`
	CreatedAt    time.Time       `json:"created_at"`
	ScheduledFor *time.Time      `json:"scheduled_for"`
	StartedAt    *time.Time      `json:"started_at"`
	FinishedAt   *time.Time      `json:"finished_at"`
	Progress     *Progress       `json:"progress"`
	Result       json.RawMessage `json:"result"`
	LastError    *ErrorInfo      `json:"last_error"`
	TraceID      string          `json:"trace_id,omitempty"`
	RedrivenFrom string          `json:"redriven_from,omitempty"`
	// Unique is the job's unique key, when it was submitted with one.
	Unique *schema.Unique `json:"unique,omitempty"`
	// Concurrency is the job's concurrency key and limit, when it was
	// submitted with one (docs/flow-control.md).
	Concurrency *schema.Concurrency `json:"concurrency,omitempty"`
	// ScheduleID is the schedule whose fire created the job.
	ScheduleID string `json:"schedule_id,omitempty"`
	// Waiting says why a queued job does not run, when no live worker
	// takes its type; absent otherwise.
	Waiting string `json:"waiting,omitempty"`
	// Deduplicated is set on the answers of submissions and re-drives only:
	// true when an earlier request made the job.
	Deduplicated *bool `json:"deduplicated,omitempty"`
}

// Progress is the latest progress report of a running job.
type Progress struct {
	Percent float64 `json:"percent"`
	Message string  `json:"message,omitempty"`
}

// ErrorInfo is the last failure of a job: its class (schema.ErrorClass)
// and message.
type ErrorInfo struct {
	Class   string `json:"class"`
	Message string `json:"message"`
}

// Submitted is the resource of a job just accepted (a submission, a
// schedule's fire or a re-drive) as its enqueued event describes it:
// attempt 1, queued, or scheduled when runAt lies after createdAt.
func Submitted(id, tenant string, spec schema.JobSpec, createdAt, runAt time.Time) Job {
	createdAt, runAt = createdAt.UTC(), runAt.UTC()
	st := schema.StatusQueued
	if runAt.After(createdAt) {
		st = schema.StatusScheduled
	}
	return Job{
		ID: id, TenantID: tenant, Type: spec.Type, Queue: QueueOf(spec), Priority: spec.Priority, Pool: spec.Pool,
		Status: st, Attempt: 1, MaxAttempts: spec.MaxAttempts, Payload: spec.Payload, Tags: nonNil(spec.Tags),
		CreatedAt: createdAt, ScheduledFor: &runAt, Concurrency: spec.Concurrency,
	}
}

// Deduplicate marks j as the answer of an earlier request (deduplicated is
// true) or of this one (false).
func (j Job) Deduplicate(earlier bool) Job {
	j.Deduplicated = &earlier
	return j
}

// nonNil returns tags, or an empty list for none: the resource always
// carries a list.
func nonNil(tags []string) []string {
	if tags == nil {
		return []string{}
	}
	return tags
}
