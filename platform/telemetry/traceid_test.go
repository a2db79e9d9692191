package telemetry

import "testing"

func TestTraceIDOf(t *testing.T) {
	const id = "4bf92f3577b34da6a3ce929d0e0e4736"
	for in, want := range map[string]string{
		"00-" + id + "-00f067aa0ba902b7-01":                       id,
		" 00-" + id + "-00f067aa0ba902b7-01\n":                    id,
		"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01": id,
		"01-" + id + "-00f067aa0ba902b7-01-future":                id,
		"": "", "garbage": "", "00-xyz-00f067aa0ba902b7-01": "", "00-XYZ-1-01": "",
		"00-" + id: "", "00-" + id + "-00f067aa0ba902b7": "",
		"00-" + id[:31] + "g-00f067aa0ba902b7-01":                 "",
		"00-" + id + "0-00f067aa0ba902b7-01":                      "",
		"00-00000000000000000000000000000000-00f067aa0ba902b7-01": "",
	} {
		if got := TraceIDOf(in); got != want {
			t.Errorf("TraceIDOf(%q) = %q, want %q", in, got, want)
		}
	}
}

// The usual value, lower case, is a substring of the header: no allocation
// on the projections' hot path.
func TestTraceIDOfAllocatesNothingForLowerCase(t *testing.T) {
	tp := "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	if n := testing.AllocsPerRun(100, func() { _ = TraceIDOf(tp) }); n != 0 {
		t.Fatalf("%v allocations per call, want 0", n)
	}
}
