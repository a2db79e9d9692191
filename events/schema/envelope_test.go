package schema

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kgo"
)

func TestNewRecord(t *testing.T) {
	data := Started{JobRef: exRef(1), WorkerID: "w", DispatchID: "d", StartedAt: time.Now().UTC()}
	before := time.Now()
	rec, err := NewRecord(Topics{}.Lifecycle(EventStarted), "ferry/worker", data)
	if err != nil {
		t.Fatal(err)
	}
	if string(rec.Key) != exJobID || rec.Topic != "ferry.jobs.started" {
		t.Errorf("key %q topic %q", rec.Key, rec.Topic)
	}
	ev, err := Decode(rec)
	if err != nil {
		t.Fatal(err)
	}
	id, err := uuid.Parse(ev.ID)
	if err != nil || id.Version() != 7 {
		t.Errorf("ce_id %q is not a UUIDv7 (%v)", ev.ID, err)
	}
	if ev.Time.Before(before.Add(-time.Second)) || ev.Time.Location() != time.UTC {
		t.Errorf("ce_time %v", ev.Time)
	}
	if !ev.Data.(Started).StartedAt.Equal(data.StartedAt) {
		t.Errorf("data %+v, want %+v", ev.Data, data)
	}
	if a, b := NewEventID(), NewEventID(); a >= b {
		t.Errorf("event ids do not sort by creation: %s then %s", a, b)
	}
}

func TestDecodeTraceParent(t *testing.T) {
	rec := encodeExample(t, recordTypes()[0])
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: HeaderTraceParent, Value: []byte(tp)})
	m, err := DecodeMeta(rec)
	if err != nil || m.TraceParent != tp {
		t.Errorf("DecodeMeta = %+v, %v", m, err)
	}
}

func TestDecodeErrors(t *testing.T) {
	started := recordTypes()[1]
	if started.ceType != EventStarted.CEType() {
		t.Fatal("recordTypes order changed")
	}
	base := func() *kgo.Record { return encodeExample(t, started) }
	set := func(key, value string) func(*kgo.Record) {
		return func(r *kgo.Record) { r.Headers = withHeader(r.Headers, key, value, false) }
	}
	drop := func(key string) func(*kgo.Record) {
		return func(r *kgo.Record) { r.Headers = withHeader(r.Headers, key, "", true) }
	}
	value := func(v string) func(*kgo.Record) { return func(r *kgo.Record) { r.Value = []byte(v) } }
	for _, tc := range []struct {
		name string
		edit func(*kgo.Record)
		want error
	}{
		{"no specversion", drop(HeaderSpecVersion), ErrMissingHeader},
		{"specversion 0.3", set(HeaderSpecVersion, "0.3"), ErrInvalidData},
		{"no id", drop(HeaderID), ErrMissingHeader},
		{"empty id", set(HeaderID, ""), ErrMissingHeader},
		{"no source", drop(HeaderSource), ErrMissingHeader},
		{"no type", drop(HeaderType), ErrMissingHeader},
		{"no time", drop(HeaderTime), ErrMissingHeader},
		{"bad time", set(HeaderTime, "yesterday"), ErrInvalidData},
		{"time out of range", set(HeaderTime, "0000-01-01T00:00:00+01:00"), ErrInvalidData},
		{"unknown type", set(HeaderType, "ferry.job.started.v2"), ErrUnknownType},
		{"subject disagrees", set(HeaderSubject, "other-job"), ErrInvalidData},
		{"no subject", drop(HeaderSubject), ErrInvalidData},
		{"tenant disagrees", set(HeaderTenant, "tenant-other"), ErrInvalidData},
		{"empty value", value(""), ErrInvalidData},
		{"null value", value("null"), ErrInvalidData},
		{"truncated value", func(r *kgo.Record) { r.Value = r.Value[:len(r.Value)-1] }, ErrInvalidData},
		{"trailing value", func(r *kgo.Record) { r.Value = append(r.Value, " {}"...) }, ErrInvalidData},
		{"trailing brace", func(r *kgo.Record) { r.Value = append(r.Value, '}') }, ErrInvalidData},
		{"trailing bracket", func(r *kgo.Record) { r.Value = append(r.Value, ']') }, ErrInvalidData},
		{"attempt 0", value(`{"job_id":"` + exJobID + `","tenant_id":"` + exTenantID + `","attempt":0}`), ErrInvalidData},
		{"no tenant_id", value(`{"job_id":"` + exJobID + `","attempt":1}`), ErrInvalidData},
		{"attempt as string", value(`{"job_id":"` + exJobID + `","tenant_id":"` + exTenantID + `","attempt":"1"}`), ErrInvalidData},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := base()
			tc.edit(r)
			ev, err := Decode(r)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Decode = %+v, %v; want %v", ev, err, tc.want)
			}
		})
	}
	// Trailing whitespace is not data.
	r := base()
	r.Value = append(r.Value, " \n"...)
	if _, err := Decode(r); err != nil {
		t.Errorf("trailing whitespace: %v", err)
	}
}

func TestDecodeWorkerStatusNeedsWorkerAndPool(t *testing.T) {
	ws := recordTypes()[8]
	for _, v := range []string{`{"pool":"short"}`, `{"worker_id":"worker-7"}`} {
		rec := encodeExample(t, ws)
		rec.Value = []byte(v)
		if _, err := Decode(rec); !errors.Is(err, ErrInvalidData) {
			t.Errorf("%s: err = %v", v, err)
		}
	}
}

