package schema

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"strings"
	"testing"
	"time"
)

// hotDecoders decode a value into each payload type fastEncode writes, by
// CloudEvents type.
var hotDecoders = map[string]func([]byte) (Data, error){
	EventEnqueued.CEType():  unmarshalData[Enqueued],
	CETypeDispatch:          unmarshalData[Dispatch],
	EventStarted.CEType():   unmarshalData[Started],
	EventProgress.CEType():  unmarshalData[Progress],
	EventCompleted.CEType(): unmarshalData[Completed],
	EventFailed.CEType():    unmarshalData[Failed],
}

func unmarshalData[T Data](b []byte) (Data, error) {
	v, err := unmarshal[T](b)
	return v, err
}

func isHot(d Data) bool { return hotDecoders[d.CEType()] != nil }

// fastMatches encodes data both ways. On a hot type the fast path writes
// json.Marshal's bytes, and gives up exactly when json.Marshal refuses the
// value; encodeData returns what json.Marshal returns, error included.
func fastMatches(t testing.TB, data Data) (taken bool) {
	t.Helper()
	want, wantErr := json.Marshal(data)
	got, ok := fastEncode(data)
	switch {
	case ok && wantErr != nil:
		t.Fatalf("%T: the fast path wrote %s, json.Marshal refuses the value: %v", data, got, wantErr)
	case ok && !bytes.Equal(got, want):
		t.Fatalf("%T: the fast path wrote\n %q\njson.Marshal writes\n %q", data, got, want)
	case !ok && wantErr == nil && isHot(data):
		t.Fatalf("%T: the fast path gave up on a value json.Marshal writes: %s", data, want)
	}
	enc, err := encodeData(data)
	if !bytes.Equal(enc, want) || fmt.Sprint(err) != fmt.Sprint(wantErr) {
		t.Fatalf("%T: encodeData = %q, %v; json.Marshal = %q, %v", data, enc, err, want, wantErr)
	}
	switch e := data.(type) {
	case Enqueued:
		specMatches(t, &e.Job)
	case *Enqueued:
		if e != nil {
			specMatches(t, &e.Job)
		}
	}
	return ok
}

// specMatches holds MarshalSpec (the scheduler's spec in Redis) to
// json.Marshal: the same bytes, or the same error.
func specMatches(t testing.TB, spec *JobSpec) {
	t.Helper()
	want, wantErr := json.Marshal(spec)
	got, err := MarshalSpec(spec)
	if !bytes.Equal(got, want) || fmt.Sprint(err) != fmt.Sprint(wantErr) {
		t.Fatalf("MarshalSpec = %q, %v; json.Marshal = %q, %v", got, err, want, wantErr)
	}
}

