package schedules

import "time"

// Overlap policies: what a fire does while the schedule's previous run
// (the last job it created) is still queued, scheduled or running.
const (
	// OverlapAllow fires regardless.
	OverlapAllow = "allow"
	// OverlapSkip drops the fire.
	OverlapSkip = "skip"
	// OverlapQueueOne keeps one fire waiting and fires it once the previous
	// run finished; further fires meanwhile are dropped.
	OverlapQueueOne = "queue_one"
)

// Catch-up policies: what happens to missed fire times. A fire time is
// missed when a later fire time has also passed by the time the schedule
// is looked at, or it passed more than the misfire grace ago (the firing
// loops were stopped, or the schedule was claimed late).
const (
	// CatchupSkip drops missed fires; only an on-time fire fires.
	CatchupSkip = "skip"
	// CatchupOne fires once for all the fire times that passed, with the
	// latest of them.
	CatchupOne = "one"
	// CatchupAll fires every passed fire time, up to the schedule's
	// catch-up limit (the latest ones, oldest first).
	CatchupAll = "all"
)

// maxEnumerate bounds how many passed fire times one decision walks (an
// @every 1s schedule stopped for a day has 86,400); beyond it, the rest are
// counted as skipped and the schedule resumes from now.
const maxEnumerate = 100_000

// State is what a decision needs to know about a schedule.
type State struct {
	Overlap, Catchup string
	CatchupLimit     int
	// NextFire is the next fire time not yet handled (nil: none left).
	NextFire *time.Time
	// QueuedFire is a fire waiting for the previous run (queue_one).
	QueuedFire *time.Time
	// PrevActive reports whether the previous run is queued, scheduled or
	// running.
	PrevActive bool
}

// Plan is what to do with a schedule now.
type Plan struct {
	// Fire are the fire times to create jobs for, oldest first.
	Fire []time.Time
	// Queue is the fire left waiting for the previous run (queue_one).
	Queue *time.Time
	// Skipped counts fire times dropped by the catch-up or overlap policy.
	Skipped int
	// Next is the next fire time after those handled now (nil: none).
	Next *time.Time
}

// Decide applies the catch-up and then the overlap policy to the fire
// times of spec that passed by now. It is pure: the firing loop claims the
// schedule, calls Decide, creates the jobs and stores the result in one
// transaction.
func Decide(spec Spec, st State, now time.Time, grace time.Duration) Plan {
	p := Plan{Next: st.NextFire}
	var chosen []time.Time
	if st.NextFire != nil && !st.NextFire.After(now) {
		var due []time.Time
		var total int
		due, total, p.Next = passed(spec, *st.NextFire, now, keepFor(st))
		chosen = catchUp(st, due, now, grace)
		p.Skipped = total - len(chosen)
	}
	candidates := chosen
	if st.QueuedFire != nil {
		candidates = append([]time.Time{*st.QueuedFire}, chosen...)
	}
	if len(candidates) == 0 {
		return p
	}
	switch {
	case st.Overlap == OverlapAllow:
		p.Fire = candidates
	case st.PrevActive && st.Overlap == OverlapQueueOne:
		q := candidates[0]
		p.Queue, p.Skipped = &q, p.Skipped+len(candidates)-1
	case st.PrevActive: // skip
		p.Skipped += len(candidates)
	default:
		// The first fire makes a run that is active at once: under skip the
		// others are dropped, under queue_one the next one waits.
		p.Fire, p.Skipped = candidates[:1], p.Skipped+len(candidates)-1
		if st.Overlap == OverlapQueueOne && len(candidates) > 1 {
			q := candidates[1]
			p.Queue, p.Skipped = &q, p.Skipped-1
		}
	}
	return p
}

// keepFor is how many of the latest passed fire times a decision needs.
func keepFor(st State) int {
	if st.Catchup == CatchupAll {
		return max(st.CatchupLimit, 1)
	}
	return 1
}

// passed returns the latest keep fire times in [from, now] (from is a fire
// time), oldest first, how many there were, and the fire time after them.
func passed(spec Spec, from, now time.Time, keep int) ([]time.Time, int, *time.Time) {
	ring := make([]time.Time, 0, keep)
	total := 0
	t := from
	for ; !t.IsZero() && !t.After(now); t = spec.Next(t) {
		if total == maxEnumerate {
			t = spec.Next(now)
			break
		}
		if len(ring) == keep {
			ring = append(ring[:0], ring[1:]...)
		}
		ring = append(ring, t)
		total++
	}
	if t.IsZero() {
		return ring, total, nil
	}
	return ring, total, &t
}

// catchUp picks, among the latest passed fire times due (oldest first), the
// ones the catch-up policy fires.
func catchUp(st State, due []time.Time, now time.Time, grace time.Duration) []time.Time {
	latest := due[len(due)-1]
	switch st.Catchup {
	case CatchupAll:
		return due
	case CatchupOne:
		return due[len(due)-1:]
	}
	if now.Sub(latest) <= grace {
		return due[len(due)-1:]
	}
	return nil
}
