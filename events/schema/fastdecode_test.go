package schema

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// fastTypes are the payload types with a fast decoder, by CloudEvents type.
var fastTypes = map[string]func() any{
	EventEnqueued.CEType():  func() any { return new(Enqueued) },
	EventStarted.CEType():   func() any { return new(Started) },
	EventProgress.CEType():  func() any { return new(Progress) },
	EventCompleted.CEType(): func() any { return new(Completed) },
	EventFailed.CEType():    func() any { return new(Failed) },
	EventDLQ.CEType():       func() any { return new(DeadLettered) },
	EventCancelled.CEType(): func() any { return new(Cancelled) },
	CETypeDispatch:          func() any { return new(Dispatch) },
}

// fastAgrees decodes value as ceType both ways. When the fast path takes
// the value, encoding/json must accept it too and give the same result.
func fastAgrees(t *testing.T, ceType string, value []byte) (taken bool) {
	t.Helper()
	fast, slow := fastTypes[ceType](), fastTypes[ceType]()
	if !fastDecode(fast, value) {
		return false
	}
	if err := json.Unmarshal(value, slow); err != nil {
		t.Fatalf("%s: the fast path took %q, encoding/json refuses it: %v", ceType, value, err)
	}
	if !reflect.DeepEqual(fast, slow) {
		t.Fatalf("%s: %q decodes to\n %#v\nfast, to\n %#v\nwith encoding/json", ceType, value, fast, slow)
	}
	return true
}

// fastExamples are the examples of the types with a fast decoder, as
// json.Marshal writes them.
func fastExamples() []recordType {
	var out []recordType
	for _, rt := range recordTypes() {
		if fastTypes[rt.ceType] != nil {
			out = append(out, rt)
		}
	}
	return out
}

// The fast path takes every payload as json.Marshal writes it, minimal and
// fully populated.
func TestFastDecodeTakesMarshalledPayloads(t *testing.T) {
	for _, rt := range fastExamples() {
		full := encodeExample(t, rt).Value
		minimal, err := json.Marshal(reflect.New(reflect.TypeOf(rt.example)).Interface())
		if err != nil {
			t.Fatal(err)
		}
		if !fastAgrees(t, rt.ceType, full) {
			t.Errorf("%s: fast path refused the example %s", rt.ceType, full)
		}
		// A nil slice encodes to null, which the fast path leaves.
		if taken := fastAgrees(t, rt.ceType, minimal); taken == bytes.Contains(minimal, []byte("null")) {
			t.Errorf("%s: fast path took the zero value's encoding %s: %v", rt.ceType, minimal, taken)
		}
	}
	f := Failed{JobRef: exRef(1), Error: ErrorInfo{Class: ClassAppError, Message: "<boom> & \"ünïcode\" ✓\x00\n\u2028"}, RetryAfter: Duration(time.Second)}
	v, _ := json.Marshal(f)
	if !fastAgrees(t, EventFailed.CEType(), v) {
		t.Errorf("fast path refused %s", v)
	}
}

