package schema

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferryhq/ferry/events/schema/jsonw"
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
func NewEventID() string {
	var id [36]byte
	return string(appendEventID(id[:0]))
}

// appendEventID appends a fresh event id (NewEventID's), so NewRecord can
// put it straight into its header without a string in between.
func appendEventID(b []byte) []byte { return appendUUID(b, uuid.Must(uuid.NewV7())) }

// A job mints five ids (its own and one per record: enqueued, dispatch,
// started, outcome). Without the pool each takes 16 bytes from crypto/rand
// through an io.Reader, a read and an allocation per id; with it uuid reads
// 4 KiB at a time under its own lock (about 110 ns and one allocation less
// per record, BenchmarkNewRecord; TestEventIDAllocatesNothing). The pool
// sits in this process's memory: fine for ids, which are not secrets (API
// keys, session and signing secrets come from crypto/rand directly, never
// from uuid). Set in init, before any id is minted, as uuid requires.
func init() { uuid.EnableRandPool() }

// appendUUID appends u in its canonical text form, as u.String() writes it.
func appendUUID(b []byte, u uuid.UUID) []byte {
	for i, c := range u {
		if i == 4 || i == 6 || i == 8 || i == 10 {
			b = append(b, '-')
		}
		b = append(b, jsonw.HexDigits[c>>4], jsonw.HexDigits[c&0xF])
	}
	return b
}

// NewRecord encodes data as a CloudEvents binary-mode record for topic.
// source is the emitting service (e.g. "ferry/api"). The record key is the
// subject (the job id). A traceparent header is added by the client's
// tracing hook (kotel) from the context the record is produced with.
func NewRecord(topic, source string, data Data) (*kgo.Record, error) {
	value, err := encodeData(data)
	if err != nil {
		return nil, fmt.Errorf("schema: encode %s: %w", data.CEType(), err)
	}
	var id [36]byte
	return newRecord(topic, source, data, value, appendEventID(id[:0]), time.Now().UTC()), nil
}

// NewRecordAt builds a record from an already-encoded value with the given id
// and time; golden tests and replays use it to get stable bytes.
func NewRecordAt(topic, source string, data Data, value []byte, id string, at time.Time) *kgo.Record {
	return newRecord(topic, source, data, value, id, at)
}

// recordAlloc is a record and its headers' array, allocated together: a
// producer makes one per event. The ninth header is room for the
// traceparent the tracing hook appends (kotel's RecordCarrier.Set), which
// would otherwise copy the eight to a new array.
type recordAlloc struct {
	rec     kgo.Record
	headers [9]kgo.RecordHeader
}

// newRecord is NewRecordAt for an id as text of either kind (NewRecord
// formats its id on the stack). The key and the header values are copied
// into one buffer instead of one allocation each.
func newRecord[ID string | []byte](topic, source string, data Data, value []byte, id ID, at time.Time) *kgo.Record {
	subject, tenant, ceType := data.Subject(), data.Tenant(), data.CEType()
	// RFC3339Nano is longer than any UTC time of a 4-digit year in it;
	// another year only costs buf a reallocation.
	buf := make([]byte, 0, 2*len(subject)+len(id)+len(source)+len(ceType)+len(tenant)+
		len(specVersion)+len(contentType)+len(time.RFC3339Nano))
	r := new(recordAlloc)
	var v [8][]byte
	buf, r.rec.Key = appendValue(buf, subject)
	buf, v[0] = appendValue(buf, specVersion)
	buf, v[1] = appendValue(buf, id)
	buf, v[2] = appendValue(buf, source)
	buf, v[3] = appendValue(buf, ceType)
	buf, v[5] = appendValue(buf, subject)
	buf, v[6] = appendValue(buf, tenant)
	buf, v[7] = appendValue(buf, contentType)
	start := len(buf)
	buf = at.UTC().AppendFormat(buf, time.RFC3339Nano)
	v[4] = buf[start:len(buf):len(buf)]
	for i, key := range [8]string{HeaderSpecVersion, HeaderID, HeaderSource, HeaderType,
		HeaderTime, HeaderSubject, HeaderTenant, HeaderContentType} {
		r.headers[i] = kgo.RecordHeader{Key: key, Value: v[i]}
	}
	r.rec.Topic, r.rec.Value, r.rec.Headers, r.rec.Timestamp = topic, value, r.headers[:8], at
	return &r.rec
}

