package schema

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/twmb/franz-go/pkg/kgo"
)

// update rewrites the golden records and the compatibility snapshots from
// the current code: go test -run 'TestGolden|TestCompat' -update.
var update = flag.Bool("update", false, "rewrite testdata/golden and testdata/compat from the current code")

// The fixed CloudEvents id and time of every golden record.
const goldenID = "01943b6e-8c2a-7f3d-9a1b-2c3d4e5f6a7b"

var goldenTime = time.Date(2025, 1, 2, 3, 4, 5, 123456789, time.UTC)

// recordType is one kind of record this package encodes, with a fully
// populated example: every field, nested ones included, is set, so the
// golden record shows (and the schema is checked against) all of them.
type recordType struct {
	ceType  string
	topic   string
	source  string
	example Data
}

func ts(s string) time.Time {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		panic(err)
	}
	return t
}

func tsp(s string) *time.Time { t := ts(s); return &t }

func exampleJob() JobSpec {
	return JobSpec{
		Type:        "email.send",
		Queue:       "default",
		Priority:    3,
		Payload:     json.RawMessage(`{"template":"welcome","to":"ada@example.com","vars":{"name":"Ada","n":[1,2.5,null,true]}}`),
		MaxAttempts: 5,
		Timeout:     Duration(90 * time.Second),
		NotAfter:    tsp("2025-01-03T00:00:00Z"),
		Tags:        []string{"onboarding", "email"},
		Pool:        PoolShort,
		Backoff:     &Backoff{Base: Duration(1500 * time.Millisecond), Max: Duration(5 * time.Minute), Jitter: new(0.1)},
		Concurrency: &Concurrency{Key: "customer-42", Limit: 2},
	}
}

func exampleHistory() []Attempt {
	return []Attempt{
		{Attempt: 1, Class: ClassAppError, Error: "smtp: 451 try again later", WorkerID: "worker-7",
			StartedAt: tsp("2025-01-02T03:00:00.5Z"), FinishedAt: tsp("2025-01-02T03:00:02.25Z")},
		{Attempt: 2, Class: ClassTimeout, Error: "handler exceeded its 1m30s timeout", WorkerID: "worker-3",
			StartedAt: tsp("2025-01-02T03:01:00Z"), FinishedAt: tsp("2025-01-02T03:02:30Z")},
	}
}

const (
	exJobID    = "01943b6e-0000-7000-8000-00000000a001"
	exTenantID = "tenant-acme"
)

func exRef(attempt int) JobRef {
	return JobRef{JobID: exJobID, TenantID: exTenantID, Attempt: attempt}
}

