package schema

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// The fuzzer sees a record's headers as one byte string: one header per
// line, "key=value" (the value runs to the end of the line).

func encodeHeaders(hs []kgo.RecordHeader) []byte {
	var b bytes.Buffer
	for _, h := range hs {
		b.WriteString(h.Key)
		b.WriteByte('=')
		b.Write(h.Value)
		b.WriteByte('\n')
	}
	return b.Bytes()
}

func parseHeaders(b []byte) []kgo.RecordHeader {
	var hs []kgo.RecordHeader
	for line := range bytes.SplitSeq(b, []byte("\n")) {
		if len(line) == 0 {
			continue
		}
		k, v, _ := bytes.Cut(line, []byte("="))
		hs = append(hs, kgo.RecordHeader{Key: string(k), Value: bytes.Clone(v)})
	}
	return hs
}

// withHeader returns hs with key set to value (appended if absent);
// drop removes it instead.
func withHeader(hs []kgo.RecordHeader, key, value string, drop bool) []kgo.RecordHeader {
	var out []kgo.RecordHeader
	found := false
	for _, h := range hs {
		if h.Key == key {
			found = true
			if drop {
				continue
			}
			h = kgo.RecordHeader{Key: key, Value: []byte(value)}
		}
		out = append(out, h)
	}
	if !found && !drop {
		out = append(out, kgo.RecordHeader{Key: key, Value: []byte(value)})
	}
	return out
}