// referenceRecordAt is NewRecordAt as it was written before its values
// shared one buffer: the record it builds is the one NewRecordAt must.
func referenceRecordAt(topic, source string, data Data, value []byte, id string, at time.Time) *kgo.Record {
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

func sameRecord(t *testing.T, got, want *kgo.Record) {
	t.Helper()
	if got.Topic != want.Topic || !bytes.Equal(got.Key, want.Key) || !bytes.Equal(got.Value, want.Value) ||
		got.Timestamp != want.Timestamp || !reflect.DeepEqual(got.Headers, want.Headers) {
		t.Errorf("record\n %+v\nwant\n %+v", got, want)
	}
}

func TestNewRecordAtMatchesReference(t *testing.T) {
	times := []time.Time{goldenTime, {}, time.Now(), goldenTime.In(time.FixedZone("", -7*3600)),
		time.Date(12345, 6, 7, 8, 9, 10, 11, time.UTC), time.Date(-5, 1, 1, 0, 0, 0, 0, time.UTC)}
	ids := []string{goldenID, "", "x", strings.Repeat("long-id ", 20)}
	for _, rt := range recordTypes() {
		value, _ := json.Marshal(rt.example)
		for i, at := range times {
			id := ids[i%len(ids)]
			got := NewRecordAt(rt.topic, rt.source, rt.example, value, id, at)
			sameRecord(t, got, referenceRecordAt(rt.topic, rt.source, rt.example, value, id, at))
		}
	}
}

// NewRecord writes json.Marshal's value and the headers NewRecordAt always
// wrote, with a fresh id.
func TestNewRecordMatchesReference(t *testing.T) {
	for _, rt := range recordTypes() {
		rec, err := NewRecord(rt.topic, rt.source, rt.example)
		if err != nil {
			t.Fatal(err)
		}
		id, _ := Header(rec, HeaderID)
		if u, err := uuid.Parse(id); err != nil || u.Version() != 7 || u.String() != id {
			t.Errorf("%s: ce_id %q is not a canonical UUIDv7 (%v)", rt.ceType, id, err)
		}
		value, _ := json.Marshal(rt.example)
		sameRecord(t, rec, referenceRecordAt(rt.topic, rt.source, rt.example, value, id, rec.Timestamp))
	}
	if _, err := NewRecord("t", "s", Started{StartedAt: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)}); err == nil ||
		!strings.Contains(err.Error(), "schema: encode ferry.job.started.v1: json: error calling MarshalJSON for type time.Time") {
		t.Errorf("NewRecord of a time json.Marshal refuses: %v, want its error", err)
	}
}

// The key and header values share one buffer: appending to one must not
// overwrite the next. The headers have room for the traceparent.
func TestNewRecordValuesDoNotOverlap(t *testing.T) {
	rec, err := NewRecord("t", "ferry/worker", Started{JobRef: exRef(1)})
	if err != nil {
		t.Fatal(err)
	}
	values := func() [][]byte {
		v := [][]byte{rec.Key}
		for _, h := range rec.Headers {
			v = append(v, h.Value)
		}
		return v
	}
	var want [][]byte
	for _, v := range values() {
		want = append(want, append(bytes.Clone(v), '+'))
	}
	rec.Key = append(rec.Key, '+')
	for i, h := range rec.Headers {
		rec.Headers[i].Value = append(h.Value, '+')
	}
	got := values()
	if !reflect.DeepEqual(got, want) {
		t.Errorf("after appending to each value: %q, want %q", got, want)
	}
	first := &rec.Headers[0]
	rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: HeaderTraceParent})
	if &rec.Headers[0] != first {
		t.Error("adding the traceparent header copied the headers")
	}
}

func TestAppendUUID(t *testing.T) {
	ids := []uuid.UUID{uuid.Nil, uuid.Max}
	for range 100 {
		ids = append(ids, uuid.Must(uuid.NewV7()), uuid.New())
	}
	for _, u := range ids {
		if got := string(appendUUID([]byte("x"), u)); got != "x"+u.String() {
			t.Errorf("appendUUID(%v) = %q", u, got)
		}
	}
}

var ceTypeSink string

func TestEventTypeCEType(t *testing.T) {
	for et, want := range map[EventType]string{EventEnqueued: "ferry.job.enqueued.v1", EventDLQ: "ferry.job.dlq.v1",
		EventCancelled: "ferry.job.cancelled.v1", "unknown": "ferry.job.unknown.v1", "": "ferry.job..v1"} {
		if got := et.CEType(); got != want {
			t.Errorf("%q.CEType() = %q, want %q", et, got, want)
		}
	}
	if n := testing.AllocsPerRun(10, func() { ceTypeSink = EventStarted.CEType() }); n != 0 {
		t.Errorf("CEType of a known event allocates %v times", n)
	}
}

// TestEventIDAllocatesNothing: minting an id into a buffer takes its
// randomness from uuid's pool (EnableRandPool in this package's init), not
// a 16-byte read from crypto/rand per id, which allocates. Ids must stay
// distinct and version 7.
func TestEventIDAllocatesNothing(t *testing.T) {
	var buf [36]byte
	if n := testing.AllocsPerRun(100, func() { appendEventID(buf[:0]) }); n != 0 {
		t.Errorf("minting an event id allocates %v times", n)
	}
	seen := map[string]bool{}
	for range 10000 {
		id := NewEventID()
		u, err := uuid.Parse(id)
		if err != nil || u.Version() != 7 || seen[id] {
			t.Fatalf("id %q: version %v, err %v, repeated %v", id, u.Version(), err, seen[id])
		}
		seen[id] = true
	}
}