// recordTypes lists every record type with its example, in a fixed order.
func recordTypes() []recordType {
	var topics Topics
	created := ts("2025-01-02T02:59:59.987654321Z")
	return []recordType{
		{EventEnqueued.CEType(), topics.Lifecycle(EventEnqueued), "ferry/scheduler", Enqueued{
			JobRef:         exRef(3),
			Job:            exampleJob(),
			CreatedAt:      created,
			RunAt:          ts("2025-01-02T03:04:09Z"),
			Reason:         ReasonRetry,
			Actor:          "key_01943b6e",
			IdempotencyKey: "signup-42",
			RequestHash:    "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
			Unique:         &Unique{Key: "welcome-email:user-7", While: UniqueQueued, Until: ts("2025-01-03T02:59:59.987654Z")},
			RedrivenFrom:   "01943b6e-0000-7000-8000-00000000a000",
			ScheduleID:     "sch_01943b6e00007000800000000000c001",
			History:        exampleHistory(),
		}},
		{EventStarted.CEType(), topics.Lifecycle(EventStarted), "ferry/worker", Started{
			JobRef:     exRef(3),
			WorkerID:   "worker-7",
			DispatchID: "01943b6e-0000-7000-8000-0000000d0003",
			StartedAt:  ts("2025-01-02T03:04:10.001Z"),
		}},
		{EventProgress.CEType(), topics.Lifecycle(EventProgress), "ferry/worker", Progress{
			JobRef:     exRef(3),
			WorkerID:   "worker-7",
			DispatchID: "01943b6e-0000-7000-8000-0000000d0003",
			Percent:    42.5,
			Message:    "rendered template, sending",
			At:         ts("2025-01-02T03:04:11Z"),
			Lease:      Duration(5 * time.Minute),
		}},
		{EventCompleted.CEType(), topics.Lifecycle(EventCompleted), "ferry/worker", Completed{
			JobRef:     exRef(3),
			WorkerID:   "worker-7",
			DispatchID: "01943b6e-0000-7000-8000-0000000d0003",
			Result:     json.RawMessage(`{"message_id":"abc.123@mail.example.com","accepted":["ada@example.com"]}`),
			StartedAt:  ts("2025-01-02T03:04:10.001Z"),
			FinishedAt: ts("2025-01-02T03:04:12.5Z"),
		}},
		{EventFailed.CEType(), topics.Lifecycle(EventFailed), "ferry/worker", Failed{
			JobRef:     exRef(3),
			WorkerID:   "worker-7",
			DispatchID: "01943b6e-0000-7000-8000-0000000d0003",
			Error:      ErrorInfo{Class: ClassRetryable, Message: "upstream answered 503 \"unavailable\""},
			RetryAfter: Duration(30 * time.Second),
			StartedAt:  ts("2025-01-02T03:04:10.001Z"),
			FinishedAt: ts("2025-01-02T03:04:12.5Z"),
		}},
		{EventDLQ.CEType(), topics.Lifecycle(EventDLQ), "ferry/scheduler", DeadLettered{
			JobRef:       exRef(2),
			Job:          exampleJob(),
			CreatedAt:    created,
			Error:        ErrorInfo{Class: ClassTimeout, Message: "handler exceeded its 1m30s timeout"},
			History:      exampleHistory(),
			DeadAt:       ts("2025-01-02T03:02:31Z"),
			RedrivenFrom: "01943b6e-0000-7000-8000-00000000a000",
		}},
		{EventCancelled.CEType(), topics.Lifecycle(EventCancelled), "ferry/api", Cancelled{
			JobRef: exRef(1),
			Reason: "customer closed the account",
			Actor:  "key_01943b6e",
			At:     ts("2025-01-02T03:04:05Z"),
		}},
		{CETypeDispatch, topics.Dispatch(PoolShort), "ferry/scheduler", Dispatch{
			JobRef:     exRef(3),
			DispatchID: "01943b6e-0000-7000-8000-0000000d0003",
			Job:        exampleJob(),
			CreatedAt:  created,
			ReadyAt:    ts("2025-01-02T03:04:09Z"),
			LeaseUntil: ts("2025-01-02T03:05:40Z"),
			NotBefore:  tsp("2025-01-02T03:04:10Z"),
		}},
		{CETypeWorkerStatus, topics.Workers(), "ferry/worker", WorkerStatus{
			WorkerID:   "worker-7",
			Pool:       PoolShort,
			Slots:      16,
			Running:    2,
			At:         ts("2025-01-02T03:04:05Z"),
			Stopping:   true,
			Hold:       10000,
			HandedBack: []JobRef{exRef(3), {JobID: "01943b6e-0000-7000-8000-00000000a002", TenantID: "tenant-globex", Attempt: 1}},
			Routing:    &WorkerRouting{Types: []string{"email.send", "report.build"}, Partitions: []int32{1, 2}},
			Rejected:   []DispatchRef{{JobRef: exRef(2), DispatchID: "01943b6e-1111-7000-8000-000000000001-3"}},
		}},
		{CETypeBreakerChanged, topics.Breakers(), "ferry/scheduler", BreakerChanged{
			TenantID: exTenantID, JobType: "email.send", From: BreakerClosed, To: BreakerOpen,
			Reason: BreakerReasonFailures, Failures: 5, Actor: "key_01943b6e", At: ts("2025-01-02T03:04:05Z"),
		}},
		{CETypeScheduleChanged, topics.Changes(), "ferry/api", ScheduleChanged{
			TenantID: exTenantID, ScheduleID: "sch_01943b6e00007000800000000000c001", Name: "nightly-report",
			Action: ActionTriggered, Actor: "key_01943b6e",
			Changes: []FieldChange{{Field: "cron", From: json.RawMessage(`"30 2 * * *"`), To: json.RawMessage(`"0 3 * * *"`)}},
			JobID:   exJobID, At: ts("2025-01-02T03:04:05Z"),
		}},
		{CETypeTenantChanged, topics.Changes(), "ferry/api", TenantChanged{
			TenantID: exTenantID, Action: ActionUpdated, Actor: "admin",
			Changes: []FieldChange{{Field: "flow_control", From: json.RawMessage(`null`),
				To: json.RawMessage(`{"rate_limits":{"email.send":{"per_second":5,"burst":5}}}`)}},
			At: ts("2025-01-02T03:04:05Z"),
		}},
	}
}