// FuzzDecode checks that Decode never panics and that whatever it accepts
// is well-formed: the data has the type the header names, agrees with the
// subject and tenant headers, and re-encodes to a value that decodes again
// to the same encoding (and through NewRecordAt to the same event).
func FuzzDecode(f *testing.F) {
	var values [][]byte
	for _, rt := range recordTypes() {
		rec := encodeExample(f, rt)
		hs, v := rec.Headers, rec.Value
		values = append(values, v)
		f.Add(encodeHeaders(hs), v)
		f.Add(encodeHeaders(withHeader(hs, HeaderTraceParent, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", false)), v)
		// Truncated and padded values.
		f.Add(encodeHeaders(hs), v[:len(v)/2])
		f.Add(encodeHeaders(hs), v[:len(v)-1])
		f.Add(encodeHeaders(hs), []byte(nil))
		f.Add(encodeHeaders(hs), append(bytes.Clone(v), '}'))
		f.Add(encodeHeaders(hs), append(bytes.Clone(v), ']'))
		f.Add(encodeHeaders(hs), append(bytes.Clone(v), " {}"...))
		f.Add(encodeHeaders(hs), append(bytes.Clone(v), "\n\t "...))
		// Headers missing, wrong or disagreeing with the data.
		for _, k := range []string{HeaderSpecVersion, HeaderID, HeaderSource, HeaderType, HeaderTime, HeaderSubject, HeaderTenant} {
			f.Add(encodeHeaders(withHeader(hs, k, "", true)), v)
		}
		f.Add(encodeHeaders(withHeader(hs, HeaderSpecVersion, "0.3", false)), v)
		f.Add(encodeHeaders(withHeader(hs, HeaderTime, "2025-01-02 03:04:05", false)), v)
		f.Add(encodeHeaders(withHeader(hs, HeaderTime, "0000-01-01T00:00:00+01:00", false)), v)
		f.Add(encodeHeaders(withHeader(hs, HeaderSubject, "someone-else", false)), v)
		f.Add(encodeHeaders(withHeader(hs, HeaderTenant, "tenant-other", false)), v)
		f.Add(encodeHeaders(withHeader(hs, HeaderType, "ferry.job.unknown.v1", false)), v)
		f.Add(append(encodeHeaders(hs), "ce_type=ferry.job.started.v1\n"...), v)
		f.Add(encodeHeaders(hs)[:len(encodeHeaders(hs))/2], v)
	}
	// Every value under every type, and JSON that is valid but wrong.
	for _, rt := range recordTypes() {
		hs := encodeExample(f, rt).Headers
		for _, v := range values {
			f.Add(encodeHeaders(hs), v)
		}
		for _, v := range []string{`null`, `{}`, `[]`, `"x"`, `1`, `{"job_id":null}`, `{"attempt":"1"}`,
			`{"job_id":"` + exJobID + `","tenant_id":"` + exTenantID + `","attempt":0}`,
			`{"job_id":"` + exJobID + `","tenant_id":"` + exTenantID + `","attempt":1,"job":{"timeout":5}}`,
			`{"job_id":"` + exJobID + `","tenant_id":"` + exTenantID + `","attempt":1,"job":{"timeout":null,"payload":null}}`,
			`{"JOB_ID":"` + exJobID + `","tenant_id":"` + exTenantID + `","attempt":1,"attempt":2,"at":"2025-01-02T03:04:05+01:00"}`,
			`{"worker_id":"worker-7","pool":"short","slots":1e400}`,
			"\xff\xfe{", "{\"job_id\":\"\xff\"}"} {
			f.Add(encodeHeaders(hs), []byte(v))
		}
	}
	f.Add([]byte(nil), []byte(nil))
	f.Add([]byte("\x00=\x00\n=\n==="), []byte("\x00"))

	f.Fuzz(func(t *testing.T, headers, value []byte) {
		rec := &kgo.Record{Topic: "fuzz", Value: value, Headers: parseHeaders(headers)}
		ev, err := Decode(rec)
		if err != nil {
			if !errors.Is(err, ErrMissingHeader) && !errors.Is(err, ErrUnknownType) && !errors.Is(err, ErrInvalidData) {
				t.Fatalf("Decode error %v wraps none of the package's sentinel errors", err)
			}
			if ev != (Event{}) {
				t.Fatalf("Decode returned %+v with error %v", ev, err)
			}
			return
		}
		meta, err := DecodeMeta(rec)
		sameTime := meta.Time.Equal(ev.Time)
		meta.Time = ev.Time
		if err != nil || meta != ev.Meta || !sameTime {
			t.Fatalf("DecodeMeta = %+v, %v; Decode gave %+v", meta, err, ev.Meta)
		}
		if ev.Data == nil {
			t.Fatal("Decode returned no data and no error")
		}
		if ev.Data.CEType() != ev.Type {
			t.Fatalf("ce_type %q decoded to %T (%s)", ev.Type, ev.Data, ev.Data.CEType())
		}
		if ev.Data.Subject() != ev.Subject || ev.Data.Tenant() != ev.Tenant {
			t.Fatalf("data (%q, %q) disagrees with headers (%q, %q)", ev.Data.Subject(), ev.Data.Tenant(), ev.Subject, ev.Tenant)
		}
		if l, ok := ev.Data.(Lifecycle); ok {
			if r := l.Ref(); r.JobID == "" || r.TenantID == "" || r.Attempt < 1 {
				t.Fatalf("accepted an invalid job reference %+v", r)
			}
		}

		// The data round-trips: its encoding decodes to data of the same
		// type whose encoding is the same bytes.
		first, err := json.Marshal(ev.Data)
		if err != nil {
			t.Fatalf("accepted data cannot be encoded: %v", err)
		}
		again, err := decodeData(ev.Type, first)
		if err != nil {
			t.Fatalf("re-encoded data %s does not decode: %v", first, err)
		}
		if reflect.TypeOf(again) != reflect.TypeOf(ev.Data) {
			t.Fatalf("re-decoded as %T, first as %T", again, ev.Data)
		}
		second, err := json.Marshal(again)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(first, second) {
			t.Fatalf("data does not round-trip:\n first %s\nsecond %s", first, second)
		}

		// And so does the whole record, through the encoder.
		rec2 := NewRecordAt("fuzz", ev.Source, ev.Data, first, ev.ID, ev.Time)
		ev2, err := Decode(rec2)
		if err != nil {
			t.Fatalf("re-encoded record does not decode: %v", err)
		}
		if ev2.ID != ev.ID || ev2.Source != ev.Source || ev2.Type != ev.Type || ev2.Subject != ev.Subject ||
			ev2.Tenant != ev.Tenant || !ev2.Time.Equal(ev.Time) {
			t.Fatalf("re-encoded record has attributes %+v, want %+v", ev2.Meta, ev.Meta)
		}
		if third, _ := json.Marshal(ev2.Data); !bytes.Equal(first, third) {
			t.Fatalf("re-encoded record's data is %s, want %s", third, first)
		}
	})
}

// TestFuzzSeedsReachEveryBranch guards the seed corpus: it must contain
// records Decode accepts for every type, not only garbage.
func TestFuzzSeedsReachEveryBranch(t *testing.T) {
	for _, rt := range recordTypes() {
		rec := encodeExample(t, rt)
		r := &kgo.Record{Value: rec.Value, Headers: parseHeaders(encodeHeaders(rec.Headers))}
		if _, err := Decode(r); err != nil {
			t.Errorf("%s: the seed built from the example does not decode: %v", rt.ceType, err)
		}
	}
}