// Every example and every golden value is written as json.Marshal writes
// it, by the fast path for the hot types; so is each hot type's zero value.
func TestFastEncodeExamplesAndGolden(t *testing.T) {
	for _, rt := range recordTypes() {
		if taken := fastMatches(t, rt.example); taken != isHot(rt.example) {
			t.Errorf("%s: fast path taken: %v, want %v", rt.ceType, taken, isHot(rt.example))
		}
		decode := hotDecoders[rt.ceType]
		if decode == nil {
			continue
		}
		golden := goldenValue(t, rt.ceType)
		if got, _ := fastEncode(rt.example); !bytes.Equal(got, golden) {
			t.Errorf("%s: the fast path writes\n%s\nthe golden value is\n%s", rt.ceType, got, golden)
		}
		zero, err := decode([]byte(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		fastMatches(t, zero)
	}
}

// goldenValue is the record value of the golden file of ceType.
func goldenValue(t testing.TB, ceType string) []byte {
	t.Helper()
	b, err := os.ReadFile(goldenPath(ceType))
	if err != nil {
		t.Fatal(err)
	}
	var g goldenRecord
	if err := json.Unmarshal(b, &g); err != nil {
		t.Fatalf("%s: %v", goldenPath(ceType), err)
	}
	return g.compactValue(t)
}

// edgeStrings are strings encoding/json escapes, replaces or passes on.
var edgeStrings = []string{
	"", "plain", "\x00", "a\x00b", "\x01\x1f\x7f", "\b\f\n\r\t\"\\/", "<>&", "<script>a&&b</script>",
	"\u2028", "x\u2029y", "\u2027\u202a\u2020", "é✓😀\uFFFD\U0010FFFF",
	"\xff", "a\xffb\xfe", "\xe2\x80", "\xe2\x80\xa8\xe2", "\xed\xa0\x80", "\xc0\xaf", "\xf4\x90\x80\x80", "\x80",
	strings.Repeat("long <&> \u2028 é \x00 \xff ", 300),
}

// withStrings returns a value of every hot type with s in every string.
func withStrings(s string) []Data {
	ref := JobRef{JobID: s, TenantID: s, Attempt: 1}
	at := time.Unix(1735787045, 5).UTC()
	job := JobSpec{Type: s, Queue: s, Pool: s, Tags: []string{s, s},
		Concurrency: &Concurrency{Key: s}}
	hist := []Attempt{{Attempt: 1, Class: ErrorClass(s), Error: s, WorkerID: s}}
	return []Data{
		Enqueued{JobRef: ref, Job: job, Reason: s, Actor: s, IdempotencyKey: s, RequestHash: s,
			Unique: &Unique{Key: s, While: s}, RedrivenFrom: s, ScheduleID: s, History: hist},
		Dispatch{JobRef: ref, DispatchID: s, Job: job},
		Started{JobRef: ref, WorkerID: s, DispatchID: s, StartedAt: at},
		Progress{JobRef: ref, WorkerID: s, DispatchID: s, Message: s, At: at},
		Completed{JobRef: ref, WorkerID: s, DispatchID: s},
		Failed{JobRef: ref, WorkerID: s, DispatchID: s, Error: ErrorInfo{Class: ErrorClass(s), Message: s}},
	}
}

func TestFastEncodeStrings(t *testing.T) {
	for _, s := range edgeStrings {
		for _, d := range withStrings(s) {
			fastMatches(t, d)
		}
	}
}

// withTime returns a value of every hot type with tm in every time.
func withTime(tm time.Time) []Data {
	job := JobSpec{NotAfter: &tm}
	return []Data{
		Enqueued{Job: job, CreatedAt: tm, RunAt: tm, Unique: &Unique{Until: tm},
			History: []Attempt{{StartedAt: &tm, FinishedAt: &tm}}},
		Dispatch{Job: job, CreatedAt: tm, ReadyAt: tm, LeaseUntil: tm, NotBefore: &tm},
		Started{StartedAt: tm},
		Progress{At: tm},
		Completed{StartedAt: tm, FinishedAt: tm},
		Failed{StartedAt: tm, FinishedAt: tm},
	}
}

func TestFastEncodeTimes(t *testing.T) {
	ns := time.Date(2025, 1, 2, 3, 4, 5, 123456789, time.UTC)
	for _, c := range []struct {
		tm      time.Time
		refused bool
	}{
		{time.Time{}, false},
		{time.Unix(0, 0).UTC(), false},
		{ns, false},
		{ns.Truncate(time.Microsecond), false},
		{ns.Add(-123456788), false},
		{ns.In(time.FixedZone("IST", 5*3600+1800)), false},
		{ns.In(time.FixedZone("", -7*3600)), false},
		{ns.In(time.FixedZone("odd", 3600+61)), false},
		{ns.In(time.FixedZone("named UTC", 0)), false},
		{ns.In(time.FixedZone("", -(23*3600 + 59*60))), false},
		{time.Now(), false}, // with a monotonic reading
		{time.Date(0, 1, 1, 0, 0, 0, 0, time.UTC), false},
		{time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC), false},
		{time.Date(9999, 12, 31, 23, 30, 0, 0, time.UTC).In(time.FixedZone("", 3600)), true},
		{time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC), true},
		{time.Date(-1, 12, 31, 0, 0, 0, 0, time.UTC), true},
		{ns.In(time.FixedZone("", 24*3600)), true},
		{ns.In(time.FixedZone("", -100*3600)), true},
	} {
		for _, d := range withTime(c.tm) {
			if taken := fastMatches(t, d); taken == c.refused {
				t.Errorf("%T with %v: fast path taken: %v", d, c.tm, taken)
			}
		}
	}
}

func TestFastEncodeNumbers(t *testing.T) {
	for _, f := range []float64{0, math.Copysign(0, -1), 1, -1.5, 0.1, 42.5, 100, 1e-6, 9.99e-7, 1e-7, 1.5e-10,
		1e20, 1e21, 123456789e13, 5e-324, math.MaxFloat64, -math.MaxFloat64, math.NaN(), math.Inf(1), math.Inf(-1)} {
		fastMatches(t, Progress{Percent: f})
		fastMatches(t, Enqueued{Job: JobSpec{Backoff: &Backoff{Jitter: &f}}})
	}
	for _, n := range []int{0, 1, -1, math.MaxInt, math.MinInt} {
		fastMatches(t, Enqueued{JobRef: JobRef{Attempt: n}, Job: JobSpec{Priority: n, MaxAttempts: n,
			Concurrency: &Concurrency{Limit: n}}, History: []Attempt{{Attempt: n}}})
		fastMatches(t, Started{JobRef: JobRef{Attempt: n}})
	}
	for _, d := range []Duration{0, 1, -1, 999, 1000, 1500000, Duration(90 * time.Minute), math.MaxInt64, math.MinInt64} {
		fastMatches(t, Progress{Lease: d})
		fastMatches(t, Failed{RetryAfter: d})
		fastMatches(t, Dispatch{Job: JobSpec{Timeout: d, Backoff: &Backoff{Base: d, Max: d}}})
	}
}

