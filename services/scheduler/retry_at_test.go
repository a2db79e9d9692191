package scheduler

import (
	"testing"
	"time"

	"github.com/ferryhq/ferry/events/schema"
)

// TestRetryAtCountsFromTheAttemptsEnd: the backoff runs from the failed
// attempt's finished_at, not from when the scheduler read the failure; a
// finished_at from a clock ahead of the scheduler's, or none, counts from
// now; a due time already past is now.
func TestRetryAtCountsFromTheAttemptsEnd(t *testing.T) {
	now := time.Date(2026, 11, 25, 3, 0, 0, 0, time.UTC)
	cases := []struct {
		name     string
		finished time.Time
		want     time.Time
	}{
		{"read 300ms late", now.Add(-300 * time.Millisecond), now.Add(700 * time.Millisecond)},
		{"no finished_at", time.Time{}, now.Add(time.Second)},
		{"worker clock ahead", now.Add(time.Minute), now.Add(time.Second)},
		{"read after the delay", now.Add(-5 * time.Second), now},
	}
	for _, c := range cases {
		got := retryAt(schema.Failed{FinishedAt: c.finished}, now, time.Second)
		if !got.Equal(c.want) {
			t.Errorf("%s: retry at %v, want %v", c.name, got, c.want)
		}
	}
}
