// Package hub fans the events of one process's event log out to the
// process's SSE clients.
//
// Publishing never blocks: each subscriber has a bounded queue, and a
// subscriber whose queue is full is marked overflowed (its queue dropped)
// instead of slowing the publisher or other subscribers. Subscribers own no
// goroutine; the HTTP handler that owns one waits on [Sub.Ready].
package hub

import (
	"slices"
	"strconv"
	"sync"

	"github.com/ferryhq/ferry/events/schema"
)

// Attrs are what the log and the hub's filters know of an event without
// its data line.
type Attrs struct {
	// Seq is the event's position in the log: the SSE id.
	Seq    int64
	Tenant string
	JobID  string
	Type   schema.EventType
	// Queue, JobType and Tags are the job's attributes (from its enqueued
	// event); empty while the log has not seen that event.
	Queue   string
	JobType string
	Tags    []string
}

// Event is one logged lifecycle event as streamed to clients. Events are
// shared by every subscriber and must not be modified after [NewEvent].
type Event struct {
	Attrs

	// data renders the event's JSON line; called once, by the first Frame.
	data  func() []byte
	once  sync.Once
	frame []byte
	line  []byte // the JSON line, within frame
}

// NewEvent returns the event of a with the JSON line data renders. The SSE
// frame is rendered when the event is first written to a client (or its
// Data read), once, whatever the number of clients: most events of a busy
// log are never streamed, and rendering them all cost ~3 % of `ferry dev`'s
// CPU at full load (docs/performance.md, Round 17).
func NewEvent(a Attrs, data func() []byte) *Event {
	return &Event{Attrs: a, data: data}
}

// Frame is the event as an SSE message: id, event and data lines.
func (e *Event) Frame() []byte {
	e.once.Do(e.render)
	return e.frame
}

// Data is the event's JSON, one line.
func (e *Event) Data() []byte {
	e.once.Do(e.render)
	return e.line
}

// render builds the frame in one allocation (room for a 20-digit id).
func (e *Event) render() {
	line := e.data()
	b := make([]byte, 0, len(line)+len(e.Type)+48)
	b = append(b, "id: "...)
	b = strconv.AppendInt(b, e.Seq, 10)
	b = append(b, "\nevent: "...)
	b = append(b, e.Type...)
	b = append(b, "\ndata: "...)
	start := len(b)
	b = append(b, line...)
	e.line = b[start:len(b):len(b)]
	e.frame = append(b, "\n\n"...)
	e.data = nil
}

// Terminal reports whether the event ends its job's stream.
func (e *Event) Terminal() bool { return IsTerminal(e.Type) }

// IsTerminal reports whether events of type t end a job: completed, dlq and
// cancelled. A failed attempt is not terminal; the scheduler decides.
func IsTerminal(t schema.EventType) bool {
	return t == schema.EventCompleted || t == schema.EventDLQ || t == schema.EventCancelled
}

// Filter selects a subscriber's events within its tenant. Empty lists match
// everything; a list matches when the event's value is one of its members
// (for Tags, when the job has any of them).
type Filter struct {
	// JobID, when set, selects one job's events.
	JobID    string
	JobTypes []string
	Queues   []string
	Tags     []string
	Events   []schema.EventType
}

// Match reports whether e passes f. The tenant is checked by the hub.
func (f Filter) Match(e *Event) bool {
	if f.JobID != "" && e.JobID != f.JobID {
		return false
	}
	if len(f.Events) > 0 && !slices.Contains(f.Events, e.Type) {
		return false
	}
	if len(f.JobTypes) > 0 && !slices.Contains(f.JobTypes, e.JobType) {
		return false
	}
	if len(f.Queues) > 0 && !slices.Contains(f.Queues, e.Queue) {
		return false
	}
	if len(f.Tags) > 0 && !slices.ContainsFunc(e.Tags, func(t string) bool { return slices.Contains(f.Tags, t) }) {
		return false
	}
	return true
}

// Hub delivers published events to the subscribers of their tenant.
type Hub struct {
	bufSize int

	mu   sync.RWMutex
	subs map[string]map[*Sub]struct{} // by tenant
	n    int
}

// New returns a hub whose subscribers buffer at most bufSize events.
func New(bufSize int) *Hub {
	if bufSize < 1 {
		bufSize = 1
	}
	return &Hub{bufSize: bufSize, subs: map[string]map[*Sub]struct{}{}}
}

// Sub is one subscriber. Its methods are safe for concurrent use with the
// hub's Publish.
type Sub struct {
	tenant string
	filter Filter
	max    int
	ready  chan struct{}

	mu       sync.Mutex
	queue    []*Event
	overflow bool
}

// Subscribe registers a subscriber for tenant's events that pass f. Every
// event published after Subscribe returns reaches it (or overflows it).
func (h *Hub) Subscribe(tenant string, f Filter) *Sub {
	s := &Sub{tenant: tenant, filter: f, max: h.bufSize, ready: make(chan struct{}, 1)}
	h.mu.Lock()
	m := h.subs[tenant]
	if m == nil {
		m = map[*Sub]struct{}{}
		h.subs[tenant] = m
	}
	m[s] = struct{}{}
	h.n++
	h.mu.Unlock()
	return s
}

// Unsubscribe removes s; it is safe to call more than once.
func (h *Hub) Unsubscribe(s *Sub) {
	h.mu.Lock()
	defer h.mu.Unlock()
	m := h.subs[s.tenant]
	if _, ok := m[s]; !ok {
		return
	}
	delete(m, s)
	h.n--
	if len(m) == 0 {
		delete(h.subs, s.tenant)
	}
}

// Len returns the number of subscribers.
func (h *Hub) Len() int {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return h.n
}

// Publish hands events, in order, to every matching subscriber. It never
// blocks on a subscriber.
func (h *Hub) Publish(events []*Event) {
	h.mu.RLock()
	defer h.mu.RUnlock()
	for _, e := range events {
		for s := range h.subs[e.Tenant] {
			if s.filter.Match(e) {
				s.push(e)
			}
		}
	}
}

func (s *Sub) push(e *Event) {
	s.mu.Lock()
	switch {
	case s.overflow:
	case len(s.queue) >= s.max:
		s.overflow, s.queue = true, nil
	default:
		s.queue = append(s.queue, e)
	}
	s.mu.Unlock()
	select {
	case s.ready <- struct{}{}:
	default:
	}
}

// Ready is signalled when events (or an overflow) are waiting to be taken.
func (s *Sub) Ready() <-chan struct{} { return s.ready }

// Reset clears an overflow: events published from now on are queued again.
// The caller fetches what it missed from the log.
func (s *Sub) Reset() {
	s.mu.Lock()
	s.overflow, s.queue = false, nil
	s.mu.Unlock()
}

// Take returns the waiting events, oldest first, and whether the
// subscriber overflowed (then no events are returned: the subscriber fell
// too far behind and should be told so and disconnected). spare, if not
// nil, is a slice the caller no longer needs; the subscriber reuses it as
// its next queue.
func (s *Sub) Take(spare []*Event) (events []*Event, overflowed bool) {
	clear(spare)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.overflow {
		return nil, true
	}
	events, s.queue = s.queue, spare[:0]
	return events, false
}
