package api

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/ferryhq/ferry/events/schema"
	"github.com/ferryhq/ferry/platform/callback"
	"github.com/ferryhq/ferry/platform/httpx"
	"github.com/ferryhq/ferry/platform/secretbox"
)

// The callback routes let the receiver of an async http job (one that
// answered 202 Accepted) report on the attempt it holds: heartbeat,
// progress, complete, fail. They are authenticated by the job-scoped token
// the request carried (platform/callback), not by an API key, and produce
// the lifecycle events a worker would, so the scheduler, projections, SSE,
// webhooks and audit treat them alike. Which dispatch may still report is
// fenced in Postgres (callback.Attempts): a late report of an older attempt
// or dispatch, or a second outcome, changes nothing.

// callbackWorkerID is the worker_id of the events a receiver's reports
// produce.
const callbackWorkerID = "callback"

// Bounds of a report.
const (
	// maxCallbackBody bounds a report's body: a result of up to
	// callbackMaxResult, escaped, and the rest.
	maxCallbackBody = 4 * callbackMaxResult
	// callbackMaxResult bounds a result: a worker's default bound of a
	// handler's result (worker.Config.MaxResultBytes).
	callbackMaxResult = 64 << 10
	// maxCallbackRetryAfter bounds the retry_after of a fail, as the http
	// handler bounds a Retry-After header.
	maxCallbackRetryAfter = 24 * time.Hour
)

// The outcomes a receiver may report with fail: the classes a handler
// error may have (worker_lost, expired and cancelled are Ferry's own).
var callbackFailClasses = []schema.ErrorClass{schema.ClassAppError, schema.ClassRetryable, schema.ClassPermanent, schema.ClassTimeout}

// callbackReport is the body of every callback route; each uses its part.
type callbackReport struct {
	Percent    *float64        `json:"percent"`
	Message    string          `json:"message"`
	Result     json.RawMessage `json:"result"`
	Class      string          `json:"class"`
	RetryAfter schema.Duration `json:"retry_after"`
}

// callbackAction is one callback route: outcome is the state a terminal
// report records ("" for heartbeat and progress), event builds its event.
type callbackAction struct {
	name    string
	outcome string
	event   func(c callback.Claims, rep callbackReport, job *Job, now time.Time) (schema.Lifecycle, error)
}

var callbackActions = []callbackAction{
	{"heartbeat", "", heartbeatEvent},
	{"progress", "", progressEvent},
	{"complete", callback.StateCompleted, completeEvent},
	{"fail", callback.StateFailed, failEvent},
}

// callbackRoutes registers the callback routes, outside the API-key group.
func (s *Service) callbackRoutes(r chi.Router) {
	for _, a := range callbackActions {
		r.Post("/v1/jobs/{id}/callback/"+a.name, s.handleCallback(a))
	}
}

// openCallbacks prepares the callback routes over box (the api's
// FERRY_SECRET_KEY box, which the workers mint tokens with).
func (s *Service) openCallbacks(box *secretbox.Box) {
	s.callbackBox, s.callbacks = box, callback.NewAttempts(s.deps.Postgres)
}

func (s *Service) handleCallback(a callbackAction) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		c, err := s.callbackClaims(r)
		if err != nil {
			httpx.WriteError(w, r, err)
			return
		}
		var rep callbackReport
		if r.ContentLength != 0 { // a heartbeat, or a complete without result, may send no body
			if err := httpx.DecodeJSON(w, r, maxCallbackBody, &rep); err != nil {
				httpx.WriteError(w, r, err)
				return
			}
		}
		job, found, err := s.lookup(ctx, c.TenantID, c.JobID)
		if err != nil {
			httpx.WriteError(w, r, err)
			return
		}
		jobp := &job
		if !found {
			jobp = nil // the projection has not seen it yet: the fence decides alone
		}
		v, err := s.callbackVerdict(ctx, a, c, jobp)
		if err != nil {
			httpx.WriteError(w, r, err)
			return
		}
		switch v {
		case callback.Superseded:
			httpx.WriteError(w, r, supersededError(jobp))
			return
		case callback.Repeat:
			httpx.WriteJSON(w, http.StatusOK, callbackAnswer(c, a, false))
			return
		}
		if err := s.applyCallback(ctx, a, c, rep, jobp); err != nil {
			httpx.WriteError(w, r, err)
			return
		}
		httpx.WriteJSON(w, http.StatusOK, callbackAnswer(c, a, true))
	}
}