// appendValue appends s to buf and returns buf and s's copy there, capped
// at its end so that appending to one value cannot overwrite the next.
func appendValue[T string | []byte](buf []byte, s T) (out, value []byte) {
	n := len(buf)
	buf = append(buf, s...)
	return buf, buf[n:len(buf):len(buf)]
}

// Header returns the value of the first header named key, if any.
func Header(r *kgo.Record, key string) (string, bool) {
	v, ok := headerBytes(r, key)
	return string(v), ok
}

// headerBytes is Header without the copy: the record's own bytes.
func headerBytes(r *kgo.Record, key string) ([]byte, bool) {
	for _, h := range r.Headers {
		if h.Key == key {
			return h.Value, true
		}
	}
	return nil, false
}

// DecodeMeta reads only the CloudEvents attributes of r. It is cheap and
// lets a consumer filter records (by tenant, by type) before decoding data.
func DecodeMeta(r *kgo.Record) (Meta, error) {
	codec.metaDecodes.Add(1)
	m, subject, tenant, err := decodeMeta(r)
	m.Subject, m.Tenant = string(subject), string(tenant)
	return m, err
}

// decodeMeta is DecodeMeta but for the subject and tenant, which it
// returns as the headers' bytes: Decode takes those strings from the data,
// once it checked they agree, instead of copying them twice.
func decodeMeta(r *kgo.Record) (m Meta, subject, tenant []byte, err error) {
	get := func(key string) ([]byte, error) {
		v, ok := headerBytes(r, key)
		if !ok || len(v) == 0 {
			return nil, fmt.Errorf("%w: %s", ErrMissingHeader, key)
		}
		return v, nil
	}
	v, err := get(HeaderSpecVersion)
	if err != nil {
		return m, nil, nil, err
	} else if string(v) != specVersion {
		return m, nil, nil, fmt.Errorf("%w: ce_specversion %q", ErrInvalidData, v)
	}
	if v, err = get(HeaderID); err != nil {
		return m, nil, nil, err
	}
	m.ID = string(v)
	if v, err = get(HeaderSource); err != nil {
		return m, nil, nil, err
	}
	m.Source = internSource(v)
	if v, err = get(HeaderType); err != nil {
		return m, nil, nil, err
	}
	m.Type = internType(v)
	subject, _ = headerBytes(r, HeaderSubject)
	tenant, _ = headerBytes(r, HeaderTenant)
	if v, ok := headerBytes(r, HeaderTraceParent); ok {
		m.TraceParent = string(v)
	}
	if v, err = get(HeaderTime); err != nil {
		return m, subject, tenant, err
	}
	if m.Time, err = parseTime(v); err != nil {
		return m, subject, tenant, err
	}
	return m, subject, tenant, nil
}

// parseTime reads the ce_time header.
func parseTime(v []byte) (time.Time, error) {
	t, err := time.Parse(time.RFC3339Nano, transientString(v))
	if err != nil {
		return time.Time{}, fmt.Errorf("%w: ce_time %q", ErrInvalidData, v)
	}
	// NewRecordAt writes ce_time in UTC, which RFC 3339 can only do for
	// years 0000–9999; refuse times it could not write back.
	if y := t.UTC().Year(); y < 0 || y > 9999 {
		return time.Time{}, fmt.Errorf("%w: ce_time %q is out of range", ErrInvalidData, v)
	}
	return t, nil
}

// knownSources are the usual ce_source values, shared rather than copied
// from every record.
var knownSources = []string{"ferry/api", "ferry/scheduler", "ferry/worker", "ferry/dlq"}

func internSource(v []byte) string {
	for _, s := range knownSources {
		if string(v) == s {
			return s
		}
	}
	return string(v)
}

