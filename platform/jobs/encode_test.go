package jobs

import (
	"bytes"
	"encoding/json"
	"math"
	"testing"
	"time"

	"github.com/ferryhq/ferry/events/schema"
)

// sampleJobs are resources with every member set, unset and awkward: text
// encoding/json escapes, nulls, omitempty members, times with zones and
// without nanoseconds, floats in exponent form, the rare members it writes.
func sampleJobs() []Job {
	at := time.Date(2026, 11, 28, 6, 30, 0, 123456789, time.UTC)
	zoned := time.Date(2026, 1, 2, 3, 4, 5, 0, time.FixedZone("x", -(3*3600+30*60)))
	yes, no := true, false
	plain := Submitted("01JOB", "acme", schema.JobSpec{Type: "email", Queue: "default", Priority: 5, MaxAttempts: 3,
		Payload: json.RawMessage(`{"to":"a@b.c"}`)}, at, at)
	full := plain
	full.Pool, full.Status, full.Attempt = "short", schema.StatusDead, 2
	full.Payload = json.RawMessage(" { \"html\" : \"<b>&amp;</b>\", \"ls\": \"\u2028\" } ")
	full.Tags = []string{"a", "<tag>", "é\u2029", "bad\xffutf8", "ctl\x01\t"}
	full.StartedAt, full.FinishedAt, full.ScheduledFor = &at, &zoned, nil
	full.Progress = &Progress{Percent: 1e-7, Message: "half \"way\""}
	full.Result = json.RawMessage(`[1, 2.5e30, null, "x"]`)
	full.LastError = &ErrorInfo{Class: "transient", Message: "dial tcp: <timeout>\n"}
	full.TraceID, full.RedrivenFrom, full.ScheduleID, full.Waiting = "abc", "01OLD", "sch_1", "no_worker"
	full.Unique = &schema.Unique{Key: "k&1", While: "queued", Until: at.Add(time.Hour)}
	full.Concurrency = &schema.Concurrency{Key: "tenant:<1>", Limit: 2}
	full.Deduplicated = &yes
	bare := Job{ID: "x", Deduplicated: &no, Progress: &Progress{Percent: 1e21}}
	nilTags := plain
	nilTags.Tags = nil
	return []Job{plain, plain.Deduplicate(false), full, bare, nilTags, {}}
}

func TestAppendJSONMatchesMarshal(t *testing.T) {
	for i, j := range sampleJobs() {
		want, err := json.Marshal(j)
		if err != nil {
			t.Fatalf("job %d: json.Marshal: %v", i, err)
		}
		got, err := j.AppendJSON([]byte("prefix"))
		if err != nil {
			t.Fatalf("job %d: AppendJSON: %v", i, err)
		}
		if !bytes.Equal(got, append([]byte("prefix"), want...)) {
			t.Fatalf("job %d:\n got %s\nwant prefix%s", i, got, want)
		}
	}
}

// TestAppendJSONRefusesWhatMarshalRefuses: a value encoding/json cannot
// write gives its error, and b as it was.
func TestAppendJSONRefusesWhatMarshalRefuses(t *testing.T) {
	bad := []Job{
		{Payload: json.RawMessage(`{"unterminated":`)},
		{Result: json.RawMessage{}},
		{Progress: &Progress{Percent: math.NaN()}},
		{CreatedAt: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)},
	}
	for i, j := range bad {
		if _, err := json.Marshal(j); err == nil {
			t.Fatalf("job %d: json.Marshal accepted it; the case is wrong", i)
		}
		got, err := j.AppendJSON([]byte("kept"))
		if err == nil || string(got) != "kept" {
			t.Fatalf("job %d: AppendJSON = %q, %v; want b unchanged and an error", i, got, err)
		}
	}
}

// FuzzAppendJSONMatchesMarshal varies the text and numbers of a full job.
func FuzzAppendJSONMatchesMarshal(f *testing.F) {
	f.Add("01JOB", "email", "<b>\u2028", []byte(`{"a":[1,"&"]}`), 0.5, int64(0), "")
	f.Add("", "", "bad\xff", []byte(`null`), 1e-9, int64(-1), "msg\x00")
	f.Fuzz(func(t *testing.T, id, typ, tag string, payload []byte, percent float64, nanos int64, msg string) {
		j := sampleJobs()[2]
		j.ID, j.Type, j.Tags, j.Payload = id, typ, []string{tag, msg}, payload
		j.Progress = &Progress{Percent: percent, Message: msg}
		at := time.Unix(1_800_000_000, nanos)
		j.CreatedAt, j.LastError = at, &ErrorInfo{Class: typ, Message: msg}
		want, wantErr := json.Marshal(j)
		got, err := j.AppendJSON(nil)
		if (err != nil) != (wantErr != nil) {
			t.Fatalf("AppendJSON error %v, json.Marshal error %v", err, wantErr)
		}
		if err == nil && !bytes.Equal(got, want) {
			t.Fatalf("\n got %s\nwant %s", got, want)
		}
	})
}

// BenchmarkJobJSON compares the hand-written encoding of a submission's
// answer with encoding/json's.
func BenchmarkJobJSON(b *testing.B) {
	j := sampleJobs()[0].Deduplicate(false)
	b.Run("AppendJSON", func(b *testing.B) {
		var buf []byte
		for range b.N {
			buf, _ = j.AppendJSON(buf[:0])
		}
	})
	b.Run("encoding/json", func(b *testing.B) {
		for range b.N {
			_, _ = json.Marshal(j)
		}
	})
}