// callbackClaims authenticates a report: the bearer token must be a callback
// token minted with this deployment's key, unexpired, for the job in the path.
func (s *Service) callbackClaims(r *http.Request) (callback.Claims, error) {
	if s.callbackBox == nil {
		return callback.Claims{}, httpx.Errorf(http.StatusServiceUnavailable, "callbacks_not_configured",
			"this api has no FERRY_SECRET_KEY: it cannot check callback tokens")
	}
	token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok {
		return callback.Claims{}, httpx.Errorf(http.StatusUnauthorized, "invalid_callback_token",
			"send the job's Ferry-Callback-Token as Authorization: Bearer <token>")
	}
	c, err := callback.Open(s.callbackBox, strings.TrimSpace(token), s.cfg.Now())
	switch {
	case errors.Is(err, callback.ErrExpiredToken):
		return c, httpx.Errorf(http.StatusUnauthorized, "callback_token_expired",
			"the callback token expired (FERRY_HTTP_CALLBACK_TOKEN_TTL); the attempt is dispatched again once its lease runs out")
	case err != nil:
		return c, httpx.Errorf(http.StatusUnauthorized, "invalid_callback_token", "the callback token is not valid")
	case c.JobID != chi.URLParam(r, "id"):
		return c, httpx.Errorf(http.StatusForbidden, "callback_token_mismatch", "the callback token is for another job")
	}
	return c, nil
}

// callbackVerdict fences a report: an attempt the status projection shows
// behind a newer one or finished no longer holds its job (a terminal report
// it already made is a Repeat); otherwise the Postgres fence decides, and a
// terminal report claims the attempt in the same statement.
func (s *Service) callbackVerdict(ctx context.Context, a callbackAction, c callback.Claims, job *Job) (callback.Verdict, error) {
	stale := job != nil && (job.Attempt > c.Attempt || job.Status.Terminal())
	switch {
	case a.outcome == "" && stale:
		return callback.Superseded, nil
	case a.outcome == "":
		return s.callbacks.Check(ctx, c)
	case stale:
		return s.callbacks.Recorded(ctx, c, a.outcome)
	}
	return s.callbacks.Claim(ctx, c, a.outcome, s.cfg.Now())
}

// applyCallback produces a's event. A terminal report whose event could not
// be produced gives its claim back, so the receiver's retry is applied.
func (s *Service) applyCallback(ctx context.Context, a callbackAction, c callback.Claims, rep callbackReport, job *Job) error {
	ev, err := a.event(c, rep, job, s.cfg.Now().UTC())
	if err == nil {
		err = s.produceLifecycle(ctx, ev)
	}
	if err != nil && a.outcome != "" {
		if uerr := s.callbacks.Unclaim(context.WithoutCancel(ctx), c, a.outcome); uerr != nil {
			s.log.ErrorContext(ctx, "giving a callback claim back", "tenant", c.TenantID, "job_id", c.JobID, "err", uerr)
		}
	}
	return err
}

// produceLifecycle produces ev on its lifecycle topic and waits for it.
func (s *Service) produceLifecycle(ctx context.Context, ev schema.Lifecycle) error {
	rec, err := schema.NewRecord(s.deps.Topics.Lifecycle(ev.EventType()), source, ev)
	if err != nil {
		return err
	}
	if err := s.deps.Kafka.ProduceSync(ctx, rec).FirstErr(); err != nil {
		ref := ev.Ref()
		s.log.ErrorContext(ctx, "produce failed", "event", ev.EventType(), "tenant", ref.TenantID, "job_id", ref.JobID, "err", err)
		return errUnavailable
	}
	return nil
}

func callbackAnswer(c callback.Claims, a callbackAction, applied bool) map[string]any {
	return map[string]any{"job_id": c.JobID, "attempt": c.Attempt, "action": a.name, "applied": applied}
}