// rawEdges are json.RawMessage values: encoding/json compacts and escapes
// the valid ones and refuses the others.
var rawEdges = []struct {
	raw     json.RawMessage
	refused bool
}{
	{nil, false},
	{json.RawMessage{}, false},
	{json.RawMessage(`{}`), false},
	{json.RawMessage("\t{ \"a\" : [ 1 ,\n2.5e-3 , true, null ] ,\r\"b\":{ } }\n "), false},
	{json.RawMessage(` "x y" `), false},
	{json.RawMessage(`"<a href='x'>&amp;</a>"`), false},
	{json.RawMessage(`{"<k>":"\u003c\"<\\"}`), false},
	{json.RawMessage("[\"\xe2\x80\xa8\", \"\xe2\x80\xa9x\", \"\xe2\x80\xaa\"]"), false},
	{json.RawMessage("\"\xff\xe2\x80 \xed\xa0\x80\""), false},
	{json.RawMessage(`"\ud800 \u0000 \\ \/"`), false},
	{json.RawMessage(`null`), false},
	{json.RawMessage(`-0.5E+10`), false},
	{json.RawMessage(`{`), true},
	{json.RawMessage(`nul`), true},
	{json.RawMessage(`1 2`), true},
	{json.RawMessage(`{"a":1,}`), true},
	{json.RawMessage("\"a\tb\""), true},
	{json.RawMessage(`<>`), true},
}

func TestFastEncodeRaw(t *testing.T) {
	for _, c := range rawEdges {
		for _, d := range []Data{Completed{Result: c.raw}, Enqueued{Job: JobSpec{Payload: c.raw}},
			Dispatch{Job: JobSpec{Payload: c.raw}}} {
			if taken := fastMatches(t, d); taken == c.refused {
				t.Errorf("%T with %q: fast path taken: %v", d, c.raw, taken)
			}
		}
	}
}

// Nil and empty slices and pointers to zero values, each as omitempty
// has it.
func TestFastEncodeEmptyAndNil(t *testing.T) {
	var zero time.Time
	var jitter float64
	for _, job := range []JobSpec{
		{Tags: nil}, {Tags: []string{}}, {Tags: []string{""}},
		{Backoff: &Backoff{}}, {Backoff: &Backoff{Jitter: &jitter}}, {Backoff: &Backoff{Max: 1}},
		{Concurrency: &Concurrency{}}, {NotAfter: &zero},
	} {
		fastMatches(t, Enqueued{Job: job})
		fastMatches(t, Dispatch{Job: job, NotBefore: &zero})
	}
	for _, h := range [][]Attempt{nil, {}, {{}}, {{}, {Attempt: 2, Class: ClassTimeout}}} {
		fastMatches(t, Enqueued{History: h, Unique: &Unique{}})
	}
}

// FuzzFastEncodeMatchesJSON holds the fast path to json.Marshal on every
// value encoding/json decodes into a hot type. Its seeds are the golden
// values and JSON spelling the strings, times and numbers at the edges.
func FuzzFastEncodeMatchesJSON(f *testing.F) {
	for _, rt := range recordTypes() {
		if hotDecoders[rt.ceType] != nil {
			f.Add(rt.ceType, goldenValue(f, rt.ceType))
		}
	}
	ref := `"job_id":"\u0000<&>\u2028\u2029\ud800\udfff\"\\","tenant_id":"é😀\ufffd","attempt":-9223372036854775808`
	for _, v := range []string{
		`{` + ref + `,"job":{"payload":` + "\t{\"a\" : \"<\u2028>\"}\n" + `,"tags":[],"backoff":{"jitter":1e-7},"not_after":"0000-01-01T00:00:00-23:59"}}`,
		`{` + ref + `,"created_at":"9999-12-31T23:59:59.999999999+23:59","history":[],"unique":{"key":"\u001f"}}`,
		`{` + ref + `,"percent":1e21,"message":"\b\f\n\r\t\u007f","lease":"-2562047h47m16.854775808s"}`,
		`{` + ref + `,"result":"\u2028","started_at":"2025-01-02T03:04:05.1+01:00"}`,
		`{` + ref + `,"error":{"class":"<>","message":"&"},"retry_after":"1ns"}`,
	} {
		for ceType := range hotDecoders {
			f.Add(ceType, []byte(v))
		}
	}
	f.Fuzz(func(t *testing.T, ceType string, value []byte) {
		decode := hotDecoders[ceType]
		if decode == nil {
			return
		}
		if d, err := decode(value); err == nil {
			fastMatches(t, d)
		}
	})
}

