package schema

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Header names of the CloudEvents Kafka binary binding.
const (
	HeaderSpecVersion = "ce_specversion"
	HeaderID          = "ce_id"
	HeaderSource      = "ce_source"
	HeaderType        = "ce_type"
	HeaderTime        = "ce_time"
	HeaderSubject     = "ce_subject"
	HeaderTenant      = "ce_tenant"
	HeaderContentType = "content-type"
	HeaderTraceParent = "traceparent"

	specVersion = "1.0"
	contentType = "application/json"
)

// Errors returned by Decode. Wrapped errors carry the detail.
var (
	ErrMissingHeader = errors.New("schema: missing CloudEvents header")
	ErrUnknownType   = errors.New("schema: unknown event type")
	ErrInvalidData   = errors.New("schema: invalid event data")
)

// Meta holds an event's CloudEvents attributes.
type Meta struct {
	ID          string
	Source      string
	Type        string
	Time        time.Time
	Subject     string
	Tenant      string
	TraceParent string
}

// Event is a decoded record: its attributes and its typed payload.
type Event struct {
	Meta
	// Data is one of this package's payload types, by value
	// (Enqueued, Started, …, Dispatch, WorkerStatus).
	Data Data
}

// NewEventID returns a fresh UUIDv7, time-ordered so ids sort by creation.
func NewEventID() string { return uuid.Must(uuid.NewV7()).String() }

// NewRecord encodes data as a CloudEvents binary-mode record for topic.
// source is the emitting service (e.g. "ferry/api"). The record key is the
// subject (the job id). A traceparent header is added by the client's
// tracing hook (kotel) from the context the record is produced with.
func NewRecord(topic, source string, data Data) (*kgo.Record, error) {
	value, err := json.Marshal(data)
	if err != nil {
		return nil, fmt.Errorf("schema: encode %s: %w", data.CEType(), err)
	}
	return NewRecordAt(topic, source, data, value, NewEventID(), time.Now().UTC()), nil
}

// NewRecordAt builds a record from an already-encoded value with the given id
// and time; golden tests and replays use it to get stable bytes.
func NewRecordAt(topic, source string, data Data, value []byte, id string, at time.Time) *kgo.Record {
	subject := data.Subject()
	headers := []kgo.RecordHeader{
		{Key: HeaderSpecVersion, Value: []byte(specVersion)},
		{Key: HeaderID, Value: []byte(id)},
		{Key: HeaderSource, Value: []byte(source)},
		{Key: HeaderType, Value: []byte(data.CEType())},
		{Key: HeaderTime, Value: []byte(at.UTC().Format(time.RFC3339Nano))},
		{Key: HeaderSubject, Value: []byte(subject)},
		{Key: HeaderTenant, Value: []byte(data.Tenant())},
		{Key: HeaderContentType, Value: []byte(contentType)},
	}
	return &kgo.Record{Topic: topic, Key: []byte(subject), Value: value, Headers: headers, Timestamp: at}
}

// Header returns the value of the first header named key, if any.
func Header(r *kgo.Record, key string) (string, bool) {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value), true
		}
	}
	return "", false
}

// DecodeMeta reads only the CloudEvents attributes of r. It is cheap and
// lets a consumer filter records (by tenant, by type) before decoding data.
func DecodeMeta(r *kgo.Record) (Meta, error) {
	var m Meta
	get := func(key string, required bool) (string, error) {
		v, ok := Header(r, key)
		if required && (!ok || v == "") {
			return "", fmt.Errorf("%w: %s", ErrMissingHeader, key)
		}
		return v, nil
	}
	var err error
	if v, err := get(HeaderSpecVersion, true); err != nil {
		return m, err
	} else if v != specVersion {
		return m, fmt.Errorf("%w: ce_specversion %q", ErrInvalidData, v)
	}
	if m.ID, err = get(HeaderID, true); err != nil {
		return m, err
	}
	if m.Source, err = get(HeaderSource, true); err != nil {
		return m, err
	}
	if m.Type, err = get(HeaderType, true); err != nil {
		return m, err
	}
	if m.Subject, err = get(HeaderSubject, false); err != nil {
		return m, err
	}
	if m.Tenant, err = get(HeaderTenant, false); err != nil {
		return m, err
	}
	m.TraceParent, _ = get(HeaderTraceParent, false)
	ts, err := get(HeaderTime, true)
	if err != nil {
		return m, err
	}
	if m.Time, err = time.Parse(time.RFC3339Nano, ts); err != nil {
		return m, fmt.Errorf("%w: ce_time %q", ErrInvalidData, ts)
	}
	// NewRecordAt writes ce_time in UTC, which RFC 3339 can only do for
	// years 0000–9999; refuse times it could not write back.
	if y := m.Time.UTC().Year(); y < 0 || y > 9999 {
		return m, fmt.Errorf("%w: ce_time %q is out of range", ErrInvalidData, ts)
	}
	return m, nil
}

