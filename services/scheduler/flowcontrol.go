package scheduler

import (
	"github.com/ferryhq/ferry/platform/auth"
	"github.com/ferryhq/ferry/services/scheduler/internal/qstore"
)

// Flow control (docs/flow-control.md): concurrency keys (carried by each
// job), dispatch rate limits (tenant settings, by job type or concurrency
// key) and circuit breakers (tenant settings, by job type) are enforced inside the dispatch script (internal/qstore/gates.go).
// This file brings the tenant settings in (syncSettings, tenants.go);
// breakers.go serves the breakers and concurrency keys and publishes the
// breakers' state changes.

// flowSettings converts a tenant's flow control (nil when it has none) to
// what the dispatch script reads; false when there is nothing to enforce.
func flowSettings(fc *auth.FlowControl) (qstore.FlowSettings, bool) {
	if fc == nil {
		return qstore.FlowSettings{}, false
	}
	f := qstore.FlowSettings{RateLimits: map[string]qstore.RateLimit{}, Breakers: map[string]qstore.BreakerConfig{},
		KeyRateLimits: map[string]qstore.RateLimit{}}
	for typ, rl := range fc.RateLimits {
		f.RateLimits[typ] = qstore.RateLimit{PerSecond: rl.PerSecond, Burst: rl.Burst}
	}
	for typ, b := range fc.Breakers {
		f.Breakers[typ] = qstore.BreakerConfig{Failures: b.Failures, Window: b.Window.D(), Cooldown: b.Cooldown.D()}
	}
	for key, rl := range fc.KeyRateLimits {
		f.KeyRateLimits[key] = qstore.RateLimit{PerSecond: rl.PerSecond, Burst: rl.Burst}
	}
	return f, !f.Empty()
}
