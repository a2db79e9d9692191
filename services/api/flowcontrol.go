package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"

	"github.com/ferryhq/ferry/events/schema"
	"github.com/ferryhq/ferry/platform/auth"
	"github.com/ferryhq/ferry/platform/jobs"
)

// A tenant's flow control (docs/flow-control.md): dispatch rate limits and
// circuit breakers per job type, dispatch rate limits per concurrency key,
// set with the admin routes as
// "flow_control" and applied by the scheduler, which re-reads the tenants'
// settings every 2 s. Breakers are off unless
// configured: a breaker holds a type's jobs back on failures the tenant
// may consider normal, so it is each tenant's choice (or "*" for all types).

// optFlowControl tells an absent flow_control from an explicit null (which
// removes it); an object replaces it whole.
type optFlowControl struct {
	Set   bool
	Value *auth.FlowControl
}

func (o *optFlowControl) UnmarshalJSON(b []byte) error {
	o.Set = true
	if string(b) == "null" {
		return nil
	}
	var fc auth.FlowControl
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&fc); err != nil {
		return fmt.Errorf(`flow_control must be null or {"rate_limits": {type: {"per_second", "burst"}}, "breakers": {type: {"failures", "window", "cooldown"}}, "key_rate_limits": {key: {"per_second", "burst"}}}: %w`, err)
	}
	o.Value = &fc
	return nil
}

// Bounds and defaults of flow-control settings.
const (
	maxFlowTypes           = 100
	maxBreakerFailures     = 10_000
	defaultBreakerFailures = 5
	defaultBreakerWindow   = time.Minute
	defaultBreakerCooldown = 30 * time.Second
	maxBreakerWindow       = 24 * time.Hour
)

// apply validates the flow control (when set) and folds it into st,
// filling the breakers' defaults.
func (o optFlowControl) apply(st *auth.Settings, bad map[string]string) {
	if !o.Set {
		return
	}
	st.FlowControl = nil
	fc := o.Value
	if fc == nil || (len(fc.RateLimits) == 0 && len(fc.Breakers) == 0 && len(fc.KeyRateLimits) == 0) {
		return
	}
	n := len(bad)
	if len(fc.RateLimits) > maxFlowTypes || len(fc.Breakers) > maxFlowTypes || len(fc.KeyRateLimits) > maxFlowTypes {
		bad["flow_control"] = fmt.Sprintf("at most %d entries each in rate_limits, breakers and key_rate_limits", maxFlowTypes)
	}
	for typ, rl := range fc.RateLimits {
		checkDispatchRate("flow_control.rate_limits."+typ, jobs.ValidType(typ), "is not a job type", rl, bad)
	}
	for key, rl := range fc.KeyRateLimits {
		checkDispatchRate("flow_control.key_rate_limits."+key, jobs.ValidConcurrencyKey(key),
			"is not a concurrency key (1 to 128 letters, digits, '_', '.', ':', '@', '/', '+', '=' or '-', starting with a letter or digit)", rl, bad)
	}
	for typ, b := range fc.Breakers {
		field := "flow_control.breakers." + typ
		if typ != "*" && !jobs.ValidType(typ) {
			bad[field] = `is not a job type nor "*"`
			continue
		}
		b = withBreakerDefaults(b)
		switch {
		case b.Failures < 1 || b.Failures > maxBreakerFailures:
			bad[field+".failures"] = fmt.Sprintf("must be between 1 and %d", maxBreakerFailures)
		case b.Window.D() < time.Second || b.Window.D() > maxBreakerWindow:
			bad[field+".window"] = fmt.Sprintf("must be between 1s and %s", maxBreakerWindow)
		case b.Cooldown.D() < time.Second || b.Cooldown.D() > maxBreakerWindow:
			bad[field+".cooldown"] = fmt.Sprintf("must be between 1s and %s", maxBreakerWindow)
		}
		fc.Breakers[typ] = b
	}
	if len(bad) == n {
		st.FlowControl = fc
	}
}

// checkDispatchRate checks the dispatch rate limit at field, whose name
// (a job type or a concurrency key) is valid when nameOK.
func checkDispatchRate(field string, nameOK bool, badName string, rl auth.RateLimit, bad map[string]string) {
	switch {
	case !nameOK:
		bad[field] = badName
	case rl.PerSecond <= 0 || rl.PerSecond > maxRateLimit:
		bad[field+".per_second"] = fmt.Sprintf("must be above 0 and at most %d starts per second", maxRateLimit)
	case rl.Burst < 1 || rl.Burst > maxRateLimit:
		bad[field+".burst"] = fmt.Sprintf("must be between 1 and %d starts", maxRateLimit)
	}
}

// withBreakerDefaults fills a breaker's unset fields.
func withBreakerDefaults(b auth.Breaker) auth.Breaker {
	if b.Failures == 0 {
		b.Failures = defaultBreakerFailures
	}
	if b.Window == 0 {
		b.Window = schema.Duration(defaultBreakerWindow)
	}
	if b.Cooldown == 0 {
		b.Cooldown = schema.Duration(defaultBreakerCooldown)
	}
	return b
}
