package eventlog

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferryhq/ferry/events/schema"
)

func wireOf(data string) wireEvent {
	return wireEvent{ID: "01943b6e-8c2a-7f3d-9a1b-2c3d4e5f6a7b", Type: "completed",
		Time:  time.Date(2025, 1, 2, 3, 4, 5, 120000000, time.UTC),
		JobID: "01943b6e-0000-7000-8000-00000000a001", TenantID: "acme", Attempt: 3, Data: json.RawMessage(data)}
}

// renderWire gives json.Marshal's bytes for every valid data value: compact
// or not, with what json.Marshal escapes in the value or in the strings, or
// a time it refuses (then its error).
func TestRenderWireMatchesMarshal(t *testing.T) {
	odd := wireOf(`{}`)
	odd.ID, odd.TenantID = `a"<b>&`, "ténant\xff"
	farFuture := wireOf(`{}`)
	farFuture.Time = time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)
	cases := []wireEvent{
		wireOf(`{"job_id":"j","result":{"a":[1,2.5,null,true]},"s":"x\"y \\\" z"}`),
		wireOf(`{"s":"ünïcödé ✓ \u2028"}`),
		wireOf("{\"s\":\"\xff\"}"),
		wireOf(`"plain"`),
		wireOf(`{ "a" : 1 }`),
		wireOf("{\n\t\"a\":1\r\n}"),
		wireOf(`{"html":"<b>&amp;</b>"}`),
		wireOf("{\"ls\":\"a\u2028b\u2029\"}"),
		odd,
		farFuture,
	}
	for _, w := range cases {
		want, wantErr := json.Marshal(w)
		got, err := renderWire(w)
		if (err != nil) != (wantErr != nil) || !bytes.Equal(got, want) {
			t.Errorf("renderWire(%s) = %s, %v; json.Marshal gives %s, %v", w.Data, got, err, want, wantErr)
		}
	}
}

func FuzzRenderWire(f *testing.F) {
	f.Add("id", "acme", `{"a":"b"}`)
	f.Add("i<d", "t", `[1, 2]`)
	f.Add("id", "t", "{\"a\":\"\\\"\xe2\x80\xa8\"}")
	f.Fuzz(func(t *testing.T, id, tenant, data string) {
		if !json.Valid([]byte(data)) {
			return
		}
		w := wireOf(data)
		w.ID, w.TenantID = id, tenant
		want, wantErr := json.Marshal(w)
		got, err := renderWire(w)
		if (err != nil) != (wantErr != nil) || !bytes.Equal(got, want) {
			t.Fatalf("renderWire = %s, %v; json.Marshal gives %s, %v", got, err, want, wantErr)
		}
	})
}

// A record whose headers are fine but whose value is not a valid event is
// skipped, never logged: the data line is only rendered from a record that
// decoded, and a compact value passes through as it is.
func TestMalformedValuesAreNotLogged(t *testing.T) {
	l, sub, _ := newLog(t, 100, 0)
	good := rec(t, started("job-ok"))
	var recs []*kgo.Record
	for _, v := range []string{
		`{"job_id":"job-bad","tenant_id":"acme","attempt":1`,            // truncated
		`{"job_id":"job-bad","tenant_id":"acme","attempt":1}}`,          // trailing data
		`{"job_id":"job-bad","tenant_id":"acme","attempt":"1"}`,         // wrong type
		`{"job_id":"job-bad","tenant_id":"acme","attempt":0}`,           // invalid reference
		`{"job_id":"job-bad","tenant_id":"acme","attempt":1,"x":tru}`,   // bad literal
		`{"job_id":"job-bad","tenant_id":"globex","attempt":1}`,         // disagrees with headers
		"{\"job_id\":\"job-bad\",\"tenant_id\":\"acme\",\"attempt\":1,", // open object
	} {
		r := rec(t, started("job-bad"))
		r.Value = []byte(v)
		recs = append(recs, r)
	}
	l.Append(append(recs, good))
	evs, _ := sub.Take(nil)
	if len(evs) != 1 || evs[0].JobID != "job-ok" || evs[0].Type != schema.EventStarted {
		t.Fatalf("published %d events (%+v), want only job-ok's started", len(evs), evs)
	}
	if want := append([]byte(`,"data":`), good.Value...); !bytes.Contains(evs[0].Data(), append(want, '}')) {
		t.Errorf("data line %s does not carry the record's value %s as it is", evs[0].Data(), good.Value)
	}
}
