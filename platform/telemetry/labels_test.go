package telemetry

import (
	"fmt"
	"testing"
)

// TestLabelValuesBounded: client-chosen names cannot grow a metric's series
// without bound; names past the cap share one label.
func TestLabelValuesBounded(t *testing.T) {
	l := NewLabelValues(3)
	for i := range 3 {
		if got := l.Value(fmt.Sprintf("q%d", i)); got != fmt.Sprintf("q%d", i) {
			t.Fatalf("label %d = %q", i, got)
		}
	}
	if got := l.Value("q3"); got != OverflowLabel {
		t.Fatalf("past the cap: %q, want %q", got, OverflowLabel)
	}
	if got := l.Value("q1"); got != "q1" {
		t.Fatalf("a known name: %q", got)
	}
	if len(l.seen) != 3 {
		t.Fatalf("%d names kept", len(l.seen))
	}
}
