package scheduler

import (
	"testing"
	"time"

	"github.com/ferryhq/ferry/services/scheduler/internal/qstore"
)

// TestNotBeforeIsTheExactDueTime: a job leased ahead waits at the worker
// for its run_at to the microsecond, not for the whole millisecond Redis
// rounds due times up to; a due time its ready time does not explain (a
// later gate, a ready time from before a delay) stays as Redis gave it.
func TestNotBeforeIsTheExactDueTime(t *testing.T) {
	due := time.Date(2026, 11, 29, 1, 2, 3, 4_000_000, time.UTC) // the millisecond Redis scored
	cases := []struct {
		name        string
		ready, want time.Time
	}{
		{"run_at inside the millisecond", due.Add(-700 * time.Microsecond), due.Add(-700 * time.Microsecond)},
		{"run_at just inside", due.Add(-time.Millisecond + time.Nanosecond), due.Add(-time.Millisecond + time.Nanosecond)},
		{"run_at on the millisecond", due, due},
		{"ready a millisecond or more before", due.Add(-time.Millisecond), due},
		{"ready long before (a gate moved the due time)", due.Add(-time.Minute), due},
		{"ready after the due time", due.Add(time.Microsecond), due},
		{"no ready time", time.Time{}, due},
	}
	for _, c := range cases {
		got := notBefore(&qstore.Template{NotBefore: due.In(time.FixedZone("x", 3600)), ReadyAt: c.ready})
		if got == nil || !got.Equal(c.want) || got.Location() != time.UTC {
			t.Errorf("%s: not_before %v, want %v in UTC", c.name, got, c.want)
		}
	}
	if got := notBefore(&qstore.Template{ReadyAt: due}); got != nil {
		t.Errorf("a job due now got not_before %v, want none", got)
	}
}