// allCETypes is every CloudEvents type this package decodes.
func allCETypes() []string {
	var out []string
	for _, et := range EventTypes {
		out = append(out, et.CEType())
	}
	return append(out, CETypeDispatch, CETypeWorkerStatus, CETypeBreakerChanged, CETypeScheduleChanged, CETypeTenantChanged)
}

func TestRecordTypesCoverEveryType(t *testing.T) {
	var got []string
	for _, rt := range recordTypes() {
		got = append(got, rt.ceType)
		if rt.example.CEType() != rt.ceType {
			t.Errorf("example for %s has CEType %s", rt.ceType, rt.example.CEType())
		}
	}
	if want := allCETypes(); !slices.Equal(got, want) {
		t.Fatalf("recordTypes() covers %v, want every type %v: add the new type (with a golden record, a schema and a snapshot)", got, want)
	}
	// Every file under schemas/, testdata/golden/ and testdata/compat/
	// belongs to a known type, and every known type has its files.
	for _, dir := range []struct{ glob, suffix string }{
		{"schemas/*.json", ".json"},
		{"testdata/golden/*.json", ".json"},
		{"testdata/compat/*.json", ".fields.json"},
	} {
		files, err := filepath.Glob(dir.glob)
		if err != nil {
			t.Fatal(err)
		}
		var types []string
		for _, f := range files {
			types = append(types, strings.TrimSuffix(filepath.Base(f), dir.suffix))
		}
		want := slices.Sorted(slices.Values(got))
		if !*update && !slices.Equal(types, want) {
			t.Errorf("%s holds %v, want one file per type %v", dir.glob, types, want)
		}
	}
}

// TestExamplesFullyPopulated keeps the examples honest: a field added to a
// type must be given a value in its example, so that the golden record
// shows it and the schema is checked against it.
func TestExamplesFullyPopulated(t *testing.T) {
	for _, rt := range recordTypes() {
		for _, p := range zeroFields(reflect.ValueOf(rt.example), reflect.TypeOf(rt.example).Name()) {
			t.Errorf("%s: example leaves %s unset; give it a value in recordTypes()", rt.ceType, p)
		}
	}
}

func zeroFields(v reflect.Value, path string) []string {
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if v.IsNil() {
			return []string{path}
		}
		return zeroFields(v.Elem(), path)
	case reflect.Struct:
		if v.Type() == reflect.TypeFor[time.Time]() {
			if v.Interface().(time.Time).IsZero() {
				return []string{path}
			}
			return nil
		}
		var out []string
		for i := range v.NumField() {
			if f := v.Type().Field(i); f.IsExported() {
				out = append(out, zeroFields(v.Field(i), path+"."+f.Name)...)
			}
		}
		return out
	case reflect.Slice:
		if v.Len() == 0 {
			return []string{path}
		}
		if v.Type() == reflect.TypeFor[json.RawMessage]() {
			return nil
		}
		var out []string
		for i := range v.Len() {
			out = append(out, zeroFields(v.Index(i), fmt.Sprintf("%s[%d]", path, i))...)
		}
		return out
	}
	if v.IsZero() {
		return []string{path}
	}
	return nil
}

// goldenRecord is the file form of a record: its topic, key, headers and
// value. The value is indented for reading; compacted, it is byte for byte
// the record value.
type goldenRecord struct {
	Topic   string            `json:"topic"`
	Key     string            `json:"key"`
	Headers map[string]string `json:"headers"`
	Value   json.RawMessage   `json:"value"`
}

func goldenPath(ceType string) string { return filepath.Join("testdata", "golden", ceType+".json") }

