package api

import (
	"time"

	"github.com/ferryhq/ferry/events/schema"
	"github.com/ferryhq/ferry/platform/jobs"
	"github.com/ferryhq/ferry/services/api/internal/status"
)

// Job is the job resource, defined once in platform/jobs.
type Job = jobs.Job

// jobFromRow is the resource of a job as the status projection holds it.
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
	if r.ConcurrencyKey != "" {
		j.Concurrency = &schema.Concurrency{Key: r.ConcurrencyKey, Limit: r.ConcurrencyLimit}
	}
	if r.ProgressPercent != nil {
		j.Progress = &jobs.Progress{Percent: *r.ProgressPercent, Message: r.ProgressMessage}
	}
	if r.LastErrorClass != "" || r.LastErrorMessage != "" {
		j.LastError = &jobs.ErrorInfo{Class: r.LastErrorClass, Message: r.LastErrorMessage}
	}
	return j
}
