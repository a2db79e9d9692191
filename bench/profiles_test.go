package main

import (
	"testing"

	"github.com/google/pprof/profile"
)

// heapProfile is a heap profile with one allocation site whose cumulative
// alloc_objects and alloc_space are objects and bytes.
func heapProfile(objects, bytes int64, at int64) *profile.Profile {
	fn := &profile.Function{ID: 1, Name: "main.alloc"}
	loc := &profile.Location{ID: 1, Line: []profile.Line{{Function: fn, Line: 7}}}
	return &profile.Profile{
		SampleType: []*profile.ValueType{
			{Type: "alloc_objects", Unit: "count"}, {Type: "alloc_space", Unit: "bytes"},
			{Type: "inuse_objects", Unit: "count"}, {Type: "inuse_space", Unit: "bytes"},
		},
		Sample:     []*profile.Sample{{Location: []*profile.Location{loc}, Value: []int64{objects, bytes, 1, 64}}},
		Location:   []*profile.Location{loc},
		Function:   []*profile.Function{fn},
		PeriodType: &profile.ValueType{Type: "space", Unit: "bytes"},
		TimeNanos:  at,
	}
}

func TestProfileDeltaCountsOnlyTheWindow(t *testing.T) {
	before, after := heapProfile(1_000, 64_000, 10), heapProfile(1_250, 80_000, 35)
	delta, err := profileDelta(before, after)
	if err != nil {
		t.Fatal(err)
	}
	if got := before.Sample[0].Value[:2]; got[0] != 1_000 || got[1] != 64_000 {
		t.Errorf("before changed: alloc_objects, alloc_space now %v, want [1000 64000]", got)
	}
	if len(delta.Sample) != 1 {
		t.Fatalf("samples: got %d, want 1", len(delta.Sample))
	}
	if got := delta.Sample[0].Value[:2]; got[0] != 250 || got[1] != 16_000 {
		t.Errorf("alloc_objects, alloc_space: got %v, want [250 16000]", got)
	}
	if delta.DurationNanos != 25 || delta.DefaultSampleType != "alloc_space" {
		t.Errorf("duration %d, default sample %q", delta.DurationNanos, delta.DefaultSampleType)
	}
}
