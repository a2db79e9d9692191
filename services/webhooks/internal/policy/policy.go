// Package policy holds the webhooks service's rules, free of I/O: which
// endpoint wants which event, how long to wait before a retry, and what a
// response means.
package policy

import (
	"math/rand/v2"
	"slices"
	"time"

	"github.com/ferryhq/ferry/events/schema"
)

// Filter is what an endpoint subscribes to.
type Filter struct {
	// EventTypes are the short lifecycle names; empty means all.
	EventTypes []schema.EventType
	// Queue and Type, when set, must equal the job's queue and type.
	Queue string
	Type  string
}

// NeedsJob reports whether matching needs the job's queue or type, which
// only enqueued and dlq events carry.
func (f Filter) NeedsJob() bool { return f.Queue != "" || f.Type != "" }

// JobInfo is what the filters look at of a job.
type JobInfo struct{ Queue, Type string }

// Match reports whether an event of type et for a job wants delivery. job
// is nil when the job's queue and type are unknown; a filter that needs
// them then does not match.
func (f Filter) Match(et schema.EventType, job *JobInfo) bool {
	if len(f.EventTypes) > 0 && !slices.Contains(f.EventTypes, et) {
		return false
	}
	if !f.NeedsJob() {
		return true
	}
	if job == nil {
		return false
	}
	return (f.Queue == "" || f.Queue == job.Queue) && (f.Type == "" || f.Type == job.Type)
}

// Retry is the retry schedule of a delivery.
type Retry struct {
	// Schedule[i] is the wait after the (i+1)-th failed attempt. A delivery
	// gets len(Schedule)+1 attempts.
	Schedule []time.Duration
	// Jitter is the relative spread applied to each wait (0.2 = ±20 %).
	Jitter float64
}

// DefaultSchedule spreads retries over about 15 hours.
var DefaultSchedule = []time.Duration{
	5 * time.Second, 30 * time.Second, 2 * time.Minute, 10 * time.Minute, 30 * time.Minute,
	time.Hour, 2 * time.Hour, 4 * time.Hour, 8 * time.Hour,
}

// MaxAttempts is how many attempts a delivery gets.
func (r Retry) MaxAttempts() int { return len(r.Schedule) + 1 }

// Next returns the wait before the next attempt after attempts failed
// attempts, or false when the delivery has used all of them.
func (r Retry) Next(attempts int) (time.Duration, bool) {
	if attempts < 1 || attempts > len(r.Schedule) {
		return 0, false
	}
	d := r.Schedule[attempts-1]
	if r.Jitter > 0 {
		f := 1 + r.Jitter*(2*rand.Float64()-1)
		d = time.Duration(float64(d) * f)
	}
	return d, true
}

// Outcome is what one delivery attempt means.
type Outcome string

// Outcomes of an attempt, also the values of the metrics' outcome attribute.
const (
	// Delivered: a 2xx answer.
	Delivered Outcome = "delivered"
	// Failed: any other answer or a transport error; try again later.
	Failed Outcome = "retry"
	// Gone: 410, the receiver asks us to stop; the endpoint is disabled.
	Gone Outcome = "gone"
)

// Classify maps an HTTP status (0 for a transport error) to an outcome.
func Classify(status int) Outcome {
	switch {
	case status >= 200 && status < 300:
		return Delivered
	case status == 410:
		return Gone
	}
	return Failed
}

// ShouldDisable reports whether an endpoint that has failed without a
// success since failingSince must be disabled at now.
func ShouldDisable(failingSince, now time.Time, after time.Duration) bool {
	return !failingSince.IsZero() && after > 0 && now.Sub(failingSince) >= after
}
