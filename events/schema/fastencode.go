package schema

// The fast path of NewRecord's payload encoding.
//
// json.Marshal walks a payload by reflection and calls the MarshalJSON of
// every time, Duration and json.RawMessage in it, each allocating; on the
// producers' hot records that was more than half of NewRecord's CPU.
// fastEncode writes the payload types of the attempt's path (enqueued,
// dispatch, started, progress, completed, failed) by hand, appending to one
// buffer, and writes exactly json.Marshal's bytes: the same member order
// and omitempty, encoding/json's string escaping (<, >, &, U+2028, U+2029,
// control characters, invalid UTF-8), its float format, and what each
// value's own MarshalJSON writes, compacted and escaped as encoding/json
// does. The bytes go on Kafka and into hash-chained audit rows, so "almost"
// is a bug: FuzzFastEncodeMatchesJSON holds the two together.
//
// A value json.Marshal refuses (a time RFC 3339 cannot write, a NaN, a
// RawMessage that is not JSON) makes the fast path give up, and encodeData
// calls json.Marshal for the whole value instead, so the error is
// encoding/json's own. So does a payload of another type: they are rare
// enough for encoding/json.

import (
	"bytes"
	"encoding/json"
	"strconv"
	"sync"
	"time"

	"github.com/ferryhq/ferry/events/schema/jsonw"
)

// encodeData encodes a record's payload: json.Marshal's bytes, fast for the
// hot types.
func encodeData(data Data) ([]byte, error) {
	codec.encodes.Add(1)
	if b, ok := fastEncode(data); ok {
		return b, nil
	}
	return json.Marshal(data)
}

// encodeBuffers holds the buffers payloads are written into before they
// are copied out at their exact size, as json.Marshal returns them; one
// that grew beyond maxPooledBuffer (a huge payload) is left to the GC.
var encodeBuffers = sync.Pool{New: func() any { return new([]byte) }}

const maxPooledBuffer = 64 << 10

// fastEncode returns json.Marshal(data) for the hot payload types, passed
// by value; false means data is another type or holds a value json.Marshal
// refuses, and the caller must use json.Marshal.
func fastEncode(data Data) ([]byte, bool) {
	buf := encodeBuffers.Get().(*[]byte)
	defer encodeBuffers.Put(buf)
	b, ok := appendHot((*buf)[:0], data)
	if cap(b) <= maxPooledBuffer {
		*buf = b
	}
	if !ok {
		return nil, false
	}
	return bytes.Clone(b), true
}

// MarshalSpec encodes a job's spec as json.Marshal does, through the hand
// encoder of the enqueued record's spec. The scheduler stores each job's
// spec in Redis as JSON, and encoding/json's reflection was ~1 % of
// ferry's CPU at full load there (docs/performance-history.md, Round 28).
func MarshalSpec(spec *JobSpec) ([]byte, error) {
	var e encoder
	b := e.jobSpec(nil, spec)
	if e.refused {
		return json.Marshal(spec)
	}
	return b, nil
}

// appendHot appends the encoding of data, false if it is not of a hot type
// or holds a value json.Marshal refuses.
func appendHot(b []byte, data Data) ([]byte, bool) {
	var e encoder
	switch v := data.(type) {
	case Enqueued:
		b = e.enqueued(b, &v)
	case Dispatch:
		b = e.dispatch(b, &v)
	case Started:
		b = e.started(b, &v)
	case Progress:
		b = e.progress(b, &v)
	case Completed:
		b = e.completed(b, &v)
	case Failed:
		b = e.failed(b, &v)
	default:
		return appendHotPointer(b, data)
	}
	return b, !e.refused
}

// appendHotPointer is appendHot for a pointer to a hot type, as the worker
// passes its attempt reports (a nil one is json.Marshal's "null": not hot).
func appendHotPointer(b []byte, data Data) ([]byte, bool) {
	switch v := data.(type) {
	case *Enqueued:
		return appendVia(b, v, (*encoder).enqueued)
	case *Dispatch:
		return appendVia(b, v, (*encoder).dispatch)
	case *Started:
		return appendVia(b, v, (*encoder).started)
	case *Progress:
		return appendVia(b, v, (*encoder).progress)
	case *Completed:
		return appendVia(b, v, (*encoder).completed)
	case *Failed:
		return appendVia(b, v, (*encoder).failed)
	}
	return b, false
}

