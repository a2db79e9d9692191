package schema

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
)

// agrees decodes value with decode and with encoding/json: both must
// refuse it, or both give the same T.
func agrees[T any](t *testing.T, name string, decode func([]byte) (T, error), value []byte) {
	t.Helper()
	got, err := decode(value)
	var want T
	wantErr := json.Unmarshal(value, &want)
	if (err == nil) != (wantErr == nil) {
		t.Fatalf("%q: %s error %v, encoding/json %v", value, name, err, wantErr)
	}
	if err == nil && !reflect.DeepEqual(got, want) {
		t.Fatalf("%q decodes to\n %#v\nwith %s, to\n %#v\nwith encoding/json", value, got, name, want)
	}
}

func specAgrees(t *testing.T, value []byte) { agrees(t, "UnmarshalSpec", UnmarshalSpec, value) }

func historyAgrees(t *testing.T, value []byte) {
	agrees(t, "UnmarshalHistory", UnmarshalHistory, value)
}

func marshalled(tb testing.TB, v any) []byte {
	tb.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// A spec and a history as json.Marshal writes them (what the scheduler
// keeps in Redis) take the fast path and decode as encoding/json decodes
// them; what the fast path leaves (null, an upper-cased key, a stray
// token) still decodes, or fails, as with encoding/json.
func TestUnmarshalSpecAndHistoryAgreeWithJSON(t *testing.T) {
	spec, hist := marshalled(t, exampleJob()), marshalled(t, exampleHistory())
	var s JobSpec
	if !fastDecode(&s, spec) {
		t.Errorf("the fast path left the marshalled spec %s", spec)
	}
	var h []Attempt
	if !fastDecode(&h, hist) {
		t.Errorf("the fast path left the marshalled history %s", hist)
	}
	for _, v := range [][]byte{spec, marshalled(t, JobSpec{}), []byte(`null`), []byte(`{"TYPE":"x"}`), []byte(`{"type":"x"} x`),
		[]byte(`{"type":1}`), []byte(`{"priority":1.5}`), bytes.ReplaceAll(spec, []byte(`,`), []byte(" ,\n"))} {
		specAgrees(t, v)
	}
	for _, v := range [][]byte{hist, []byte(`[]`), []byte(`null`), []byte(`[{"attempt":"1"}]`), []byte(`[{}] ]`)} {
		historyAgrees(t, v)
	}
}

func FuzzUnmarshalSpecMatchesJSON(f *testing.F) {
	spec := marshalled(f, exampleJob())
	f.Add(spec)
	f.Add(bytes.ReplaceAll(spec, []byte(`":`), []byte(`" : `)))
	f.Add([]byte(`{"payload":{"k":"\\"},"tags":["a\u00e9"]}`))
	f.Fuzz(func(t *testing.T, value []byte) { specAgrees(t, value) })
}

func FuzzUnmarshalHistoryMatchesJSON(f *testing.F) {
	f.Add(marshalled(f, exampleHistory()))
	f.Add([]byte(`[{"attempt":2,"class":"timeout","error":"\ud83d\ude00"}]`))
	f.Fuzz(func(t *testing.T, value []byte) { historyAgrees(t, value) })
}

// BenchmarkUnmarshalSpec: a spec as the scheduler reads it from Redis for
// each dispatch, decoded by UnmarshalSpec and by encoding/json.
//
//	go test -run '^$' -bench UnmarshalSpec ./events/schema
func BenchmarkUnmarshalSpec(b *testing.B) {
	spec := marshalled(b, exampleJob())
	b.Run("UnmarshalSpec", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := UnmarshalSpec(spec); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var v JobSpec
			if err := json.Unmarshal(spec, &v); err != nil {
				b.Fatal(err)
			}
		}
	})
}
