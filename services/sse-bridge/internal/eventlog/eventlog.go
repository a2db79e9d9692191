// Package eventlog is the sse-bridge's event log: a bounded, in-memory ring
// of the lifecycle events this process consumed from Kafka, in the order its
// streams show them, numbered with the ids clients resume from.
//
// Each process keeps its own log. It consumes every partition of the
// lifecycle topics itself (Consume: no consumer group, nothing committed)
// and writes nothing to Postgres or Redis per job: Kafka is the durable
// copy, the log only a window onto its recent past. On start the log reads
// back the newest records of each partition, so job streams replay recent
// history after a restart too.
package eventlog

import (
	"errors"
	"log/slog"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferryhq/ferry/platform/background"
	"github.com/ferryhq/ferry/services/sse-bridge/internal/hub"
)

// Config bounds the log.
type Config struct {
	// Size is the most events the log keeps; the oldest go first.
	Size int
	// Hold is the longest an event waits for its predecessor (see take);
	// 0 logs every event at once, in arrival order.
	Hold time.Duration
	// Now is the clock. Defaults to time.Now.
	Now func() time.Time
}

// entry is one logged event with what eviction needs.
type entry struct {
	ev   *hub.Event
	ceID string
	at   time.Time // when it was logged
}

// Log is one process's event log. Its methods are safe for concurrent use.
type Log struct {
	cfg Config
	hub *hub.Hub
	log *slog.Logger

	mu   sync.Mutex
	ring []entry // oldest first; ids increase
	jobs map[string]*jobState
	seen map[string]struct{} // CloudEvents ids logged or held
	// holds has one entry per event put in a hold, in the order they were
	// held (so by hold time): ReleaseHeld visits only the jobs whose
	// oldest holds have passed, not every job that holds something. An
	// entry whose event was released early is skipped when it comes up.
	holds   []holdEntry
	nheld   int   // events waiting in the jobs' holds
	last    int64 // id of the newest event; idBase before the first
	evicted int64 // id of the newest evicted event; idBase before the first
}

// idBase is the id before a process's first event: its start time in
// microseconds, times 1024. Ids then count up by one per event, so a
// later process (a restart, or another replica started later) never hands
// out an id an earlier one did unless that one logged more than 1,024
// events per microsecond of its life, and a client presenting an earlier
// process's id is outside this log's window and gets a reset instead of
// being resumed at a wrong position. (int64 holds this until the year 2255.)
func idBase(now time.Time) int64 { return now.UnixMicro() << 10 }

// New returns an empty log that publishes what it logs to h.
func New(cfg Config, h *hub.Hub, log *slog.Logger) *Log {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	base := idBase(cfg.Now())
	return &Log{cfg: cfg, hub: h, log: log, jobs: map[string]*jobState{}, seen: map[string]struct{}{},
		last: base, evicted: base}
}

// Append logs the lifecycle events of recs (one fetch) and publishes them
// to the hub, in log order. Records are decoded outside the lock.
func (l *Log) Append(recs []*kgo.Record) {
	evs := decodeBatch(recs, l.log)
	if len(evs) == 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.cfg.Now()
	out := make([]*hub.Event, 0, len(evs)) // what the batch logs: about its events (a release of held ones may add some)
	for _, e := range evs {
		// A yield here holds the lock meanwhile: a stream reading the log
		// waits for it, a job's start does not.
		background.Step()
		l.take(e, now, &out)
	}
	l.finish(out)
}

// ReleaseHeld logs the held events whose hold has passed. Append does it
// for the jobs it touches; this covers the time no records arrive. It
// costs the holds that passed since the last call, however many jobs
// still hold events.
func (l *Log) ReleaseHeld() {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.cfg.Now()
	var out []*hub.Event
	n := 0
	for ; n < len(l.holds) && now.Sub(l.holds[n].at) >= l.cfg.Hold; n++ {
		l.drain(l.holds[n].job, now, &out)
	}
	l.holds = slices.Delete(l.holds, 0, n)
	l.finish(out)
}

