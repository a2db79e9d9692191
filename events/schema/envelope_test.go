package schema

import (
	"errors"
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
