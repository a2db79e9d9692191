package schema

import (
	"testing"
	"time"
)

// TestCountsCountEachCodecCall: an encode, a full decode and a header-only
// decode each add one to their own count.
func TestCountsCountEachCodecCall(t *testing.T) {
	before := Counts()
	rec, err := NewRecord("t", "ferry/api", Started{JobRef: JobRef{JobID: "job_1", TenantID: "t1", Attempt: 1},
		WorkerID: "w", DispatchID: "d", StartedAt: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Decode(rec); err != nil {
		t.Fatal(err)
	}
	if _, err := DecodeMeta(rec); err != nil {
		t.Fatal(err)
	}
	after := Counts()
	if got := (CodecCounts{after.Decodes - before.Decodes, after.MetaDecodes - before.MetaDecodes, after.Encodes - before.Encodes}); got != (CodecCounts{1, 1, 1}) {
		t.Fatalf("counts moved by %+v, want one of each", got)
	}
}