// appendVia appends *v with the encoder's method for its type.
func appendVia[T any](b []byte, v *T, write func(*encoder, []byte, *T) []byte) ([]byte, bool) {
	if v == nil {
		return b, false
	}
	var e encoder
	b = write(&e, b, v)
	return b, !e.refused
}

// encoder remembers whether a value json.Marshal would refuse was met, so
// that the appenders, which take and return the bytes as strconv's do,
// need not each return an error too.
type encoder struct{ refused bool }

// appendRef opens an object with the members of an embedded JobRef.
func appendRef(b []byte, r *JobRef) []byte {
	b = jsonw.String(append(b, `{"job_id":`...), r.JobID)
	b = jsonw.String(append(b, `,"tenant_id":`...), r.TenantID)
	return strconv.AppendInt(append(b, `,"attempt":`...), int64(r.Attempt), 10)
}

// appendAttemptOf opens an object with the members the attempt reports
// (started, progress, completed, failed) begin with.
func appendAttemptOf(b []byte, r *JobRef, worker, dispatch string) []byte {
	b = appendRef(b, r)
	b = jsonw.String(append(b, `,"worker_id":`...), worker)
	return jsonw.String(append(b, `,"dispatch_id":`...), dispatch)
}

func (e *encoder) started(b []byte, v *Started) []byte {
	b = appendAttemptOf(b, &v.JobRef, v.WorkerID, v.DispatchID)
	b = e.time(append(b, `,"started_at":`...), v.StartedAt)
	return append(b, '}')
}

func (e *encoder) progress(b []byte, v *Progress) []byte {
	b = appendAttemptOf(b, &v.JobRef, v.WorkerID, v.DispatchID)
	b = e.float(append(b, `,"percent":`...), v.Percent)
	b = jsonw.OptString(b, `,"message":`, v.Message)
	b = e.time(append(b, `,"at":`...), v.At)
	b = appendOptDuration(b, `,"lease":`, v.Lease)
	return append(b, '}')
}

func (e *encoder) completed(b []byte, v *Completed) []byte {
	b = appendAttemptOf(b, &v.JobRef, v.WorkerID, v.DispatchID)
	b = e.optRaw(b, `,"result":`, v.Result)
	b = e.time(append(b, `,"started_at":`...), v.StartedAt)
	b = e.time(append(b, `,"finished_at":`...), v.FinishedAt)
	return append(b, '}')
}

func (e *encoder) failed(b []byte, v *Failed) []byte {
	b = appendAttemptOf(b, &v.JobRef, v.WorkerID, v.DispatchID)
	b = jsonw.String(append(b, `,"error":{"class":`...), string(v.Error.Class))
	b = jsonw.String(append(b, `,"message":`...), v.Error.Message)
	b = append(b, '}')
	b = appendOptDuration(b, `,"retry_after":`, v.RetryAfter)
	b = e.time(append(b, `,"started_at":`...), v.StartedAt)
	b = e.time(append(b, `,"finished_at":`...), v.FinishedAt)
	return append(b, '}')
}

func (e *encoder) dispatch(b []byte, v *Dispatch) []byte {
	b = appendRef(b, &v.JobRef)
	b = jsonw.String(append(b, `,"dispatch_id":`...), v.DispatchID)
	b = e.jobSpec(append(b, `,"job":`...), &v.Job)
	b = e.time(append(b, `,"created_at":`...), v.CreatedAt)
	b = e.time(append(b, `,"ready_at":`...), v.ReadyAt)
	b = e.time(append(b, `,"lease_until":`...), v.LeaseUntil)
	b = e.optTime(b, `,"not_before":`, v.NotBefore)
	return append(b, '}')
}

func (e *encoder) enqueued(b []byte, v *Enqueued) []byte {
	b = appendRef(b, &v.JobRef)
	b = e.jobSpec(append(b, `,"job":`...), &v.Job)
	b = e.time(append(b, `,"created_at":`...), v.CreatedAt)
	b = e.time(append(b, `,"run_at":`...), v.RunAt)
	b = jsonw.String(append(b, `,"reason":`...), v.Reason)
	b = jsonw.OptString(b, `,"actor":`, v.Actor)
	b = jsonw.OptString(b, `,"idempotency_key":`, v.IdempotencyKey)
	b = jsonw.OptString(b, `,"request_hash":`, v.RequestHash)
	if u := v.Unique; u != nil {
		b = jsonw.String(append(b, `,"unique":{"key":`...), u.Key)
		b = jsonw.String(append(b, `,"while":`...), u.While)
		b = append(e.time(append(b, `,"until":`...), u.Until), '}')
	}
	b = jsonw.OptString(b, `,"redriven_from":`, v.RedrivenFrom)
	b = jsonw.OptString(b, `,"schedule_id":`, v.ScheduleID)
	if len(v.History) > 0 {
		b = append(b, `,"history":[`...)
		for i := range v.History {
			if i > 0 {
				b = append(b, ',')
			}
			b = e.attempt(b, &v.History[i])
		}
		b = append(b, ']')
	}
	return append(b, '}')
}

