package handlers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/ferryhq/ferry/events/schema"
	"github.com/ferryhq/ferry/platform/callback"
	"github.com/ferryhq/ferry/services/worker/workertype"
)

// Registrar is what Register needs of a registry (worker.Registry).
type Registrar interface {
	Register(typ string, h workertype.HandlerFunc)
}

// Options configure the built-in handlers.
type Options struct {
	// Allow lists the prefixes the http handler may reach despite the SSRF
	// guard (FERRY_OUTBOUND_ALLOW). Defaults to none.
	Allow []netip.Prefix
	// Signer gives the keys that sign the http handler's requests
	// (signing.Secrets; worker.Build wires it). Nil sends them unsigned,
	// for unit tests of handlers only.
	Signer Signer
	// Callbacks grants async http jobs their callback token (worker.Build
	// wires a callback.Issuer). Nil: async jobs fail permanent.
	Callbacks Callbacks
	// AsyncLease is the lease of an async http job whose payload sets none
	// (FERRY_HTTP_ASYNC_LEASE). Defaults to DefaultAsyncLease.
	AsyncLease time.Duration
}

// Callbacks grants the dispatches of async http jobs the right to report
// through the api's callback routes (callback.Issuer).
type Callbacks interface {
	// Issue records c's dispatch as the one that may report for its job
	// and returns the URL and token its request carries; ok is false when a
	// later attempt holds the job already.
	Issue(ctx context.Context, c callback.Claims, now time.Time) (g callback.Grant, ok bool, err error)
	// Settle ends c's dispatch as reported by the worker itself.
	Settle(ctx context.Context, c callback.Claims, now time.Time) error
}

// Signer returns the HMAC keys that sign a tenant's requests at now, none
// when the tenant has no signing secret.
type Signer interface {
	Keys(ctx context.Context, tenant string, now time.Time) ([][]byte, error)
}

// Register adds every built-in handler to r.
func Register(r Registrar, o Options) {
	r.Register("http", NewHTTP(o).Handle)
	r.Register("noop", Noop)
	r.Register("sleep", Sleep)
	r.Register("fail", Fail)
}

// decode unmarshals a job payload; a bad payload is a permanent failure.
func decode(job *workertype.Job, v any) error {
	if len(job.Payload) == 0 {
		return nil
	}
	if err := json.Unmarshal(job.Payload, v); err != nil {
		return workertype.Permanent(fmt.Errorf("%s: invalid payload: %w", job.Type, err))
	}
	return nil
}

// Noop completes at once.
func Noop(context.Context, *workertype.Job) (any, error) { return nil, nil }

// Sleep sleeps {"ms": N} milliseconds, reporting progress as it goes.
func Sleep(ctx context.Context, job *workertype.Job) (any, error) {
	var p struct {
		MS int64 `json:"ms"`
	}
	if err := decode(job, &p); err != nil {
		return nil, err
	}
	if p.MS < 0 {
		return nil, workertype.Permanent(errors.New("sleep: ms must be ≥ 0"))
	}
	total := time.Duration(p.MS) * time.Millisecond
	step := max(total/10, 100*time.Millisecond)
	start := time.Now()
	t := time.NewTicker(step)
	defer t.Stop()
	end := time.NewTimer(total)
	defer end.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-end.C:
			job.Progress(100, "done")
			return map[string]any{"slept_ms": p.MS}, nil
		case <-t.C:
			pct := float64(time.Since(start)) / float64(total) * 100
			job.Progress(min(pct, 99.9), fmt.Sprintf("slept %s of %s", time.Since(start).Round(time.Millisecond), total))
		}
	}
}

// Fail fails the first {"times": N} attempts with {"class": …}, then succeeds.
func Fail(_ context.Context, job *workertype.Job) (any, error) {
	p := struct {
		Times      int             `json:"times"`
		Class      string          `json:"class"`
		RetryAfter schema.Duration `json:"retry_after"`
		Message    string          `json:"message"`
	}{Times: 1}
	if err := decode(job, &p); err != nil {
		return nil, err
	}
	if job.Attempt > p.Times {
		return map[string]any{"attempt": job.Attempt}, nil
	}
	msg := p.Message
	if msg == "" {
		msg = fmt.Sprintf("fail handler: attempt %d of %d fails", job.Attempt, p.Times)
	}
	err := errors.New(msg)
	switch schema.ErrorClass(p.Class) {
	case "", schema.ClassAppError:
		return nil, err
	case schema.ClassPermanent:
		return nil, workertype.Permanent(err)
	case schema.ClassRetryable:
		return nil, workertype.Retryable(err, p.RetryAfter.D())
	case schema.ClassTimeout:
		return nil, fmt.Errorf("%w: %w", err, context.DeadlineExceeded)
	}
	return nil, workertype.Permanent(fmt.Errorf("fail: unsupported class %q (use app_error, permanent, timeout or retryable)", p.Class))
}
