package jobs

import (
	"context"
	"time"

	"github.com/ferryhq/ferry/platform/auth"
)

// Defaults are the deployment's submission limits; a tenant's settings
// override those it has its own of.
type Defaults struct {
	// MaxPayloadBytes is the payload limit of tenants without
	// max_payload_bytes (FERRY_API_MAX_PAYLOAD_BYTES).
	MaxPayloadBytes int
	// MaxDelay bounds run_at, delay and backoff (FERRY_API_MAX_DELAY).
	MaxDelay time.Duration
	// MaxAttemptsByType is the default attempt budget per job type
	// (FERRY_API_MAX_ATTEMPTS_TYPES).
	MaxAttemptsByType map[string]int
}

// TenantLimits are the submission limits of a tenant with settings st.
func TenantLimits(st auth.Settings, d Defaults) Limits {
	return Limits{MaxPayloadBytes: PayloadLimit(st, d.MaxPayloadBytes), MaxDelay: d.MaxDelay, MaxAttemptsByType: d.MaxAttemptsByType}
}

// LimitsReader reads a tenant's submission limits: its settings in the
// shared tenants table (through a short cache, so a change an operator
// makes is seen within the cache's TTL) over the deployment's defaults.
// The api reads them for submissions, the dlq for re-drives, so both apply
// the same limits.
type LimitsReader struct {
	tenants  *auth.TenantCache
	defaults Defaults
}

// NewLimitsReader returns a reader over tenants.
func NewLimitsReader(tenants *auth.TenantCache, d Defaults) *LimitsReader {
	return &LimitsReader{tenants: tenants, defaults: d}
}

// Limits returns tenant's limits. A tenant without a row (an operator
// acting for a tenant by header) has the deployment's.
func (r *LimitsReader) Limits(ctx context.Context, tenant string) (Limits, error) {
	t, _, err := r.tenants.Get(ctx, tenant)
	if err != nil {
		return Limits{}, err
	}
	return TenantLimits(t.Settings, r.defaults), nil
}
