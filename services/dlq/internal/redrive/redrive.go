// Package redrive holds the dlq service's re-drive rules, apart from any
// I/O: how an operator's edits apply to a dead job's submission and what
// enqueued event a re-drive emits.
package redrive

import (
	"encoding/json"
	"time"

	"github.com/ferryhq/ferry/events/schema"
)

// Edit is what an operator may change when re-driving one entry. Nil
// fields keep the original submission's value.
type Edit struct {
	// Payload replaces the job's payload; a JSON null clears it.
	Payload json.RawMessage
	// MaxAttempts replaces the attempt budget.
	MaxAttempts *int
}

// Spec returns the submission a re-drive of orig runs at now: orig with
// the edit applied. A not_after deadline already past is dropped: the
// operator asked for the job to run, and keeping it would dead-letter the
// new job as expired without running it.
func Spec(orig schema.JobSpec, e Edit, now time.Time) schema.JobSpec {
	s := orig
	s.Tags = append([]string(nil), orig.Tags...)
	if e.Payload != nil {
		if string(e.Payload) == "null" {
			s.Payload = nil
		} else {
			s.Payload = append(json.RawMessage(nil), e.Payload...)
		}
	}
	if e.MaxAttempts != nil {
		s.MaxAttempts = *e.MaxAttempts
	}
	if s.NotAfter != nil && !s.NotAfter.After(now) {
		s.NotAfter = nil
	}
	if s.MaxAttempts < 1 {
		s.MaxAttempts = 1
	}
	return s
}

// Event is the enqueued event that re-drives dead job deadID of tenant as
// the new job newID: attempt 1 with a fresh attempt budget and no history.
func Event(tenant, deadID, newID, actor string, spec schema.JobSpec, now time.Time) schema.Enqueued {
	now = now.UTC()
	return schema.Enqueued{
		JobRef:       schema.JobRef{JobID: newID, TenantID: tenant, Attempt: 1},
		Job:          spec,
		CreatedAt:    now,
		RunAt:        now,
		Reason:       schema.ReasonRedrive,
		Actor:        actor,
		RedrivenFrom: deadID,
	}
}
