package worker

import (
	"log/slog"
	"testing"

	"github.com/ferryhq/ferry/events/schema"
	"github.com/ferryhq/ferry/services/worker/internal/recent"
)

// TestOlderAttemptEndingKeepsTheNewerCancel: attempt 1 runs here when the
// cancel of attempt 2 arrives; attempt 1 then fails. A dispatch of attempt 2
// must still be dropped as cancelled (remembering attempt 1's end used to
// lower the remembered attempt, and attempt 2 then ran).
func TestOlderAttemptEndingKeepsTheNewerCancel(t *testing.T) {
	s := &Service{log: slog.New(slog.DiscardHandler), seen: recent.New[string, seenJob](16), running: map[string]*run{}}
	ref1 := schema.JobRef{JobID: "job_1", TenantID: "t1", Attempt: 1}
	ref2 := ref1
	ref2.Attempt = 2
	r1 := &run{ref: ref1, dispatchID: "d-1"}
	s.running[ref1.JobID] = r1
	s.cancelJob(schema.Cancelled{JobRef: ref2, Reason: "api"})

	s.mu.Lock()
	delete(s.running, ref1.JobID)
	s.rememberLocked(r1, &schema.Failed{JobRef: ref1}, false, true)
	reason := s.dropReasonLocked(schema.Dispatch{JobRef: ref2, DispatchID: "d-2"})
	s.mu.Unlock()
	if reason != "job cancelled" {
		t.Fatalf("attempt 2's dispatch after its cancel and attempt 1's end: drop reason %q, want %q", reason, "job cancelled")
	}
}
