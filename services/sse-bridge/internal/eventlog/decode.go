package eventlog

import (
	"cmp"
	"encoding/json"
	"log/slog"
	"slices"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferryhq/ferry/events/schema"
	"github.com/ferryhq/ferry/platform/background"
)

// wireEvent is the JSON of an SSE data line.
type wireEvent struct {
	ID       string          `json:"id"`
	Type     string          `json:"type"`
	Time     time.Time       `json:"time"`
	JobID    string          `json:"job_id"`
	TenantID string          `json:"tenant_id"`
	Attempt  int             `json:"attempt"`
	Data     json.RawMessage `json:"data"`
}

// logEvent is one lifecycle event on its way into the log.
type logEvent struct {
	id, tenant, job string
	attempt         int
	typ             schema.EventType
	at              time.Time
	spec            *schema.JobSpec // enqueued only: the job's attributes
	// value is the record's value (a copy: the record's buffer is the
	// fetch's), rendered into the SSE data line only when a client reads
	// the event (wireLine).
	value []byte
	// waitFor is the event type that must be logged first (awaits).
	waitFor schema.EventType
	// heldAt is when the event started waiting for its predecessor.
	heldAt time.Time
}

// awaits returns the event type that must be in the log, for the same job
// (and, but for enqueued, the same attempt), before an event of type t: a
// job's events travel on different topics and may be consumed out of
// order, but a stream must show enqueued → started → completed. "" for
// events that wait for nothing. (A failed of class expired, reported
// without a start, waits for nothing either; see decodeBatch.)
func awaits(t schema.EventType) schema.EventType {
	switch t {
	case schema.EventStarted:
		return schema.EventEnqueued
	case schema.EventProgress, schema.EventCompleted, schema.EventFailed:
		return schema.EventStarted
	}
	return ""
}

// decodeBatch decodes each lifecycle record of recs once into the event the
// log stores, and
// orders the batch by event time and then lifecycle rank: records of one
// fetch come from many partitions, in no useful order among themselves.
func decodeBatch(recs []*kgo.Record, log *slog.Logger) []logEvent {
	evs := make([]logEvent, 0, len(recs))
	for _, r := range recs {
		background.Step()
		ev, ok := decodeRecord(r, log)
		if ok {
			evs = append(evs, ev)
		}
	}
	slices.SortStableFunc(evs, func(a, b logEvent) int {
		if c := a.at.Compare(b.at); c != 0 {
			return c
		}
		pa, pb := schema.PositionOf(a.typ, a.attempt), schema.PositionOf(b.typ, b.attempt)
		return cmp.Or(cmp.Compare(pa.Attempt, pb.Attempt), cmp.Compare(pa.Phase, pb.Phase))
	})
	return evs
}

// decodeRecord decodes one record; false for records that are not
// lifecycle events or cannot be read.
func decodeRecord(r *kgo.Record, log *slog.Logger) (logEvent, bool) {
	e, err := schema.Decode(r)
	if err != nil {
		log.Warn("sse-bridge: skipping undecodable record", "topic", r.Topic, "offset", r.Offset, "err", err)
		return logEvent{}, false
	}
	lc, ok := e.Data.(schema.Lifecycle)
	if !ok {
		return logEvent{}, false
	}
	ref := lc.Ref()
	ev := logEvent{id: e.ID, tenant: ref.TenantID, job: ref.JobID, attempt: ref.Attempt,
		typ: lc.EventType(), at: e.Time, value: slices.Clone(r.Value), waitFor: awaits(lc.EventType())}
	switch d := lc.(type) {
	case schema.Enqueued:
		ev.spec = &d.Job
	case schema.Failed:
		if d.Error.Class == schema.ClassExpired {
			ev.waitFor = "" // not_after passed before the worker started it
		}
	}
	return ev, true
}

// wireLine returns the function that renders e's SSE data line, which
// hub.Event calls when the event is first written to a client. The data
// line is one line whatever the producer's formatting: renderWire compacts
// the value unless it is compact already. It cannot fail for a decoded
// record (Decode refuses a ce_time renderWire could not write); if it did,
// the line says so instead of breaking the stream. The function holds only
// what the line needs (not the enqueued spec the log event carries), for as
// long as the event is in the log unrendered.
func wireLine(e logEvent, log *slog.Logger) func() []byte {
	w := wireEvent{ID: e.id, Type: string(e.typ), Time: e.at.UTC(), JobID: e.job, TenantID: e.tenant,
		Attempt: e.attempt, Data: e.value}
	return func() []byte {
		wire, err := renderWire(w)
		if err != nil {
			log.Warn("sse-bridge: cannot render an event", "ce_id", w.ID, "err", err)
			return []byte(`{"id":` + strconv.Quote(w.ID) + `,"error":"unrenderable event"}`)
		}
		return wire
	}
}