// renderGolden renders a record in the golden file form, deterministically.
func renderGolden(r *kgo.Record) ([]byte, error) {
	g := goldenRecord{Topic: r.Topic, Key: string(r.Key), Headers: map[string]string{}, Value: r.Value}
	for _, h := range r.Headers {
		if _, dup := g.Headers[h.Key]; dup {
			return nil, fmt.Errorf("header %q appears twice", h.Key)
		}
		g.Headers[h.Key] = string(h.Value)
	}
	b, err := json.MarshalIndent(g, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

func readGolden(t *testing.T, ceType string) goldenRecord {
	t.Helper()
	b, err := os.ReadFile(goldenPath(ceType))
	if err != nil {
		t.Fatalf("%v (create it with: go test -run TestGolden -update)", err)
	}
	var g goldenRecord
	if err := json.Unmarshal(b, &g); err != nil {
		t.Fatalf("%s: %v", goldenPath(ceType), err)
	}
	return g
}

// compactValue returns the record value a golden file holds.
func (g goldenRecord) compactValue(t testing.TB) []byte {
	var buf bytes.Buffer
	if err := json.Compact(&buf, g.Value); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// record rebuilds the Kafka record a golden file describes, headers in
// name order.
func (g goldenRecord) record(t testing.TB) *kgo.Record {
	r := &kgo.Record{Topic: g.Topic, Key: []byte(g.Key), Value: g.compactValue(t)}
	for _, k := range slices.Sorted(maps.Keys(g.Headers)) {
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: k, Value: []byte(g.Headers[k])})
	}
	return r
}

func encodeExample(t testing.TB, rt recordType) *kgo.Record {
	value, err := json.Marshal(rt.example)
	if err != nil {
		t.Fatalf("%s: %v", rt.ceType, err)
	}
	return NewRecordAt(rt.topic, rt.source, rt.example, value, goldenID, goldenTime)
}

// TestGoldenEncoding re-encodes every example and compares the result with
// its golden file byte for byte.
func TestGoldenEncoding(t *testing.T) {
	for _, rt := range recordTypes() {
		t.Run(rt.ceType, func(t *testing.T) {
			rec := encodeExample(t, rt)
			got, err := renderGolden(rec)
			if err != nil {
				t.Fatal(err)
			}
			path := goldenPath(rt.ceType)
			if *update {
				if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (create it with: go test -run TestGolden -update)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("the encoding of the %s example no longer matches %s:\n%s\n"+
					"If the change is intended, check it is compatible (TestCompat) and rewrite the file with: go test -run TestGolden -update",
					rt.ceType, path, firstDiff(got, want))
			}
			// The value in the file, compacted, is the record value byte for byte.
			if g := readGolden(t, rt.ceType); !bytes.Equal(g.compactValue(t), rec.Value) {
				t.Errorf("%s: compacted golden value\n%s\ndiffers from the encoded value\n%s", path, g.compactValue(t), rec.Value)
			}
		})
	}
}

// firstDiff describes the first line where got and want differ.
func firstDiff(got, want []byte) string {
	g, w := strings.Split(string(got), "\n"), strings.Split(string(want), "\n")
	for i := 0; i < len(g) || i < len(w); i++ {
		var gl, wl string
		if i < len(g) {
			gl = g[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if gl != wl {
			return fmt.Sprintf("line %d:\n  encoded: %s\n  golden:  %s", i+1, gl, wl)
		}
	}
	return "(no line differs)"
}

// TestGoldenDecode decodes every golden record and checks it gives back the
// example, attributes included, and that the data re-encodes to the same
// bytes.
func TestGoldenDecode(t *testing.T) {
	for _, rt := range recordTypes() {
		t.Run(rt.ceType, func(t *testing.T) {
			g := readGolden(t, rt.ceType)
			rec := g.record(t)
			if want := rt.example.Subject(); g.Key != want {
				t.Errorf("record key %q, want the subject %q", g.Key, want)
			}
			if g.Topic != rt.topic {
				t.Errorf("topic %q, want %q", g.Topic, rt.topic)
			}
			ev, err := Decode(rec)
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			wantMeta := Meta{
				ID: goldenID, Source: rt.source, Type: rt.ceType, Time: goldenTime,
				Subject: rt.example.Subject(), Tenant: rt.example.Tenant(),
			}
			if !reflect.DeepEqual(ev.Meta, wantMeta) {
				t.Errorf("Meta = %+v, want %+v", ev.Meta, wantMeta)
			}
			if !reflect.DeepEqual(ev.Data, rt.example) {
				t.Errorf("Data = %#v\nwant %#v", ev.Data, rt.example)
			}
			again, err := json.Marshal(ev.Data)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(again, rec.Value) {
				t.Errorf("decoded data re-encodes to\n%s\nwant\n%s", again, rec.Value)
			}
			if g.Headers[HeaderContentType] != "application/json" || g.Headers[HeaderSpecVersion] != "1.0" {
				t.Errorf("headers %v: want content-type application/json and ce_specversion 1.0", g.Headers)
			}
		})
	}
}

// compileSchemas compiles every embedded schema, asserting formats
// (date-time) rather than only annotating them.
func compileSchemas(t testing.TB) map[string]*jsonschema.Schema {
	t.Helper()
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat()
	out := map[string]*jsonschema.Schema{}
	for _, ce := range allCETypes() {
		doc := schemaDoc(t, ce)
		id, _ := doc["$id"].(string)
		if err := c.AddResource(id, doc); err != nil {
			t.Fatalf("%s: %v", ce, err)
		}
		sch, err := c.Compile(id)
		if err != nil {
			t.Fatalf("%s: %v", ce, err)
		}
		out[ce] = sch
	}
	return out
}

// schemaDoc returns the embedded schema of ceType, parsed.
func schemaDoc(t testing.TB, ceType string) map[string]any {
	t.Helper()
	b, ok := JSONSchema(ceType)
	if !ok {
		t.Fatalf("JSONSchema(%q): no schema", ceType)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("%s: %v", ceType, err)
	}
	m, ok := doc.(map[string]any)
	if !ok {
		t.Fatalf("%s: schema is not an object", ceType)
	}
	return m
}

func TestSchemaHeaders(t *testing.T) {
	for _, ce := range allCETypes() {
		doc := schemaDoc(t, ce)
		if doc["$schema"] != "https://json-schema.org/draft/2020-12/schema" {
			t.Errorf("%s: $schema %v, want draft 2020-12", ce, doc["$schema"])
		}
		if id, _ := doc["$id"].(string); !strings.HasSuffix(id, "/"+ce+".json") {
			t.Errorf("%s: $id %q does not name the file", ce, id)
		}
		if doc["title"] != ce {
			t.Errorf("%s: title %v", ce, doc["title"])
		}
	}
	for _, bad := range []string{"", "ferry.job.nope.v1", "../schemas/ferry.job.started.v1", "schemas/ferry.job.started.v1", "ferry.job.started.v1.json"} {
		if _, ok := JSONSchema(bad); ok {
			t.Errorf("JSONSchema(%q) found a schema", bad)
		}
	}
	// The caller owns the bytes.
	a, _ := JSONSchema(CETypeDispatch)
	a[0] = 'X'
	if b, _ := JSONSchema(CETypeDispatch); b[0] == 'X' {
		t.Error("JSONSchema returns shared bytes")
	}
}

// TestGoldenMatchesJSONSchema validates every golden value against its
// schema, then checks the schema is not vacuous: dropping any required
// property, or giving any property a value of the wrong JSON type, must
// make validation fail.
func TestGoldenMatchesJSONSchema(t *testing.T) {
	schemas := compileSchemas(t)
	for _, rt := range recordTypes() {
		t.Run(rt.ceType, func(t *testing.T) {
			sch := schemas[rt.ceType]
			g := readGolden(t, rt.ceType)
			parse := func() map[string]any {
				v, err := jsonschema.UnmarshalJSON(bytes.NewReader(g.Value))
				if err != nil {
					t.Fatal(err)
				}
				return v.(map[string]any)
			}
			if err := sch.Validate(parse()); err != nil {
				t.Fatalf("golden value does not match its schema: %v", err)
			}

			required, _ := schemaDoc(t, rt.ceType)["required"].([]any)
			if len(required) == 0 {
				t.Fatal("schema has no required properties")
			}
			for _, r := range required {
				v := parse()
				delete(v, r.(string))
				if sch.Validate(v) == nil {
					t.Errorf("schema accepts the value without required %q", r)
				}
			}

			fields, err := goFields(reflect.TypeOf(rt.example))
			if err != nil {
				t.Fatal(err)
			}
			for path, fi := range fields {
				if strings.ContainsAny(path, ".[") || fi.Type == "any" {
					continue
				}
				for _, wrong := range wrongValues(fi.Type) {
					v := parse()
					v[path] = wrong
					if sch.Validate(v) == nil {
						t.Errorf("schema accepts %s = %#v, but Go encodes it as %s", path, wrong, fi.Type)
					}
				}
			}
		})
	}
}

// wrongValues returns JSON values that a field of the given compat type
// must never hold.
func wrongValues(typ string) []any {
	base, _, _ := strings.Cut(typ, "|")
	switch base {
	case "string":
		return []any{json.Number("1"), true, map[string]any{}}
	case "string(date-time)":
		return []any{json.Number("1735787045"), "2025-01-02", "yesterday", "2025-01-02 03:04:05Z"}
	case "string(duration)":
		return []any{json.Number("5"), "5", "5 seconds", "1d", ""}
	case "integer":
		return []any{"1", json.Number("1.5"), nil}
	case "number":
		return []any{"1", nil}
	case "boolean":
		return []any{"true", json.Number("1")}
	case "object":
		return []any{"x", []any{}}
	case "array":
		return []any{"x", map[string]any{}}
	}
	panic("wrongValues: unknown type " + typ)
}

// TestDurationPatternMatchesGo checks the schema's duration pattern against
// what Duration writes and what it accepts.
func TestDurationPatternMatchesGo(t *testing.T) {
	schemas := compileSchemas(t)
	sch := schemas[EventFailed.CEType()]
	g := readGolden(t, EventFailed.CEType())
	validate := func(s string) error {
		v, err := jsonschema.UnmarshalJSON(bytes.NewReader(g.Value))
		if err != nil {
			t.Fatal(err)
		}
		v.(map[string]any)["retry_after"] = s
		return sch.Validate(v)
	}
	for _, d := range []time.Duration{1, 999, time.Microsecond + 500, 1500 * time.Millisecond, time.Minute, 90 * time.Minute, 100*time.Hour + 1, -2 * time.Second, 1<<63 - 1} {
		b, err := json.Marshal(Duration(d))
		if err != nil {
			t.Fatal(err)
		}
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			t.Fatal(err)
		}
		if err := validate(s); err != nil {
			t.Errorf("schema rejects %q, which Go writes for %d: %v", s, d, err)
		}
	}
	for _, s := range []string{"0", "1.5h", ".5s", "1h30m", "2us", "3μs", "+4ms"} {
		var d Duration
		if err := json.Unmarshal([]byte(`"`+s+`"`), &d); err != nil {
			t.Fatalf("Go rejects %q: %v", s, err)
		}
		if err := validate(s); err != nil {
			t.Errorf("schema rejects %q, which Go accepts: %v", s, err)
		}
	}
	for _, s := range []string{"", "5", "s", "1d", "1.h2", "5 s", "-", "1hh"} {
		var d Duration
		goErr := json.Unmarshal([]byte(`"`+s+`"`), &d)
		schemaErr := validate(s)
		if goErr == nil || schemaErr == nil {
			t.Errorf("%q: Go error %v, schema error %v; want both to reject it", s, goErr, schemaErr)
		}
	}
}

// TestErrorClassEnum checks the schema's error classes are exactly the
// classes ErrorClass.Valid accepts.
func TestErrorClassEnum(t *testing.T) {
	classes := []ErrorClass{ClassAppError, ClassRetryable, ClassPermanent, ClassTimeout, ClassWorkerLost, ClassExpired, ClassCancelled}
	for _, ce := range []string{EventEnqueued.CEType(), EventFailed.CEType(), EventDLQ.CEType()} {
		defs, _ := schemaDoc(t, ce)["$defs"].(map[string]any)
		ec, _ := defs["errorClass"].(map[string]any)
		enum, _ := ec["enum"].([]any)
		var got []string
		for _, v := range enum {
			got = append(got, v.(string))
			if !ErrorClass(v.(string)).Valid() {
				t.Errorf("%s: enum has %q, which ErrorClass.Valid rejects", ce, v)
			}
		}
		for _, c := range classes {
			if !slices.Contains(got, string(c)) {
				t.Errorf("%s: enum lacks class %q", ce, c)
			}
		}
	}
}

// TestDecodeKnowsEveryGoldenType checks that decodeData maps each type to
// the example's Go type and refuses types it does not know.
func TestDecodeKnowsEveryGoldenType(t *testing.T) {
	for _, rt := range recordTypes() {
		g := readGolden(t, rt.ceType)
		d, err := decodeData(rt.ceType, g.compactValue(t))
		if err != nil {
			t.Fatalf("%s: %v", rt.ceType, err)
		}
		if reflect.TypeOf(d) != reflect.TypeOf(rt.example) {
			t.Errorf("%s decodes to %T, want %T", rt.ceType, d, rt.example)
		}
	}
	if _, err := decodeData("ferry.job.unknown.v1", []byte(`{}`)); !errors.Is(err, ErrUnknownType) {
		t.Errorf("unknown type: err = %v, want ErrUnknownType", err)
	}
}
