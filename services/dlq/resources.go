package dlq

import (
	"time"

	"github.com/ferryhq/ferry/events/schema"
	"github.com/ferryhq/ferry/platform/jobs"
	"github.com/ferryhq/ferry/services/dlq/internal/store"
)

// Entry is the DLQ entry resource: one dead-lettered job.
type Entry struct {
	// ID is the dead job's id.
	ID       string `json:"id"`
	TenantID string `json:"tenant_id"`
	Type     string `json:"type"`
	Queue    string `json:"queue"`
	// Attempt is the attempt that was dead-lettered.
	Attempt int `json:"attempt"`
	// Error is the final error and its class.
	Error schema.ErrorInfo `json:"error"`
	// Job is the original submission (defaults applied).
	Job schema.JobSpec `json:"job"`
	// History is every attempt made, oldest first.
	History      []schema.Attempt `json:"history"`
	CreatedAt    time.Time        `json:"created_at"`
	DeadAt       time.Time        `json:"dead_at"`
	RedrivenFrom string           `json:"redriven_from,omitempty"`
	Suppressed   bool             `json:"suppressed"`
	SuppressedAt *time.Time       `json:"suppressed_at,omitempty"`
	SuppressedBy string           `json:"suppressed_by,omitempty"`
	// Redrive is the re-drive of this entry, null until re-driven.
	Redrive *Redrive `json:"redrive"`
}

// Redrive says who re-drove an entry, when, and into which job.
type Redrive struct {
	JobID string `json:"job_id"`
	// State is "pending" while the enqueued event is being produced and
	// "done" once it was.
	State string `json:"state"`
	// By is the API key id of the caller.
	By string     `json:"by"`
	At *time.Time `json:"at,omitempty"`
	// ConfirmedAt is when the service saw the new job's enqueued event on
	// the log.
	ConfirmedAt *time.Time `json:"confirmed_at,omitempty"`
}

func entryFromStore(e store.Entry) Entry {
	out := Entry{
		ID: e.JobID, TenantID: e.TenantID, Type: e.Type, Queue: e.Queue, Attempt: e.Attempt,
		Error: schema.ErrorInfo{Class: schema.ErrorClass(e.ErrorClass), Message: e.ErrorMessage},
		Job:   e.Spec, History: e.History, CreatedAt: e.CreatedAt.UTC(), DeadAt: e.DeadAt.UTC(),
		RedrivenFrom: e.RedrivenFrom, Suppressed: e.SuppressedAt != nil, SuppressedAt: utc(e.SuppressedAt),
		SuppressedBy: e.SuppressedBy,
	}
	if out.History == nil {
		out.History = []schema.Attempt{}
	}
	if r := e.Redrive; r != nil {
		at := r.RedrivenAt
		if at == nil {
			at = r.ClaimedAt
		}
		out.Redrive = &Redrive{JobID: r.JobID, State: r.State, By: r.Actor, At: utc(at), ConfirmedAt: utc(r.ConfirmedAt)}
	}
	return out
}

func utc(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}

// redrivenJob is the resource of the job a re-drive of dead job deadID
// made, as it was enqueued at at (GET /v1/jobs/{id} has its live status):
// deduplicated when an earlier re-drive made it.
func redrivenJob(tenant, id, deadID string, spec schema.JobSpec, at time.Time, deduplicated bool) jobs.Job {
	j := jobs.Submitted(id, tenant, spec, at, at)
	j.RedrivenFrom = deadID
	return j.Deduplicate(deduplicated)
}
