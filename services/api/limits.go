package api

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/ferryhq/ferry/platform/auth"
	"github.com/ferryhq/ferry/platform/httpx"
	"github.com/ferryhq/ferry/services/api/internal/limits"
)

// queueFullRetryAfter is the Retry-After of tenant_queue_full: about when a
// fresh count of the tenant's jobs is read.
const queueFullRetryAfter = 2 * time.Second

// tenantSettings returns the caller's tenant settings (cached for
// Config.TenantCacheTTL). A tenant without a row (an admin acting for a
// tenant by header) has no limits.
func (s *Service) tenantSettings(ctx context.Context) (auth.Settings, error) {
	p, _ := auth.FromContext(ctx)
	t, _, err := s.tenants.Get(ctx, p.TenantID)
	if err != nil {
		s.log.ErrorContext(ctx, "tenant settings read failed", "tenant", p.TenantID, "err", err)
		return auth.Settings{}, errUnavailable
	}
	return t.Settings, nil
}

// maxPayload is the tenant's payload limit: its own when set, else the
// service's.
func (s *Service) maxPayload(st auth.Settings) int {
	if st.MaxPayloadBytes > 0 {
		return st.MaxPayloadBytes
	}
	return s.cfg.MaxPayloadBytes
}

// checkLimits admits n new jobs of tenant, or returns the *httpx.Error
// that rejects them all: max_queued first (it costs no tokens), then the
// token bucket.
func (s *Service) checkLimits(ctx context.Context, tenant string, st auth.Settings, n int) error {
	if st.MaxQueued > 0 {
		c, err := s.counts.Get(ctx, tenant)
		if err != nil {
			s.log.ErrorContext(ctx, "tenant job counts read failed", "tenant", tenant, "err", err)
			return errUnavailable
		}
		if c.Pending+int64(n) > int64(st.MaxQueued) {
			return &httpx.Error{Status: http.StatusTooManyRequests, Code: "tenant_queue_full", RetryAfter: queueFullRetryAfter,
				Message: fmt.Sprintf("the tenant has about %d jobs waiting to run and a limit of %d (max_queued); %d more do not fit",
					c.Pending, st.MaxQueued, n)}
		}
	}
	if rl := st.RateLimit; rl != nil && rl.PerSecond > 0 && rl.Burst > 0 {
		if n > rl.Burst {
			return httpx.Errorf(http.StatusRequestEntityTooLarge, "batch_exceeds_rate_limit",
				"the request creates %d jobs but the tenant's rate limit allows at most %d at once (burst); split it", n, rl.Burst)
		}
		d, err := limits.Take(ctx, s.deps.Redis, tenant, rl.PerSecond, rl.Burst, n)
		if err != nil {
			// Fail open: a Redis outage must not stop submissions; the
			// queue limit still bounds the damage.
			s.log.WarnContext(ctx, "rate limit check failed; admitting", "tenant", tenant, "err", err)
			return nil
		}
		if !d.Allowed {
			return &httpx.Error{Status: http.StatusTooManyRequests, Code: "tenant_rate_limited", RetryAfter: d.RetryAfter,
				Message: fmt.Sprintf("the tenant's submission rate limit (%g jobs/s, burst %d) is exhausted; %d jobs fit again in %v",
					rl.PerSecond, rl.Burst, n, d.RetryAfter.Round(time.Millisecond))}
		}
	}
	return nil
}
