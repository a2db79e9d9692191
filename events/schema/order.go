package schema

// Status is a job's state as the projections and the HTTP API show it.
type Status string

// The job statuses of docs/design.md §3.
const (
	StatusQueued    Status = "queued"
	StatusScheduled Status = "scheduled"
	StatusRunning   Status = "running"
	StatusSucceeded Status = "succeeded"
	StatusDead      Status = "dead"
	StatusCancelled Status = "cancelled"
)

// Terminal reports whether no further attempt of the job will run.
func (s Status) Terminal() bool {
	return s == StatusSucceeded || s == StatusDead || s == StatusCancelled
}

// Phase orders the events of one attempt. Terminal phases are ordered among
// themselves so that conflicting terminal events (a cancel racing a
// completion) resolve the same way whatever order they arrive in: a recorded
// success is never hidden, and a dead-letter outranks a cancel.
type Phase int

// Phases, lowest first.
const (
	PhaseEnqueued Phase = iota + 1
	PhaseRunning
	PhaseFailed
	PhaseCancelled
	PhaseDead
	PhaseSucceeded
)

// Terminal reports whether the phase ends the job.
func (p Phase) Terminal() bool { return p >= PhaseCancelled }

// Position is where an event puts a job: an attempt and a phase within it.
// Terminal positions outrank every non-terminal one whatever the attempt;
// between two terminal positions of the same phase the later attempt wins.
type Position struct {
	Attempt int
	Phase   Phase
}

// PositionOf returns the position an event of type et for attempt moves a job to.
func PositionOf(et EventType, attempt int) Position {
	var p Phase
	switch et {
	case EventEnqueued:
		p = PhaseEnqueued
	case EventStarted, EventProgress:
		p = PhaseRunning
	case EventFailed:
		p = PhaseFailed
	case EventCancelled:
		p = PhaseCancelled
	case EventDLQ:
		p = PhaseDead
	case EventCompleted:
		p = PhaseSucceeded
	}
	return Position{Attempt: attempt, Phase: p}
}

// Advances reports whether next moves a job that is at cur strictly forward.
// Projections apply an event only when it advances the job (or, for
// progress, when it is a newer report at the same position), so they reach
// the same row whatever order the topics deliver in.
func (next Position) Advances(cur Position) bool {
	switch {
	case cur.Phase.Terminal() || next.Phase.Terminal():
		if next.Phase != cur.Phase {
			return next.Phase > cur.Phase
		}
		// Same terminal phase: break the tie on the attempt so that the
		// order is total and the final position never depends on arrival
		// order.
		return next.Attempt > cur.Attempt
	case next.Attempt != cur.Attempt:
		return next.Attempt > cur.Attempt
	default:
		return next.Phase > cur.Phase
	}
}

// Status is the job status at this position. A failed attempt shows as
// scheduled: the scheduler is deciding, and will retry or dead-letter it.
func (p Position) Status(delayed bool) Status {
	switch p.Phase {
	case PhaseRunning:
		return StatusRunning
	case PhaseFailed:
		return StatusScheduled
	case PhaseCancelled:
		return StatusCancelled
	case PhaseDead:
		return StatusDead
	case PhaseSucceeded:
		return StatusSucceeded
	}
	if delayed {
		return StatusScheduled
	}
	return StatusQueued
}
