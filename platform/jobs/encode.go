package jobs

import (
	"encoding/json"
	"strconv"
	"time"

	"github.com/ferryhq/ferry/events/schema/jsonw"
)

// AppendJSON appends json.Marshal(j)'s bytes, written by hand: the API
// answers every submission with its job, and at a thousand single POSTs a
// second encoding/json's reflection was a sixth of the api's CPU per
// request (docs/performance.md, Round 13). The member order, omitempty and
// escaping are encoding/json's (package jsonw); FuzzAppendJSONMatchesMarshal
// holds the two together. The rare members (unique, concurrency) and any
// value json.Marshal refuses go through encoding/json, so its bytes and its
// errors stay the reference.
func (j *Job) AppendJSON(b []byte) ([]byte, error) {
	start := len(b)
	w := jobWriter{b: b}
	w.str(`{"id":`, j.ID)
	w.str(`,"tenant_id":`, j.TenantID)
	w.str(`,"type":`, j.Type)
	w.str(`,"queue":`, j.Queue)
	w.int(`,"priority":`, j.Priority)
	w.optStr(`,"pool":`, j.Pool)
	w.str(`,"status":`, string(j.Status))
	w.int(`,"attempt":`, j.Attempt)
	w.int(`,"max_attempts":`, j.MaxAttempts)
	w.raw(`,"payload":`, j.Payload)
	w.strs(`,"tags":`, j.Tags)
	w.time(`,"created_at":`, &j.CreatedAt)
	w.time(`,"scheduled_for":`, j.ScheduledFor)
	w.time(`,"started_at":`, j.StartedAt)
	w.time(`,"finished_at":`, j.FinishedAt)
	w.progress(j.Progress)
	w.raw(`,"result":`, j.Result)
	w.lastError(j.LastError)
	w.optStr(`,"trace_id":`, j.TraceID)
	w.optStr(`,"redriven_from":`, j.RedrivenFrom)
	if j.Unique != nil {
		w.marshal(`,"unique":`, j.Unique)
	}
	if j.Concurrency != nil {
		w.marshal(`,"concurrency":`, j.Concurrency)
	}
	w.optStr(`,"schedule_id":`, j.ScheduleID)
	w.optStr(`,"waiting":`, j.Waiting)
	if j.Deduplicated != nil {
		w.b = strconv.AppendBool(append(w.b, `,"deduplicated":`...), *j.Deduplicated)
	}
	if w.refused {
		out, err := json.Marshal(j)
		return append(b[:start], out...), err
	}
	return append(w.b, '}'), nil
}

// jobWriter appends a job's members; refused records a value it leaves to
// encoding/json (then AppendJSON encodes the whole job with it).
type jobWriter struct {
	b       []byte
	refused bool
}

func (w *jobWriter) str(key, s string) { w.b = jsonw.String(append(w.b, key...), s) }

func (w *jobWriter) optStr(key, s string) { w.b = jsonw.OptString(w.b, key, s) }

func (w *jobWriter) int(key string, n int) {
	w.b = strconv.AppendInt(append(w.b, key...), int64(n), 10)
}

// raw writes m as a json.RawMessage member without omitempty: null when
// empty.
func (w *jobWriter) raw(key string, m json.RawMessage) {
	var ok bool
	if w.b, ok = jsonw.Raw(append(w.b, key...), m); !ok {
		w.refused = true
	}
}

// strs writes a []string member: null when nil.
func (w *jobWriter) strs(key string, ss []string) {
	w.b = append(w.b, key...)
	if ss == nil {
		w.b = append(w.b, "null"...)
		return
	}
	w.b = append(w.b, '[')
	for i, s := range ss {
		if i > 0 {
			w.b = append(w.b, ',')
		}
		w.b = jsonw.String(w.b, s)
	}
	w.b = append(w.b, ']')
}

// time writes a time member: null when t is nil.
func (w *jobWriter) time(key string, t *time.Time) {
	w.b = append(w.b, key...)
	if t == nil {
		w.b = append(w.b, "null"...)
		return
	}
	var ok bool
	if w.b, ok = jsonw.Time(w.b, *t); !ok {
		w.refused = true
	}
}

func (w *jobWriter) progress(p *Progress) {
	w.b = append(w.b, `,"progress":`...)
	if p == nil {
		w.b = append(w.b, "null"...)
		return
	}
	var ok bool
	if w.b, ok = jsonw.Float(append(w.b, `{"percent":`...), p.Percent); !ok {
		w.refused = true
	}
	w.optStr(`,"message":`, p.Message)
	w.b = append(w.b, '}')
}

func (w *jobWriter) lastError(e *ErrorInfo) {
	w.b = append(w.b, `,"last_error":`...)
	if e == nil {
		w.b = append(w.b, "null"...)
		return
	}
	w.str(`{"class":`, e.Class)
	w.str(`,"message":`, e.Message)
	w.b = append(w.b, '}')
}

// marshal writes a member with encoding/json.
func (w *jobWriter) marshal(key string, v any) {
	out, err := json.Marshal(v)
	if err != nil {
		w.refused = true
		return
	}
	w.b = append(append(w.b, key...), out...)
}
