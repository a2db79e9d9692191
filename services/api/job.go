package api

import (
	"encoding/json"
	"time"

	"github.com/ferryhq/ferry/events/schema"
	"github.com/ferryhq/ferry/services/api/internal/status"
)

// Job is the job resource of docs/design.md §6.
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
	// ScheduleID is the schedule whose fire created the job.
	ScheduleID string `json:"schedule_id,omitempty"`
	// Waiting says why a queued job does not run, when no live worker
	// takes its type (workers.go); absent otherwise.
	Waiting string `json:"waiting,omitempty"`
	// Deduplicated is set on submission answers only.
	Deduplicated *bool `json:"deduplicated,omitempty"`
}

// Progress is the latest progress report of a running job.
type Progress struct {
	Percent float64 `json:"percent"`
	Message string  `json:"message,omitempty"`
}

// ErrorInfo is the last failure of a job.
type ErrorInfo struct {
	Class   string `json:"class"`
	Message string `json:"message"`
}

func jobFromRow(r status.Row, now time.Time) Job {
	j := Job{
		ID: r.ID, TenantID: r.TenantID, Type: r.Type, Queue: r.Queue, Priority: r.Priority, Pool: r.Pool,
		Status: r.Effective(now), Attempt: r.Pos.Attempt, MaxAttempts: r.MaxAttempts, Payload: r.Payload,
		Tags: r.Tags, CreatedAt: r.CreatedAt, ScheduledFor: r.ScheduledFor, StartedAt: r.StartedAt,
		FinishedAt: r.FinishedAt, Result: r.Result, TraceID: r.TraceID, RedrivenFrom: r.RedrivenFrom,
		ScheduleID: r.ScheduleID,
	}
	if j.Tags == nil {
		j.Tags = []string{}
	}
	if r.UniqueKey != "" && r.UniqueUntil != nil {
		j.Unique = &schema.Unique{Key: r.UniqueKey, While: r.UniqueWhile, Until: *r.UniqueUntil}
	}
	if r.ProgressPercent != nil {
		j.Progress = &Progress{Percent: *r.ProgressPercent, Message: r.ProgressMessage}
	}
	if r.LastErrorClass != "" || r.LastErrorMessage != "" {
		j.LastError = &ErrorInfo{Class: r.LastErrorClass, Message: r.LastErrorMessage}
	}
	return j
}

// jobFromSubmission is the resource of a job just accepted.
func jobFromSubmission(id, tenant string, spec schema.JobSpec, createdAt, runAt time.Time, traceID string) Job {
	st := schema.StatusQueued
	if runAt.After(createdAt) {
		st = schema.StatusScheduled
	}
	ra := runAt
	j := Job{
		ID: id, TenantID: tenant, Type: spec.Type, Queue: spec.Queue, Priority: spec.Priority, Pool: spec.Pool,
		Status: st, Attempt: 1, MaxAttempts: spec.MaxAttempts, Payload: spec.Payload, Tags: spec.Tags,
		CreatedAt: createdAt, ScheduledFor: &ra, TraceID: traceID,
	}
	if j.Tags == nil {
		j.Tags = []string{}
	}
	return j
}

// withStatusNow turns a cached scheduled job whose time has come into queued.
func (j Job) withStatusNow(now time.Time) Job {
	if j.Status == schema.StatusScheduled && j.StartedAt == nil && j.ScheduledFor != nil && !j.ScheduledFor.After(now) && j.Attempt <= 1 {
		j.Status = schema.StatusQueued
	}
	return j
}
