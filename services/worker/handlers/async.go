package handlers

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/ferryhq/ferry/platform/callback"
	"github.com/ferryhq/ferry/services/worker/workertype"
)

// Bounds of an async http job's lease.
const (
	DefaultAsyncLease = 5 * time.Minute
	MinAsyncLease     = time.Second
	MaxAsyncLease     = 24 * time.Hour
)

// CheckAsyncLease says why lease cannot be an async lease, naming it what.
func CheckAsyncLease(lease time.Duration, what string) error {
	if lease < MinAsyncLease || lease > MaxAsyncLease {
		return fmt.Errorf("%s must be between %s and %s, got %s", what, MinAsyncLease, MaxAsyncLease, lease)
	}
	return nil
}

// asyncAttempt is the callback grant of one async http request: sent with
// the request, and settled by the worker unless the receiver took the job.
type asyncAttempt struct {
	callbacks Callbacks
	claims    callback.Claims
	taken     bool
}

// grantAsync records the job's dispatch as the one that may report back
// and sets the callback headers on req. An async job without callbacks
// configured is permanent (no receiver could ever complete it); a later
// attempt already holding the job makes this stale dispatch fail without
// sending (the scheduler ignores a failure of a dispatch it no longer has
// in flight).
func (h *HTTP) grantAsync(ctx context.Context, req *http.Request, job *workertype.Job, lease time.Duration) (*asyncAttempt, error) {
	if h.callbacks == nil {
		return nil, workertype.Permanent(errors.New("http: async jobs are not enabled on this worker"))
	}
	c := callback.Claims{TenantID: job.TenantID, JobID: job.ID, Attempt: job.Attempt, DispatchID: job.DispatchID, Lease: lease}
	g, ok, err := h.callbacks.Issue(ctx, c, time.Now())
	switch {
	case errors.Is(err, callback.ErrNoCallbackURL):
		return nil, workertype.Permanent(fmt.Errorf("http: %w", err))
	case err != nil:
		return nil, workertype.Retryable(fmt.Errorf("http: granting the callback: %w", err), 0)
	case !ok:
		return nil, errors.New("http: a later attempt of the job holds it; this dispatch is stale")
	}
	req.Header.Set(callback.HeaderURL, g.URL)
	req.Header.Set(callback.HeaderToken, g.Token)
	req.Header.Set(callback.HeaderLease, strconv.FormatInt(int64((lease+time.Second-1)/time.Second), 10))
	return &asyncAttempt{callbacks: h.callbacks, claims: c}, nil
}

// handOver turns a 202 Accepted into the hand-over of the attempt to the
// receiver; nil for any other status (or a job that is not async).
func (a *asyncAttempt) handOver(resp *http.Response) *workertype.Detached {
	if a == nil || resp.StatusCode != http.StatusAccepted {
		return nil
	}
	a.taken = true
	return &workertype.Detached{Lease: a.claims.Lease, Message: "accepted by the receiver; it reports through the callback API"}
}

// settle ends the grant when the receiver did not take the job (any other
// answer, or none): the worker reports the attempt, so no callback of this
// dispatch counts. Best effort: should it fail, the api still refuses
// reports on an attempt its status projection shows finished or superseded.
func (a *asyncAttempt) settle(ctx context.Context) {
	if a == nil || a.taken {
		return
	}
	_ = a.callbacks.Settle(context.WithoutCancel(ctx), a.claims, time.Now())
}
