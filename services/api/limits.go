package api

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/ferryhq/ferry/platform/auth"
	"github.com/ferryhq/ferry/platform/httpx"
	"github.com/ferryhq/ferry/platform/jobs"
	"github.com/ferryhq/ferry/platform/service"
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

// maxPayload is the tenant's payload limit (jobs.PayloadLimit).
func (s *Service) maxPayload(st auth.Settings) int {
	return jobs.PayloadLimit(st, s.cfg.MaxPayloadBytes)
}

// jobDefaults are the deployment's submission limits, which a tenant's
// settings override (jobs.TenantLimits).
func (s *Service) jobDefaults() jobs.Defaults {
	return jobs.Defaults{MaxPayloadBytes: s.cfg.MaxPayloadBytes, MaxDelay: s.cfg.MaxDelay, MaxAttemptsByType: s.cfg.MaxAttemptsByType}
}

// maxQueued is the tenant's max_queued: its own when set, else the
// service's default, so no tenant may fill Redis without bound.
func (s *Service) maxQueued(st auth.Settings) int {
	if st.MaxQueued > 0 {
		return st.MaxQueued
	}
	return s.cfg.DefaultMaxQueued
}

// maxQueues is the tenant's max_queues: its own when set, else the
// service's default.
func (s *Service) maxQueues(st auth.Settings) int {
	if st.MaxQueues > 0 {
		return st.MaxQueues
	}
	return s.cfg.DefaultMaxQueues
}

// checkLimits admits new jobs of tenant in queues (one entry per job), or
// returns the *httpx.Error that rejects them all: max_queued and
// max_queues first (they cost no tokens), then the token bucket. Admitted
// queue names are noted at once, so a flood of new names is bounded before
// the projection sees its jobs.
func (s *Service) checkLimits(ctx context.Context, tenant string, st auth.Settings, queues []string) error {
	n := len(queues)
	if err := s.checkQueued(ctx, tenant, st, n); err != nil {
		return err
	}
	fresh, err := s.checkQueues(ctx, tenant, st, queues)
	if err != nil {
		return err
	}
	if err := s.checkRate(ctx, tenant, st, n); err != nil {
		return err
	}
	s.queues.Note(tenant, fresh)
	return nil
}

// checkQueued refuses n more jobs past the tenant's max_queued.
func (s *Service) checkQueued(ctx context.Context, tenant string, st auth.Settings, n int) error {
	limit := s.maxQueued(st)
	c, err := s.counts.Get(ctx, tenant)
	if err != nil {
		s.log.ErrorContext(ctx, "tenant job counts read failed", "tenant", tenant, "err", err)
		return errUnavailable
	}
	if c.Pending+int64(n) > int64(limit) {
		return &httpx.Error{Status: http.StatusTooManyRequests, Code: "tenant_queue_full", RetryAfter: queueFullRetryAfter,
			Message: fmt.Sprintf("the tenant has about %d jobs waiting to run and a limit of %d (max_queued); %d more do not fit",
				c.Pending, limit, n)}
	}
	return nil
}

// checkQueues refuses jobs that would give the tenant more live queues
// than its max_queues, and returns the queue names that are new.
func (s *Service) checkQueues(ctx context.Context, tenant string, st auth.Settings, queues []string) ([]string, error) {
	limit := s.maxQueues(st)
	fresh, total, err := s.queues.Check(ctx, tenant, queues)
	if err != nil {
		s.log.ErrorContext(ctx, "tenant queues read failed", "tenant", tenant, "err", err)
		return nil, errUnavailable
	}
	if len(fresh) > 0 && total > limit {
		return nil, &httpx.Error{Status: http.StatusTooManyRequests, Code: "too_many_queues", RetryAfter: queueFullRetryAfter,
			Message: fmt.Sprintf("the tenant has about %d queues with unfinished jobs and a limit of %d (max_queues); "+
				"new queue names (%d in this request) are accepted again once queues drain — reuse existing queues", total-len(fresh), limit, len(fresh))}
	}
	return fresh, nil
}

// checkRate takes n tokens from the tenant's rate limit, if it has one.
func (s *Service) checkRate(ctx context.Context, tenant string, st auth.Settings, n int) error {
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

// retentionBatch bounds the rows one retention statement deletes.
const retentionBatch = 1000

// retentionLoop deletes finished jobs older than JobRetention, and
// per-queue count rows at zero, every RetentionInterval until ctx ends.
func (s *Service) retentionLoop(ctx context.Context) {
	service.Every(ctx, s.cfg.RetentionInterval, func(ctx context.Context) {
		if err := s.retain(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("job retention", "err", err)
		}
	})
}

// retain runs one retention pass in bounded batches, each its own short
// statement, so the projection and readers never wait long on it.
func (s *Service) retain(ctx context.Context) error {
	if err := s.store.DeleteThroughputBefore(ctx, s.cfg.Now().Add(-throughputRetention)); err != nil {
		return err
	}
	cutoff := s.cfg.Now().Add(-s.cfg.JobRetention)
	var total int64
	for ctx.Err() == nil {
		n, err := s.store.DeleteFinished(ctx, cutoff, retentionBatch)
		if err != nil {
			return err
		}
		total += n
		if n < retentionBatch {
			break
		}
	}
	if total > 0 {
		s.log.Info("finished jobs past retention deleted", "jobs", total, "before", cutoff)
	}
	if s.callbacks != nil {
		if _, err := s.callbacks.Prune(ctx, cutoff); err != nil {
			return err
		}
	}
	for ctx.Err() == nil {
		n, err := s.store.DeleteIdleQueues(ctx, retentionBatch)
		if err != nil {
			return err
		}
		if n < retentionBatch {
			break
		}
	}
	return nil
}