func (e *encoder) attempt(b []byte, v *Attempt) []byte {
	b = strconv.AppendInt(append(b, `{"attempt":`...), int64(v.Attempt), 10)
	b = jsonw.OptString(b, `,"class":`, string(v.Class))
	b = jsonw.OptString(b, `,"error":`, v.Error)
	b = jsonw.OptString(b, `,"worker_id":`, v.WorkerID)
	b = e.optTime(b, `,"started_at":`, v.StartedAt)
	b = e.optTime(b, `,"finished_at":`, v.FinishedAt)
	return append(b, '}')
}

func (e *encoder) jobSpec(b []byte, v *JobSpec) []byte {
	b = jsonw.String(append(b, `{"type":`...), v.Type)
	b = jsonw.String(append(b, `,"queue":`...), v.Queue)
	b = strconv.AppendInt(append(b, `,"priority":`...), int64(v.Priority), 10)
	b = e.optRaw(b, `,"payload":`, v.Payload)
	b = strconv.AppendInt(append(b, `,"max_attempts":`...), int64(v.MaxAttempts), 10)
	b = appendOptDuration(b, `,"timeout":`, v.Timeout)
	b = e.optTime(b, `,"not_after":`, v.NotAfter)
	if len(v.Tags) > 0 {
		b = append(b, `,"tags":[`...)
		for i, tag := range v.Tags {
			if i > 0 {
				b = append(b, ',')
			}
			b = jsonw.String(b, tag)
		}
		b = append(b, ']')
	}
	b = jsonw.String(append(b, `,"pool":`...), v.Pool)
	if v.Backoff != nil {
		b = e.backoff(append(b, `,"backoff":`...), v.Backoff)
	}
	if c := v.Concurrency; c != nil {
		b = jsonw.String(append(b, `,"concurrency":{"key":`...), c.Key)
		b = strconv.AppendInt(append(b, `,"limit":`...), int64(c.Limit), 10)
		b = append(b, '}')
	}
	return append(b, '}')
}

// backoff writes a Backoff, all of whose members are omitempty: each is
// written after a comma, and the first comma becomes the opening brace.
func (e *encoder) backoff(b []byte, v *Backoff) []byte {
	start := len(b)
	b = appendOptDuration(b, `,"base":`, v.Base)
	b = appendOptDuration(b, `,"max":`, v.Max)
	if v.Jitter != nil {
		b = e.float(append(b, `,"jitter":`...), *v.Jitter)
	}
	if len(b) == start {
		return append(b, "{}"...)
	}
	b[start] = '{'
	return append(b, '}')
}

// appendOptDuration writes the member key with d as Duration.MarshalJSON
// does (json.Marshal of its String), unless d is zero: omitempty.
func appendOptDuration(b []byte, key string, d Duration) []byte {
	if d == 0 {
		return b
	}
	return jsonw.String(append(b, key...), time.Duration(d).String())
}

// time writes t as time.Time.MarshalJSON does (jsonw.Time).
func (e *encoder) time(b []byte, t time.Time) []byte {
	b, ok := jsonw.Time(b, t)
	e.refused = e.refused || !ok
	return b
}

// optTime writes the member key with *t, unless t is nil: omitempty.
func (e *encoder) optTime(b []byte, key string, t *time.Time) []byte {
	if t == nil {
		return b
	}
	return e.time(append(b, key...), *t)
}

// float writes f as encoding/json's float encoder does (jsonw.Float).
func (e *encoder) float(b []byte, f float64) []byte {
	b, ok := jsonw.Float(b, f)
	e.refused = e.refused || !ok
	return b
}

// optRaw writes the member key with m as encoding/json writes a
// json.RawMessage, unless m is empty (omitempty). Invalid JSON is refused.
func (e *encoder) optRaw(b []byte, key string, m json.RawMessage) []byte {
	if len(m) == 0 {
		return b
	}
	out, ok := jsonw.Raw(append(b, key...), m)
	if !ok {
		e.refused = true
		return b
	}
	return out
}