// supersededError tells the receiver to stop: this attempt no longer holds
// the job.
func supersededError(job *Job) *httpx.Error {
	msg := "this attempt no longer holds the job (a newer attempt or dispatch took it, it already reported its outcome, or the worker settled it); stop working on it"
	if job != nil {
		msg += "; the job is " + string(job.Status) + " at attempt " + strconv.Itoa(job.Attempt)
	}
	return httpx.Errorf(http.StatusConflict, "attempt_superseded", "%s", msg)
}

func ref(c callback.Claims) schema.JobRef {
	return schema.JobRef{JobID: c.JobID, TenantID: c.TenantID, Attempt: c.Attempt}
}

// heartbeatEvent re-reports the job's latest progress with the lease.
func heartbeatEvent(c callback.Claims, _ callbackReport, job *Job, now time.Time) (schema.Lifecycle, error) {
	p := schema.Progress{JobRef: ref(c), WorkerID: callbackWorkerID, DispatchID: c.DispatchID, At: now, Lease: schema.Duration(c.Lease)}
	if job != nil && job.Progress != nil && job.Attempt == c.Attempt {
		p.Percent, p.Message = job.Progress.Percent, job.Progress.Message
	}
	return p, nil
}

func progressEvent(c callback.Claims, rep callbackReport, _ *Job, now time.Time) (schema.Lifecycle, error) {
	if rep.Percent == nil || math.IsNaN(*rep.Percent) || *rep.Percent < 0 || *rep.Percent > 100 {
		return nil, invalidCallback("progress needs percent, a number from 0 to 100")
	}
	return schema.Progress{JobRef: ref(c), WorkerID: callbackWorkerID, DispatchID: c.DispatchID, Percent: *rep.Percent,
		Message: schema.EventText(rep.Message, schema.MaxProgressMessage), At: now, Lease: schema.Duration(c.Lease)}, nil
}

// completeEvent checks the result as storable (what every projection can
// keep) within callbackMaxResult.
func completeEvent(c callback.Claims, rep callbackReport, job *Job, now time.Time) (schema.Lifecycle, error) {
	result := rep.Result
	if string(result) == "null" {
		result = nil
	}
	if len(result) > callbackMaxResult {
		return nil, httpx.Errorf(http.StatusRequestEntityTooLarge, "result_too_large", "the result is %d bytes of JSON; at most %d", len(result), callbackMaxResult)
	}
	if result != nil {
		if err := schema.CheckJSON(result); err != nil {
			return nil, httpx.Errorf(http.StatusUnprocessableEntity, "result_unstorable", "the result cannot be stored: %v", err)
		}
	}
	return schema.Completed{JobRef: ref(c), WorkerID: callbackWorkerID, DispatchID: c.DispatchID, Result: result,
		StartedAt: startedAt(job, now), FinishedAt: now}, nil
}

func failEvent(c callback.Claims, rep callbackReport, job *Job, now time.Time) (schema.Lifecycle, error) {
	class := schema.ErrorClass(rep.Class)
	if class == "" {
		class = schema.ClassAppError
	}
	if !slices.Contains(callbackFailClasses, class) {
		return nil, invalidCallback("class must be one of app_error, retryable, permanent, timeout")
	}
	if ra := rep.RetryAfter.D(); ra < 0 || ra > maxCallbackRetryAfter {
		return nil, invalidCallback("retry_after must be a duration from 0 to 24h")
	}
	msg := schema.EventText(rep.Message, schema.MaxErrorMessage)
	if msg == "" {
		msg = "the receiver reported a failure"
	}
	return schema.Failed{JobRef: ref(c), WorkerID: callbackWorkerID, DispatchID: c.DispatchID,
		Error: schema.ErrorInfo{Class: class, Message: msg}, RetryAfter: rep.RetryAfter,
		StartedAt: startedAt(job, now), FinishedAt: now}, nil
}

// startedAt is when the attempt started, as the projection knows it.
func startedAt(job *Job, now time.Time) time.Time {
	if job != nil && job.StartedAt != nil {
		return job.StartedAt.UTC()
	}
	return now
}

func invalidCallback(msg string) *httpx.Error {
	return httpx.Errorf(http.StatusUnprocessableEntity, "invalid_callback", "%s", msg)
}
