package scheduler

import (
	"github.com/ferryhq/ferry/events/schema"
	"github.com/ferryhq/ferry/platform/quarantine"
)

// Retry and dlq records carry the job's attempt history, and each attempt
// its error message. Unbounded, a job that fails often or with long errors
// (an http handler quoting a response body) grows a record past the
// broker's maximum message size, and a record that cannot be produced
// used to stop the scheduler's consumer for everyone. So both are bounded:
//
//   - the history keeps the first attempt (how the job first failed), the
//     first timeout among the attempts it drops (the retry policy's "timed
//     out twice" rule reads it) and the last historyTail attempts; the
//     dropped attempts show as a gap in the kept attempts' numbers;
//   - each error message, and the dlq record's final error, is cut to
//     maxErrorBytes with a "…[truncated]" mark.
//
// Consumers are consistent with that: the dlq projection stores and shows
// the history it receives (attempt numbers tell what was dropped), the
// status projection reads the attempt number from the event, never the
// history's length, and the retry policy reads only classes.
const (
	historyHead   = 1
	historyTail   = 9
	maxErrorBytes = 2 << 10
)

// boundHistory returns a copy of h cut as described above, every error
// message bounded (also those of records written before the bound).
func boundHistory(h []schema.Attempt) []schema.Attempt {
	var out []schema.Attempt
	if len(h) <= historyHead+historyTail {
		out = append(out, h...)
	} else {
		out = append(out, h[:historyHead]...)
		for _, a := range h[historyHead : len(h)-historyTail] {
			if a.Class == schema.ClassTimeout {
				out = append(out, a)
				break
			}
		}
		out = append(out, h[len(h)-historyTail:]...)
	}
	for i := range out {
		out[i].Error = boundError(out[i].Error)
	}
	return out
}

// boundError cuts an error message to maxErrorBytes.
func boundError(msg string) string { return quarantine.Truncate(msg, maxErrorBytes) }
