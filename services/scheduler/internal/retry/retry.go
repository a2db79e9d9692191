// Package retry is the scheduler's retry policy (docs/design.md §3): given a
// failed attempt, it decides whether the job is retried (and after how
// long), re-dispatched, dead-lettered or left alone. It is pure domain code:
// no I/O, and randomness comes from an injected source.
package retry

import (
	"math"
	"time"

	"github.com/ferryhq/ferry/events/schema"
)

// Action is what the scheduler does with a failed attempt.
type Action int

// The actions.
const (
	// Nothing: the job needs no further step (a cancelled handler).
	Nothing Action = iota
	// Retry: enqueue attempt n+1 after Decision.Delay.
	Retry
	// DeadLetter: the job will not run again; emit the dlq event.
	DeadLetter
	// Redispatch: run the same attempt again at once without consuming an
	// attempt (worker_lost).
	Redispatch
)

func (a Action) String() string {
	switch a {
	case Retry:
		return "retry"
	case DeadLetter:
		return "dead_letter"
	case Redispatch:
		return "redispatch"
	}
	return "nothing"
}

// Defaults of [Policy].
const (
	DefaultBase        = time.Second
	DefaultMax         = 10 * time.Minute
	DefaultJitter      = 0.25
	DefaultMaxAttempts = 5
)

// Policy computes retry decisions. The zero value is usable and applies
// the defaults.
type Policy struct {
	// Base is the first backoff. Defaults to 1s. A job's Backoff.Base overrides it.
	Base time.Duration
	// Max caps the exponential backoff before jitter. Defaults to 10m. A
	// job's Backoff.Max overrides it.
	Max time.Duration
	// Jitter is the relative spread applied to the capped backoff: the delay
	// is uniform in [d·(1−Jitter), d·(1+Jitter)). Defaults to 0.25; a
	// negative value disables jitter.
	Jitter float64
	// Rand returns a uniform number in [0, 1). Defaults to math/rand/v2's Float64.
	Rand func() float64
	// Types overrides Base and Max per job type (a zero field keeps the
	// policy's); a job's own Backoff overrides them in turn.
	Types map[string]TypeBackoff
}

// TypeBackoff is the backoff of one job type.
type TypeBackoff struct {
	Base, Max time.Duration
}

// Input is one failed attempt and what is known of its job.
type Input struct {
	Job schema.JobSpec
	// Attempt is the attempt that failed (1-based).
	Attempt int
	Class   schema.ErrorClass
	// RetryAfter is the failing system's hint (retryable only).
	RetryAfter time.Duration
	// History holds the attempts made before this one.
	History []schema.Attempt
}

// Decision is the policy's answer.
type Decision struct {
	Action Action
	// Delay is how long after the failure attempt n+1 may start (Retry only).
	Delay time.Duration
	// Class is the class the dead-letter entry records (DeadLetter only):
	// the failure's own class.
	Class schema.ErrorClass
	// Why says in a few words why the decision was made, for logs and the
	// dlq entry's message.
	Why string
}

// Decide applies docs/design.md §3:
//
//   - app_error: retry after Backoff(n) while attempts remain;
//   - retryable: retry after max(retry_after, Backoff(n)) while attempts
//     remain — the hint is a floor, and the exponential backoff still
//     protects a system that keeps answering 429 with a short hint;
//   - timeout: one retry (after Backoff(n)), then dead-letter; a timeout
//     in an earlier attempt counts as the one retry. Attempts remaining
//     still bound it;
//   - permanent, expired and unknown classes: dead-letter now;
//   - worker_lost: re-dispatch without consuming an attempt;
//   - cancelled: nothing.
//
// "Attempts remain" means Attempt < max_attempts (default 5).
func (p Policy) Decide(in Input) Decision {
	switch in.Class {
	case schema.ClassCancelled:
		return Decision{Action: Nothing, Why: "cancelled"}
	case schema.ClassWorkerLost:
		return Decision{Action: Redispatch, Why: "worker lost"}
	case schema.ClassPermanent, schema.ClassExpired:
		return Decision{Action: DeadLetter, Class: in.Class, Why: string(in.Class)}
	case schema.ClassAppError, schema.ClassRetryable, schema.ClassTimeout:
	default:
		return Decision{Action: DeadLetter, Class: in.Class, Why: "unknown failure class"}
	}
	maxAttempts := in.Job.MaxAttempts
	if maxAttempts <= 0 {
		maxAttempts = DefaultMaxAttempts
	}
	if in.Attempt >= maxAttempts {
		return Decision{Action: DeadLetter, Class: in.Class, Why: "max attempts reached"}
	}
	if in.Class == schema.ClassTimeout {
		for _, a := range in.History {
			if a.Class == schema.ClassTimeout {
				return Decision{Action: DeadLetter, Class: in.Class, Why: "timed out twice"}
			}
		}
	}
	d := p.forType(in.Job.Type).Backoff(in.Attempt, in.Job.Backoff)
	if in.Class == schema.ClassRetryable && in.RetryAfter > d {
		d = in.RetryAfter
	}
	return Decision{Action: Retry, Delay: d, Why: string(in.Class)}
}

// Backoff is the jittered delay after failed attempt n (1-based):
// min(base·2^(n-1), max) ± Jitter. override, when set, replaces base and/or max.
func (p Policy) Backoff(n int, override *schema.Backoff) time.Duration {
	base, maxD := p.Base, p.Max
	if base <= 0 {
		base = DefaultBase
	}
	if maxD <= 0 {
		maxD = DefaultMax
	}
	if override != nil {
		if override.Base > 0 {
			base = override.Base.D()
		}
		if override.Max > 0 {
			maxD = override.Max.D()
		}
	}
	if n < 1 {
		n = 1
	}
	d := maxD
	// base·2^(n-1) without overflow: once the shift would pass max, max wins.
	if n-1 < 62 && base <= maxD>>(n-1) {
		d = base << (n - 1)
	}
	if d > maxD {
		d = maxD
	}
	j := p.Jitter
	if j == 0 {
		j = DefaultJitter
	}
	if override != nil && override.Jitter != nil {
		j = *override.Jitter // the job asked for its own spread; 0 means exact
	}
	if j <= 0 {
		return d
	}
	r := p.rand()
	f := 1 + j*(2*r-1)
	out := time.Duration(math.Round(float64(d) * f))
	if out < 0 {
		out = 0
	}
	return out
}

// forType is p with the job type's backoff applied.
func (p Policy) forType(typ string) Policy {
	if t, ok := p.Types[typ]; ok {
		if t.Base > 0 {
			p.Base = t.Base
		}
		if t.Max > 0 {
			p.Max = t.Max
		}
	}
	return p
}

func (p Policy) rand() float64 {
	if p.Rand != nil {
		return p.Rand()
	}
	return randFloat()
}