// Decode reads a record written by NewRecord. Garbage gives an error, never
// a panic. Unknown JSON fields are ignored so older consumers keep reading
// events that gained optional fields.
func Decode(r *kgo.Record) (Event, error) {
	m, err := DecodeMeta(r)
	if err != nil {
		return Event{}, err
	}
	data, err := decodeData(m.Type, r.Value)
	if err != nil {
		return Event{}, err
	}
	if data.Subject() != m.Subject || data.Tenant() != m.Tenant {
		return Event{}, fmt.Errorf("%w: %s: headers (subject %q, tenant %q) disagree with data (%q, %q)",
			ErrInvalidData, m.Type, m.Subject, m.Tenant, data.Subject(), data.Tenant())
	}
	return Event{Meta: m, Data: data}, nil
}

func decodeData(ceType string, value []byte) (Data, error) {
	switch ceType {
	case EventEnqueued.CEType():
		return decodeAs[Enqueued](ceType, value)
	case EventStarted.CEType():
		return decodeAs[Started](ceType, value)
	case EventProgress.CEType():
		return decodeAs[Progress](ceType, value)
	case EventCompleted.CEType():
		return decodeAs[Completed](ceType, value)
	case EventFailed.CEType():
		return decodeAs[Failed](ceType, value)
	case EventDLQ.CEType():
		return decodeAs[DeadLettered](ceType, value)
	case EventCancelled.CEType():
		return decodeAs[Cancelled](ceType, value)
	case CETypeDispatch:
		return decodeAs[Dispatch](ceType, value)
	case CETypeWorkerStatus:
		return decodeAs[WorkerStatus](ceType, value)
	case CETypeBreakerChanged:
		return decodeAs[BreakerChanged](ceType, value)
	case CETypeScheduleChanged:
		return decodeAs[ScheduleChanged](ceType, value)
	case CETypeTenantChanged:
		return decodeAs[TenantChanged](ceType, value)
	}
	return nil, fmt.Errorf("%w: %q", ErrUnknownType, ceType)
}

// validator is implemented by payloads that check their own invariants.
type validator interface{ validate() error }

func decodeAs[T Data](ceType string, value []byte) (Data, error) {
	var v T
	if !fastDecode(&v, value) {
		v = *new(T) // the fast path may have written part of it
		// json.Unmarshal rejects anything after the value. (A json.Decoder
		// with a More check does not: More reports false before a stray '}'
		// or ']'.)
		if err := json.Unmarshal(value, &v); err != nil {
			return nil, fmt.Errorf("%w: %s: %v", ErrInvalidData, ceType, err)
		}
	}
	if val, ok := any(v).(validator); ok {
		if err := val.validate(); err != nil {
			return nil, fmt.Errorf("%w: %s: %v", ErrInvalidData, ceType, err)
		}
	}
	return v, nil
}

func (r JobRef) validate() error {
	switch {
	case r.JobID == "":
		return errors.New("job_id is required")
	case r.TenantID == "":
		return errors.New("tenant_id is required")
	case r.Attempt < 1:
		return fmt.Errorf("attempt must be ≥ 1, got %d", r.Attempt)
	}
	return nil
}

func (w WorkerStatus) validate() error {
	if w.WorkerID == "" || w.Pool == "" {
		return errors.New("worker_id and pool are required")
	}
	return nil
}