// Values at the edges of the fast path's subset: each is either taken, and
// then decodes exactly as with encoding/json, or left to encoding/json.
func TestFastDecodeEdges(t *testing.T) {
	ref := `"job_id":"j","tenant_id":"t","attempt":1`
	cases := []struct {
		ceType, value string
		taken         bool
	}{
		{CETypeDispatch, `{` + ref + `}`, true},
		{CETypeDispatch, " \t\r\n{ \"job_id\" : \"j\" ,\n\"attempt\":-0 , \"job\":{\"payload\" :\t{ \"a\" : [ 1 , {\"b\":\"}\"} ] } ,\"tags\":[ ]}}\n ", true},
		{CETypeDispatch, `{"job":{"payload":"s\"t\\r]"}}`, true},
		{CETypeDispatch, `{"job":{"payload":12.5e-3}}`, true},
		{CETypeDispatch, `{"job":{"payload":true}}`, true},
		{CETypeDispatch, `{"job":{"payload":{"a":"\u0000\ud800"}}}`, true},
		{CETypeDispatch, "{\"job\":{\"payload\":{\"a\":\"\xff\"}}}", true},
		{CETypeDispatch, `{"job":{"payload":null}}`, false},
		{CETypeDispatch, `{"job":{"payload":{"a":}}}`, false},
		{CETypeDispatch, `{"job":{"payload":{"a":1]}}`, false},
		{CETypeDispatch, `{"job":{"payload":tru}}`, false},
		{CETypeDispatch, `{"job":{"payload":01}}`, false},
		{CETypeDispatch, `{"job":{"payload":"open}}`, false},
		{CETypeDispatch, `{"job":{"tags":null}}`, false},
		{CETypeDispatch, `{"job":{"tags":["a",]}}`, false},
		{CETypeDispatch, `{"job":{"priority":1.0}}`, false},
		{CETypeDispatch, `{"job":{"priority":1e2}}`, false},
		{CETypeDispatch, `{"job":{"priority":01}}`, false},
		{CETypeDispatch, `{"job":{"priority":-}}`, false},
		{CETypeDispatch, `{"job":{"priority":99999999999999999999}}`, false},
		{CETypeDispatch, `{"job":{"priority":"1"}}`, false},
		{CETypeDispatch, `{"job":{"timeout":"5s"}}`, true},
		{CETypeDispatch, `{"job":{"timeout":5}}`, false},
		{CETypeDispatch, `{"job":{"timeout":"5 parsecs"}}`, false},
		{CETypeDispatch, `{"job":{"backoff":{"jitter":1e-2}}}`, true},
		{CETypeDispatch, `{"job":{"backoff":{"jitter":1e400}}}`, false},
		{CETypeDispatch, `{"job":{"backoff":{"jitter":.5}}}`, false},
		{CETypeDispatch, `{"job":{"backoff":{"jitter":5.}}}`, false},
		{CETypeDispatch, `{"job":{"not_after":"2025-01-02T03:04:05+01:00"}}`, true},
		{CETypeDispatch, `{"job":{"not_after":"2025-01-02 03:04:05"}}`, false},
		{CETypeDispatch, `{"created_at":"2025-01-02T03:04:05.123456789-07:30"}`, true},
		{CETypeDispatch, `{"JOB_ID":"j"}`, false},
		{CETypeDispatch, `{"job_id":"j","job_id":"k"}`, false},
		{CETypeDispatch, `{"job":{"type":"a"},"job":{"queue":"b"}}`, false},
		{CETypeDispatch, `{"unknown":1}`, false},
		{CETypeDispatch, `{"job_id":"j\u0041\"\\\/\b\f\n\r\t\u00e9\u2028"}`, true},
		{CETypeDispatch, `{"job_id":"\ud83d\ude00 \ud800 \ud800\u0041 \udc00\ud800x \uD800\uDBFF"}`, true},
		{CETypeDispatch, "{\"job_id\":\"\xff \xed\xa0\x80 \xe2\x82\"}", true},
		{CETypeDispatch, `{"job_id":"\x"}`, false},
		{CETypeDispatch, `{"job_id":"\'"}`, false},
		{CETypeDispatch, `{"job_id":"\u12G4"}`, false},
		{CETypeDispatch, `{"job_id":"\u12"}`, false},
		{CETypeDispatch, `{"job_id":"\"}`, false},
		{CETypeDispatch, `{"job_\u0069d":"j"}`, false},
		{CETypeDispatch, `{"created_at":"2025-01-02T03:04:05\u005a"}`, false},
		{CETypeDispatch, `{"job":{"timeout":"5\u0073"}}`, false},
		{CETypeDispatch, "{\"job_id\":\"a\tb\"}", false},
		{CETypeDispatch, `{"job_id":"j"}x`, false},
		{CETypeDispatch, `{"job_id":"j"} {}`, false},
		{CETypeDispatch, `{"job_id":"j"}}`, false},
		{CETypeDispatch, `{"job_id":"j",}`, false},
		{CETypeDispatch, `{"job_id":null}`, false},
		{CETypeDispatch, `{"job_id":"j"`, false},
		{CETypeDispatch, `null`, false},
		{CETypeDispatch, ``, false},
		{EventEnqueued.CEType(), `{"history":[],"unique":{"key":"k","while":"queued","until":"2025-01-02T03:04:05Z"}}`, true},
		{EventEnqueued.CEType(), `{"history":[{"attempt":1,"started_at":"2025-01-02T03:04:05Z"},{}]}`, true},
		{EventEnqueued.CEType(), `{"history":[null]}`, false},
		{EventCompleted.CEType(), `{"result":[1,"2",{"3":[]}]}`, true},
		{EventCompleted.CEType(), `{"result":"ok"}`, true},
		{EventProgress.CEType(), `{"percent":-0.5E+1,"lease":"1m"}`, true},
		{EventProgress.CEType(), `{"percent":1e309}`, false},
		{EventFailed.CEType(), `{"error":{"class":"timeout","message":"m"}}`, true},
		{EventFailed.CEType(), `{"error":{"class":"timeout","Message":"m"}}`, false},
		{EventCancelled.CEType(), `{"reason":"é","at":"2025-01-02T03:04:05Z"}`, true},
		{EventDLQ.CEType(), `{"history":[{"attempt":2}],"dead_at":"2025-01-02T03:04:05Z"}`, true},
	}
	for _, c := range cases {
		if got := fastAgrees(t, c.ceType, []byte(c.value)); got != c.taken {
			t.Errorf("%s %q: fast path took it: %v, want %v", c.ceType, c.value, got, c.taken)
		}
	}
}