// finish publishes what a write logged, then evicts beyond Size. Both run
// under the lock, so the hub sees events in id order and a stream that
// subscribed before reading the log misses none.
func (l *Log) finish(out []*hub.Event) {
	if len(out) > 0 {
		l.hub.Publish(out)
	}
	for len(l.ring) > l.cfg.Size {
		l.evictOldest()
	}
}

// Prune evicts the events logged before cutoff (FERRY_SSE_RETENTION) and
// returns how many.
func (l *Log) Prune(cutoff time.Time) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for len(l.ring) > 0 && l.ring[0].at.Before(cutoff) {
		l.evictOldest()
		n++
	}
	return n
}

// evictOldest drops the oldest event, and its job once nothing of the job
// is left.
func (l *Log) evictOldest() {
	e := l.ring[0]
	l.ring[0] = entry{}
	l.ring = l.ring[1:]
	l.evicted = e.ev.Seq
	delete(l.seen, e.ceID)
	j := l.jobs[e.ev.JobID]
	if j == nil {
		return
	}
	// A job's events are logged in id order, so its oldest goes first.
	if len(j.events) > 0 && j.events[0] == e.ev {
		j.events[0] = nil
		j.events = j.events[1:]
	}
	if len(j.events) == 0 && len(j.held) == 0 {
		delete(l.jobs, j.id)
	}
}

// ErrEvicted is returned by Replay when events after the position were
// evicted: reading on would skip them.
var ErrEvicted = errors.New("eventlog: events after this position were evicted")

// Replay returns up to limit events of tenant with id > after, in order;
// only those of job jobID when it is not empty. after 0 reads from the
// oldest event kept; any other position older than the log is ErrEvicted.
func (l *Log) Replay(tenant, jobID string, after int64, limit int) ([]*hub.Event, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if after != 0 && after < l.evicted {
		return nil, ErrEvicted
	}
	var out []*hub.Event
	if jobID != "" {
		j := l.jobs[jobID]
		if j == nil || j.tenant != tenant {
			return nil, nil
		}
		i := sort.Search(len(j.events), func(i int) bool { return j.events[i].Seq > after })
		return append(out, j.events[i:min(len(j.events), i+limit)]...), nil
	}
	i := sort.Search(len(l.ring), func(i int) bool { return l.ring[i].ev.Seq > after })
	for _, e := range l.ring[i:] {
		if len(out) == limit {
			break
		}
		if e.ev.Tenant == tenant {
			out = append(out, e.ev)
		}
	}
	return out, nil
}

// ErrJobNotFound is returned for a job the log does not know for a tenant.
var ErrJobNotFound = errors.New("eventlog: job not found")

// Job is what the log knows of one job.
type Job struct {
	// TerminalSeq is the id of the job's final event; 0 while it runs.
	TerminalSeq int64
}

// Job returns tenant's job id, or ErrJobNotFound: a job of another tenant,
// or one with nothing in the log (never seen, or evicted).
func (l *Log) Job(tenant, id string) (Job, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	j := l.jobs[id]
	if j == nil || j.tenant != tenant {
		return Job{}, ErrJobNotFound
	}
	return Job{TerminalSeq: j.terminalSeq}, nil
}

// Bounds returns the id of the newest evicted event and of the newest
// logged one: a client can resume from a position within [evicted, head].
func (l *Log) Bounds() (evicted, head int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.evicted, l.last
}

// Head returns the id of the newest logged event.
func (l *Log) Head() int64 {
	_, head := l.Bounds()
	return head
}

// Horizon returns the number of events in the log and when the oldest was
// logged (zero when empty): how far back a client can resume.
func (l *Log) Horizon() (n int, oldest time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.ring) == 0 {
		return 0, time.Time{}
	}
	return len(l.ring), l.ring[0].at
}

// Len returns the number of events in the log.
func (l *Log) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.ring)
}

// Held returns the number of events waiting for their predecessor.
func (l *Log) Held() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.nheld
}