// internType returns the ce_type v, shared with decoders' key when known.
func internType(v []byte) string {
	if d, ok := decoders[string(v)]; ok {
		return d.ceType
	}
	return string(v)
}

// Decode reads a record written by NewRecord. Garbage gives an error, never
// a panic. Unknown JSON fields are ignored so older consumers keep reading
// events that gained optional fields.
func Decode(r *kgo.Record) (Event, error) {
	codec.decodes.Add(1)
	m, subject, tenant, err := decodeMeta(r)
	if err != nil {
		return Event{}, err
	}
	data, err := decodeData(m.Type, r.Value)
	if err != nil {
		return Event{}, err
	}
	if data.Subject() != string(subject) || data.Tenant() != string(tenant) {
		return Event{}, fmt.Errorf("%w: %s: headers (subject %q, tenant %q) disagree with data (%q, %q)",
			ErrInvalidData, m.Type, subject, tenant, data.Subject(), data.Tenant())
	}
	m.Subject, m.Tenant = data.Subject(), data.Tenant()
	return Event{Meta: m, Data: data}, nil
}

// payloadDecoder decodes the payload of one CloudEvents type.
type payloadDecoder struct {
	ceType string
	decode func(ceType string, value []byte) (Data, error)
}

// decoders holds the payload decoder of every record type, by ce_type.
var decoders = map[string]payloadDecoder{}

func init() {
	for ceType, decode := range map[string]func(string, []byte) (Data, error){
		EventEnqueued.CEType():  decodeAs[Enqueued],
		EventStarted.CEType():   decodeAs[Started],
		EventProgress.CEType():  decodeAs[Progress],
		EventCompleted.CEType(): decodeAs[Completed],
		EventFailed.CEType():    decodeAs[Failed],
		EventDLQ.CEType():       decodeAs[DeadLettered],
		EventCancelled.CEType(): decodeAs[Cancelled],
		CETypeDispatch:          decodeAs[Dispatch],
		CETypeWorkerStatus:      decodeAs[WorkerStatus],
		CETypeBreakerChanged:    decodeAs[BreakerChanged],
		CETypeScheduleChanged:   decodeAs[ScheduleChanged],
		CETypeTenantChanged:     decodeAs[TenantChanged],
	} {
		decoders[ceType] = payloadDecoder{ceType: ceType, decode: decode}
	}
}

func decodeData(ceType string, value []byte) (Data, error) {
	if d, ok := decoders[ceType]; ok {
		return d.decode(ceType, value)
	}
	return nil, fmt.Errorf("%w: %q", ErrUnknownType, ceType)
}

// validator is implemented by payloads that check their own invariants.
type validator interface{ validate() error }

func decodeAs[T Data](ceType string, value []byte) (Data, error) {
	// v stays on the stack: the one copy made is the returned interface's.
	// (decodeValue would return a copy of it first: 3–7 % more per record
	// for the big payloads, BenchmarkDecode.)
	var v T
	if !fastDecode(&v, value) {
		var err error
		if v, err = unmarshal[T](value); err != nil {
			return nil, fmt.Errorf("%w: %s: %v", ErrInvalidData, ceType, err)
		}
	}
	var d Data = v
	if val, ok := d.(validator); ok {
		if err := val.validate(); err != nil {
			return nil, fmt.Errorf("%w: %s: %v", ErrInvalidData, ceType, err)
		}
	}
	return d, nil
}

// decodeValue decodes value into a fresh T as json.Unmarshal does: by the
// fast path (fastdecode.go) when T has one and value is in its subset, else
// with encoding/json from scratch (UnmarshalSpec, UnmarshalHistory).
func decodeValue[T any](value []byte) (T, error) {
	var v T
	if fastDecode(&v, value) {
		return v, nil
	}
	return unmarshal[T](value)
}

// unmarshal decodes value with encoding/json into a fresh T.
func unmarshal[T any](value []byte) (T, error) {
	var v T
	// json.Unmarshal rejects anything after the value. (A json.Decoder with
	// a More check does not: More reports false before a stray '}' or ']'.)
	err := json.Unmarshal(value, &v)
	return v, err
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