// FuzzFastEncodeValues holds the fast path to json.Marshal on Go values no
// JSON decodes to: invalid UTF-8, NaN, times beyond RFC 3339, invalid raw
// JSON. shape's bits choose which optional fields are set.
func FuzzFastEncodeValues(f *testing.F) {
	for _, s := range edgeStrings {
		f.Add(s, "x", []byte(`{"a":[1]}`), int64(-1), 0.5, int64(1735787045), int64(123456789), int32(0), uint16(0xffff))
	}
	for _, c := range rawEdges {
		f.Add("<>", "\u2028", []byte(c.raw), int64(1<<40), math.NaN(), int64(-62135596800), int64(0), int32(-3600), uint16(0x5555))
	}
	f.Add("\xff", "", []byte(nil), int64(math.MinInt64), math.Inf(1), int64(253402300800), int64(-1), int32(86400), uint16(0))
	f.Add("a", "b", []byte("1"), int64(0), 1e-7, int64(0), int64(0), int32(19800), uint16(0xaaaa))
	f.Fuzz(func(t *testing.T, s, u string, raw []byte, n int64, fl float64, sec, nsec int64, zone int32, shape uint16) {
		tm := time.Unix(sec, nsec).In(time.FixedZone("", int(zone)))
		for _, d := range fuzzValues(s, u, raw, n, fl, tm, shape) {
			fastMatches(t, d)
		}
	})
}

// fuzzValues builds a value of every hot type from FuzzFastEncodeValues'
// inputs; bit i of shape sets the i-th optional field.
func fuzzValues(s, u string, raw []byte, n int64, fl float64, tm time.Time, shape uint16) []Data {
	bit := func(i int) bool { return shape&(1<<i) != 0 }
	opt := func(i int, s string) string {
		if bit(i) {
			return s
		}
		return ""
	}
	var rawMsg json.RawMessage
	if bit(0) {
		rawMsg = raw
	}
	var tp *time.Time
	if bit(1) {
		tp = &tm
	}
	ref := JobRef{JobID: s, TenantID: u, Attempt: int(n)}
	d := Duration(n)
	job := JobSpec{Type: s, Queue: u, Priority: int(n), Payload: rawMsg, MaxAttempts: int(n >> 3),
		Timeout: d, NotAfter: tp, Pool: u}
	if bit(2) {
		job.Tags = []string{s, u}
	} else if bit(3) {
		job.Tags = []string{}
	}
	if bit(4) {
		job.Backoff = &Backoff{Base: d, Max: d / 2}
		if bit(5) {
			job.Backoff.Jitter = &fl
		}
	}
	if bit(6) {
		job.Concurrency = &Concurrency{Key: u, Limit: int(n)}
	}
	var hist []Attempt
	if bit(7) {
		hist = []Attempt{{Attempt: int(n), Class: ErrorClass(opt(8, s)), Error: opt(9, u), WorkerID: opt(10, s),
			StartedAt: tp, FinishedAt: &tm}, {}}
	} else if bit(8) {
		hist = []Attempt{}
	}
	var unique *Unique
	if bit(11) {
		unique = &Unique{Key: s, While: u, Until: tm}
	}
	return []Data{
		Enqueued{JobRef: ref, Job: job, CreatedAt: tm, RunAt: tm, Reason: u, Actor: opt(12, s),
			IdempotencyKey: opt(13, u), RequestHash: opt(14, s), Unique: unique, RedrivenFrom: opt(15, u),
			ScheduleID: opt(12, u), History: hist},
		Dispatch{JobRef: ref, DispatchID: u, Job: job, CreatedAt: tm, ReadyAt: tm, LeaseUntil: tm, NotBefore: tp},
		Started{JobRef: ref, WorkerID: s, DispatchID: u, StartedAt: tm},
		Progress{JobRef: ref, WorkerID: s, DispatchID: u, Percent: fl, Message: opt(9, u), At: tm, Lease: d},
		Completed{JobRef: ref, WorkerID: s, DispatchID: u, Result: rawMsg, StartedAt: tm, FinishedAt: tm},
		Failed{JobRef: ref, WorkerID: s, DispatchID: u, Error: ErrorInfo{Class: ErrorClass(u), Message: s},
			RetryAfter: d, StartedAt: tm, FinishedAt: tm},
	}
}

// BenchmarkNewRecord builds the record of each example, as a producer does
// per event: payload, id and headers. cpu-ns/op is the process's CPU time
// per record, garbage collection included.
func BenchmarkNewRecord(b *testing.B) {
	for _, rt := range recordTypes() {
		b.Run(rt.ceType, func(b *testing.B) {
			b.ReportAllocs()
			cpu := processCPU()
			for b.Loop() {
				if _, err := NewRecord(rt.topic, rt.source, rt.example); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(processCPU()-cpu)/float64(b.N), "cpu-ns/op")
		})
	}
}
