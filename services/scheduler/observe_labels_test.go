package scheduler

import (
	"fmt"
	"testing"
)

// TestQueueLabelsBounded: client-chosen queue names cannot grow the
// counters' series without bound; names past the cap share one label.
func TestQueueLabelsBounded(t *testing.T) {
	l := &queueLabels{max: 3}
	for i := range 3 {
		if got := l.label(fmt.Sprintf("q%d", i)); got != fmt.Sprintf("q%d", i) {
			t.Fatalf("label %d = %q", i, got)
		}
	}
	if got := l.label("q3"); got != overflowQueue {
		t.Fatalf("past the cap: %q, want %q", got, overflowQueue)
	}
	if got := l.label("q1"); got != "q1" {
		t.Fatalf("a known name: %q", got)
	}
	if len(l.seen) != 3 {
		t.Fatalf("%d names kept", len(l.seen))
	}
}
