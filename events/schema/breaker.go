package schema

import (
	"errors"
	"time"
)

// CETypeBreakerChanged is the CloudEvents type of a circuit breaker's
// state change (flow control; docs/flow-control.md).
const CETypeBreakerChanged = "ferry.breaker.changed.v1"

// Breaker states.
const (
	BreakerClosed   = "closed"
	BreakerOpen     = "open"
	BreakerHalfOpen = "half_open"
)

// Why a breaker changed state.
const (
	// BreakerReasonFailures: the failures within the window reached the threshold.
	BreakerReasonFailures = "failures"
	// BreakerReasonCooldown: the cool-down ended; one probe job may run.
	BreakerReasonCooldown = "cooldown_elapsed"
	// BreakerReasonProbeFailed: the probe failed; open again.
	BreakerReasonProbeFailed = "probe_failed"
	// BreakerReasonProbeSucceeded: the probe succeeded; closed.
	BreakerReasonProbeSucceeded = "probe_succeeded"
	// BreakerReasonReset: an operator or the tenant reset the breaker.
	BreakerReasonReset = "reset"
)

// BreakerChanged is a circuit breaker of one tenant and job type changing
// state. The scheduler publishes it on the breakers topic; the audit log
// records it.
type BreakerChanged struct {
	TenantID string `json:"tenant_id"`
	// JobType is the job type the breaker guards.
	JobType string `json:"job_type"`
	From    string `json:"from"`
	To      string `json:"to"`
	Reason  string `json:"reason"`
	// Failures counted in the window when it opened (reason failures).
	Failures int `json:"failures,omitempty"`
	// Actor is who reset it (reason reset).
	Actor string    `json:"actor,omitempty"`
	At    time.Time `json:"at"`
}

func (BreakerChanged) CEType() string { return CETypeBreakerChanged }

// Subject is the job type.
func (b BreakerChanged) Subject() string { return b.JobType }
func (b BreakerChanged) Tenant() string  { return b.TenantID }

func (b BreakerChanged) validate() error {
	if b.TenantID == "" || b.JobType == "" || b.To == "" {
		return errors.New("tenant_id, job_type and to are required")
	}
	return nil
}

// Breakers is the topic of circuit breaker state changes.
func (t Topics) Breakers() string { return t.prefix() + "breakers" }