// FuzzFastDecodeMatchesJSON holds the fast path to encoding/json: whatever
// it takes, encoding/json accepts and decodes to the same value.
func FuzzFastDecodeMatchesJSON(f *testing.F) {
	for _, rt := range fastExamples() {
		v := encodeExample(f, rt).Value
		f.Add(rt.ceType, v)
		f.Add(rt.ceType, bytes.ReplaceAll(v, []byte(`,`), []byte(" ,\n")))
		f.Add(rt.ceType, bytes.ReplaceAll(v, []byte(`":`), []byte(`" : `)))
	}
	f.Add(CETypeDispatch, []byte(`{"job_id":"a\"\u00e9\ud83d\ude00\ud800\uDC00x","job":{"payload":{"k":"\\"}}}`))
	f.Add(EventFailed.CEType(), []byte("{\"error\":{\"message\":\"\xff\xed\xa0\x80\t\"}}"))
	f.Fuzz(func(t *testing.T, ceType string, value []byte) {
		if fastTypes[ceType] == nil {
			return
		}
		fastAgrees(t, ceType, value)
	})
}

// Decode takes the fast path for the hot records and gives the same event
// as before; a value the fast path leaves still decodes, through
// encoding/json, with the same errors.
func TestDecodeFastAndSlowAgree(t *testing.T) {
	for _, rt := range recordTypes() {
		rec := encodeExample(t, rt)
		want, err := Decode(rec)
		if err != nil {
			t.Fatalf("%s: %v", rt.ceType, err)
		}
		// With a key upper-cased, only encoding/json takes it.
		slowValue := bytes.Replace(rec.Value, []byte(`"job_id"`), []byte(`"JOB_ID"`), 1)
		slow := &kgo.Record{Headers: rec.Headers, Value: slowValue}
		got, err := Decode(slow)
		if err != nil {
			t.Fatalf("%s: %v", rt.ceType, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: decoded through encoding/json to %+v, want %+v", rt.ceType, got, want)
		}
	}
	rec := encodeExample(t, recordTypes()[1]) // started
	rec.Value = []byte(strings.Replace(string(rec.Value), `"attempt":3`, `"attempt":1.5`, 1))
	_, err := Decode(rec)
	if err == nil || !strings.Contains(err.Error(), "cannot unmarshal number 1.5 into Go struct field Started.JobRef.attempt of type int") {
		t.Fatalf("Decode of a fractional attempt: %v, want encoding/json's error", err)
	}
}

// BenchmarkDecode decodes each example record (headers and payload); its
// cpu-ns/op is the process's CPU time per decode, garbage collection included.
func BenchmarkDecode(b *testing.B) {
	for _, rt := range recordTypes() {
		rec := encodeExample(b, rt)
		b.Run(rt.ceType, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(rec.Value)))
			cpu := processCPU()
			for b.Loop() {
				if _, err := Decode(rec); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(processCPU()-cpu)/float64(b.N), "cpu-ns/op")
		})
	}
}
