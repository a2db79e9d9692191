package client

import (
	"errors"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// RetryPolicy says how often and how long the client retries.
//
// Answers that say nothing was done — 429 (rate or queue limits), 503
// (Kafka or Redis unavailable) and the 409s of a request still in flight
// (idempotency_request_in_flight, redrive_in_flight) — are retried for every
// call. Network errors and gateway errors (502, 504) are retried only for
// calls that are safe to repeat: reads, submissions (they always carry an
// Idempotency-Key, so a repeat answers the first job), cancels and single
// re-drives. Creating a webhook or rotating its secret is never repeated
// after a network error: the secret is shown once.
//
// The wait before a retry is the answer's Retry-After when present, else
// an exponential backoff with jitter: a random duration in [d/2, d] with
// d = min(BaseDelay·2^(n-1), MaxDelay).
type RetryPolicy struct {
	// MaxAttempts is the most attempts of one call, the first included.
	// Defaults to 5; 1 turns retries off.
	MaxAttempts int
	// BaseDelay is the first backoff. Defaults to 200ms.
	BaseDelay time.Duration
	// MaxDelay caps a backoff. Defaults to 10s.
	MaxDelay time.Duration
	// MaxRetryAfter is the longest Retry-After the client waits for; a
	// longer one is returned as the *APIError (its RetryAfter says when to
	// come back). Defaults to 1 minute.
	MaxRetryAfter time.Duration
}

func (p RetryPolicy) withDefaults() RetryPolicy {
	if p.MaxAttempts <= 0 {
		p.MaxAttempts = 5
	}
	if p.BaseDelay <= 0 {
		p.BaseDelay = 200 * time.Millisecond
	}
	if p.MaxDelay <= 0 {
		p.MaxDelay = 10 * time.Second
	}
	if p.MaxRetryAfter <= 0 {
		p.MaxRetryAfter = time.Minute
	}
	return p
}

// Backoff is the jittered wait before retry number n (1 for the first).
func (p RetryPolicy) Backoff(n int) time.Duration {
	p = p.withDefaults()
	d := p.BaseDelay
	for i := 1; i < n && d < p.MaxDelay; i++ {
		d *= 2
	}
	d = min(d, p.MaxDelay)
	return d/2 + rand.N(d/2+1)
}

// decide says whether attempt (1-based) of cl is retried, and after how
// long, given its answer or error.
func (p RetryPolicy) decide(cl *call, attempt int, resp *response, err error) (time.Duration, bool) {
	if attempt >= p.MaxAttempts {
		return 0, false
	}
	if err != nil {
		var ne *NetworkError
		if errors.As(err, &ne) && cl.idempotent {
			return p.Backoff(attempt), true
		}
		return 0, false
	}
	if !retryableStatus(cl, resp) {
		return 0, false
	}
	if ra, ok := parseRetryAfter(resp.header.Get("Retry-After"), time.Now()); ok {
		if ra > p.MaxRetryAfter {
			return 0, false
		}
		return ra, true
	}
	return p.Backoff(attempt), true
}

// retryableStatus says whether an answer invites the same request again.
func retryableStatus(cl *call, resp *response) bool {
	switch resp.status {
	case http.StatusTooManyRequests, http.StatusServiceUnavailable:
		return true
	case http.StatusBadGateway, http.StatusGatewayTimeout:
		return cl.idempotent
	case http.StatusConflict:
		code := errorCode(resp.body)
		return code == CodeIdempotencyInFlight || code == CodeRedriveInFlight
	}
	return false
}

// parseRetryAfter reads a Retry-After header: delay seconds or an HTTP date.
func parseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		if n < 0 {
			return 0, false
		}
		return time.Duration(min(n, int64(24*time.Hour/time.Second))) * time.Second, true
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(t.Sub(now), 0), true
	}
	return 0, false
}
