package eventlog

import (
	"cmp"
	"slices"
	"time"

	"github.com/ferryhq/ferry/events/schema"
	"github.com/ferryhq/ferry/services/sse-bridge/internal/hub"
)

// jobState is what the log knows of one job while anything of it is in the
// log or waiting in the hold.
type jobState struct {
	id, tenant string
	// queue, jobType and tags come from the job's enqueued event; tenant
	// stream filters apply them to every later event of the job.
	queue, jobType string
	tags           []string
	enqueued       bool
	started        attempts // attempts whose started is logged
	// terminalSeq is the id of the job's final event: nothing of the job
	// is logged after it.
	terminalSeq int64
	events      []*hub.Event // logged and still in the ring, oldest first
	held        []logEvent   // waiting for their predecessor, in arrival order
	// first backs events: a job logs three events in the common case
	// (enqueued, started, completed), so they fit without an allocation
	// of their own.
	first [3]*hub.Event
}

// newJobState returns the state of a job first seen in tenant.
func newJobState(id, tenant string) *jobState {
	j := &jobState{id: id, tenant: tenant}
	j.events = j.first[:0]
	return j
}

// attempts is a set of attempt numbers: a bit per attempt below 64, and a
// map for attempts beyond, made only for a job retried that often. A map
// per job was one of the sse-bridge's larger allocations per job.
type attempts struct {
	low  uint64
	high map[int]bool
}

func (a *attempts) add(n int) {
	if n >= 0 && n < 64 {
		a.low |= 1 << n
		return
	}
	if a.high == nil {
		a.high = map[int]bool{}
	}
	a.high[n] = true
}

func (a *attempts) has(n int) bool {
	if n >= 0 && n < 64 {
		return a.low&(1<<n) != 0
	}
	return a.high[n]
}

func (j *jobState) ended() bool { return j.terminalSeq != 0 }

// holdEntry records that an event of job went into its hold at at.
type holdEntry struct {
	job *jobState
	at  time.Time
}

// take handles one consumed event: it is dropped (a duplicate by CloudEvents
// id, an event of a job that ended, or one whose tenant disagrees with its
// job's), held, or logged together with the held events it releases.
//
// Order: a job's events travel on different topics and partitions,
// consumed at different paces. An event whose predecessor (awaits) is not
// logged yet waits in the hold until the predecessor is logged or Hold
// passes; then it is logged right after it. So a stream shows started
// before completed even when completed is consumed first, instead of
// dropping the late started.
func (l *Log) take(e logEvent, now time.Time, out *[]*hub.Event) {
	if _, dup := l.seen[e.id]; dup {
		return
	}
	j := l.jobs[e.job]
	switch {
	case j == nil:
		j = newJobState(e.job, e.tenant)
		l.jobs[e.job] = j
	case j.tenant != e.tenant:
		l.log.Warn("sse-bridge: dropping event whose tenant disagrees with its job", "job_id", e.job, "ce_id", e.id)
		return
	case j.ended():
		return
	}
	l.seen[e.id] = struct{}{}
	if !l.ready(e, j, now) {
		e.heldAt = now
		j.held = append(j.held, e)
		l.holds = append(l.holds, holdEntry{job: j, at: now})
		l.nheld++
		return
	}
	l.append(e, j, now, out)
	l.drain(j, now, out)
}

// ready reports whether e may be logged: its predecessor is, or it waits
// for nothing, or it waited the whole hold.
func (l *Log) ready(e logEvent, j *jobState, now time.Time) bool {
	if l.cfg.Hold <= 0 || (!e.heldAt.IsZero() && now.Sub(e.heldAt) >= l.cfg.Hold) {
		return true
	}
	switch e.waitFor {
	case schema.EventEnqueued:
		return j.enqueued
	case schema.EventStarted:
		return j.started.has(e.attempt)
	}
	return true
}

// drain logs the held events of j that are now ready, earliest in the
// job's lifecycle first (a progress before the completed that was held
// before it), each possibly releasing the next.
func (l *Log) drain(j *jobState, now time.Time, out *[]*hub.Event) {
	for {
		i := l.nextReady(j, now)
		if i < 0 {
			break
		}
		w := j.held[i]
		j.held = slices.Delete(j.held, i, i+1)
		l.nheld--
		l.append(w, j, now, out)
	}
}

// nextReady returns the index of the ready held event of j that comes
// first in the job's lifecycle (attempt, phase, then event time); -1 when
// none is ready.
func (l *Log) nextReady(j *jobState, now time.Time) int {
	best := -1
	for i, w := range j.held {
		if l.ready(w, j, now) && (best < 0 || lifecycleOrder(w, j.held[best]) < 0) {
			best = i
		}
	}
	return best
}

// lifecycleOrder orders two events of one job by where they put it
// (attempt, then phase), then by event time.
func lifecycleOrder(a, b logEvent) int {
	pa, pb := schema.PositionOf(a.typ, a.attempt), schema.PositionOf(b.typ, b.attempt)
	return cmp.Or(cmp.Compare(pa.Attempt, pb.Attempt), cmp.Compare(pa.Phase, pb.Phase), a.at.Compare(b.at))
}

// append logs e as the newest event, with its job's attributes, and
// records what e changes of its job.
func (l *Log) append(e logEvent, j *jobState, now time.Time, out *[]*hub.Event) {
	switch {
	case e.spec != nil && !j.enqueued:
		j.queue, j.jobType, j.tags, j.enqueued = e.spec.Queue, e.spec.Type, e.spec.Tags, true
	case e.typ == schema.EventStarted:
		j.started.add(e.attempt)
	}
	l.last++
	ev := hub.NewEvent(hub.Attrs{Seq: l.last, Tenant: e.tenant, JobID: e.job, Type: e.typ,
		Queue: j.queue, JobType: j.jobType, Tags: j.tags}, wireLine(e, l.log))
	l.ring = append(l.ring, entry{ev: ev, ceID: e.id, at: now})
	j.events = append(j.events, ev)
	*out = append(*out, ev)
	if hub.IsTerminal(e.typ) {
		// Nothing of the job is logged after its final event.
		j.terminalSeq = ev.Seq
		for _, w := range j.held {
			delete(l.seen, w.id)
		}
		l.nheld -= len(j.held)
		j.held = nil
	}
}
