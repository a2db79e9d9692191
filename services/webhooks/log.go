package webhooks

import (
	"errors"
	"net/http"
	"time"
	"unicode/utf8"

	"github.com/go-chi/chi/v5"

	"github.com/ferryhq/ferry/platform/auth"
	"github.com/ferryhq/ferry/platform/httpx"
	"github.com/ferryhq/ferry/services/webhooks/internal/store"
)

// maxShownBody bounds the request body a delivery's log shows. Bodies are
// lifecycle events: a result or payload near its size limit makes a large
// one, which the log need not repeat in full.
const maxShownBody = 64 << 10

// Delivery is one entry of a delivery log.
type Delivery struct {
	// ID is the webhook-id header, the same on every attempt.
	ID         string `json:"id"`
	EndpointID string `json:"endpoint_id"`
	// JobID is the job whose event this delivery sends.
	JobID     string `json:"job_id"`
	EventID   string `json:"event_id"`
	EventType string `json:"event_type"`
	// Status is pending, delivered, failed or cancelled.
	Status         string     `json:"status"`
	Attempts       int        `json:"attempts"`
	LastStatusCode *int       `json:"last_status_code,omitempty"`
	LastLatency    string     `json:"last_latency,omitempty"`
	LastError      string     `json:"last_error,omitempty"`
	NextRetryAt    *time.Time `json:"next_retry_at,omitempty"`
	DeliveredAt    *time.Time `json:"delivered_at,omitempty"`
	CreatedAt      time.Time  `json:"created_at"`
	// ReplayRequestedBy is the key id of a replay not sent yet.
	ReplayRequestedBy string `json:"replay_requested_by,omitempty"`
}

func deliveryJSON(d store.Delivery) Delivery {
	out := Delivery{
		ID: d.ID, EndpointID: d.EndpointID, JobID: d.JobID, EventID: d.EventID, EventType: d.EventType, Status: d.Status,
		Attempts: d.Attempts, LastStatusCode: d.LastStatusCode, LastError: d.LastError, DeliveredAt: d.DeliveredAt,
		CreatedAt: d.CreatedAt, ReplayRequestedBy: d.ReplayBy,
	}
	if d.LastLatency != nil {
		out.LastLatency = latency(*d.LastLatency)
	}
	if d.Status == store.StatusPending {
		out.NextRetryAt = d.NextAttemptAt
	}
	return out
}

func latency(ms int) string { return (time.Duration(ms) * time.Millisecond).String() }

// DeliveryLog is GET /v1/webhooks/{id}/deliveries/{delivery_id}: the
// delivery, the request it sends and every attempt with its response.
type DeliveryLog struct {
	Delivery
	Request LoggedRequest `json:"request"`
	// History is every attempt, oldest first.
	History []LoggedAttempt `json:"history"`
}

// LoggedRequest is what every attempt of a delivery sends; only the
// headers webhook-timestamp and webhook-signature differ between attempts
// (see each attempt's request_headers).
type LoggedRequest struct {
	Method string `json:"method"`
	URL    string `json:"url"`
	// Body is the request body (a CloudEvents JSON document), its first
	// 64 KiB; BodyTruncated says there is more.
	Body          string `json:"body"`
	BodyTruncated bool   `json:"body_truncated"`
}

// LoggedAttempt is one attempt of a delivery.
type LoggedAttempt struct {
	Attempt    int       `json:"attempt"`
	At         time.Time `json:"at"`
	StatusCode *int      `json:"status_code,omitempty"`
	Latency    string    `json:"latency"`
	Error      string    `json:"error,omitempty"`
	// Replay says the attempt was a replay, asked for by ReplayedBy (a key id).
	Replay     bool   `json:"replay"`
	ReplayedBy string `json:"replayed_by,omitempty"`
	// RequestHeaders are the headers sent, signatures redacted.
	RequestHeaders map[string]string `json:"request_headers"`
	// Response is null when no response came (a connection error, a timeout).
	Response *LoggedResponse `json:"response"`
}

// LoggedResponse is the receiver's answer as the log keeps it.
type LoggedResponse struct {
	// Headers are the response headers, credentials redacted.
	Headers map[string]string `json:"headers"`
	// Body is the first 4 KiB of the response body, as text.
	Body          string `json:"body"`
	BodyTruncated bool   `json:"body_truncated"`
}

func deliveryLogJSON(l store.DeliveryLog, url string) DeliveryLog {
	out := DeliveryLog{Delivery: deliveryJSON(l.Delivery), Request: LoggedRequest{Method: http.MethodPost, URL: url},
		History: make([]LoggedAttempt, 0, len(l.Attempts))}
	body := l.Body
	if len(body) > maxShownBody {
		cut := maxShownBody
		for cut > 0 && !utf8.RuneStart(body[cut]) {
			cut--
		}
		body, out.Request.BodyTruncated = body[:cut], true
	}
	out.Request.Body = string(body)
	for _, a := range l.Attempts {
		la := LoggedAttempt{Attempt: a.Attempt, At: a.At, StatusCode: a.StatusCode, Latency: latency(a.LatencyMS), Error: a.Error,
			Replay: a.ReplayedBy != "", ReplayedBy: a.ReplayedBy, RequestHeaders: a.Exchange.RequestHeaders}
		if la.RequestHeaders == nil {
			la.RequestHeaders = map[string]string{} // attempts logged before the log kept headers
		}
		if a.Exchange.ResponseHeaders != nil {
			la.Response = &LoggedResponse{Headers: a.Exchange.ResponseHeaders, Body: a.Exchange.ResponseBody, BodyTruncated: a.Exchange.ResponseTruncated}
		}
		out.History = append(out.History, la)
	}
	return out
}

// deliveryCursor is the position in a delivery log, sent as an opaque
// httpx cursor.
type deliveryCursor struct {
	Seq int64 `json:"seq"`
}

// listDeliveries answers one page of a delivery log read by list.
func listDeliveries(w http.ResponseWriter, r *http.Request, list func(cursor int64, limit int) ([]store.Delivery, error)) {
	limit, err := httpx.ParseLimit(r, defaultLimit, maxLimit)
	if err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	var after deliveryCursor
	if ok, err := httpx.CursorParam(r, &after); err != nil || (ok && after.Seq < 1) {
		httpx.WriteError(w, r, httpx.ErrInvalidCursor)
		return
	}
	ds, err := list(after.Seq, limit+1)
	if err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	ds, next := httpx.TrimPage(ds, limit, func(d store.Delivery) string { return httpx.EncodeCursor(deliveryCursor{Seq: d.Seq}) })
	out := make([]Delivery, 0, len(ds))
	for _, d := range ds {
		out = append(out, deliveryJSON(d))
	}
	httpx.WriteList(w, "deliveries", out, next)
}

func (s *Service) handleDeliveries(w http.ResponseWriter, r *http.Request) {
	e, ok := s.endpoint(w, r)
	if !ok {
		return
	}
	listDeliveries(w, r, func(cursor int64, limit int) ([]store.Delivery, error) {
		return s.store.Deliveries(r.Context(), e.TenantID, e.ID, cursor, limit)
	})
}

// handleJobDeliveries is GET /v1/webhooks/deliveries?job_id=: the
// deliveries one job's events caused, to every endpoint of the tenant.
func (s *Service) handleJobDeliveries(w http.ResponseWriter, r *http.Request) {
	job := r.URL.Query().Get("job_id")
	if job == "" {
		e := httpx.Errorf(http.StatusBadRequest, "invalid_parameter", "job_id is required")
		e.Fields = map[string]string{"job_id": "required"}
		httpx.WriteError(w, r, e)
		return
	}
	tenant := tenantOf(r)
	listDeliveries(w, r, func(cursor int64, limit int) ([]store.Delivery, error) {
		return s.store.JobDeliveries(r.Context(), tenant, job, cursor, limit)
	})
}

func errDeliveryNotFound(id string) error {
	return httpx.Errorf(http.StatusNotFound, "delivery_not_found", "no delivery %q of this webhook", id)
}

func (s *Service) handleDelivery(w http.ResponseWriter, r *http.Request) {
	e, ok := s.endpoint(w, r)
	if !ok {
		return
	}
	id := chi.URLParam(r, "delivery")
	l, err := s.store.Delivery(r.Context(), e.TenantID, e.ID, id)
	if errors.Is(err, store.ErrNotFound) {
		err = errDeliveryNotFound(id)
	}
	if err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	httpx.WriteJSON(w, http.StatusOK, deliveryLogJSON(l, e.URL))
}

// handleReplay is POST /v1/webhooks/{id}/deliveries/{delivery}/replay: the
// delivery is sent once more, now, signed afresh with the endpoint's
// current secret and with the same webhook-id; the attempt is logged as a
// replay by the caller's key. A failed replay is not retried.
func (s *Service) handleReplay(w http.ResponseWriter, r *http.Request) {
	e, ok := s.endpoint(w, r)
	if !ok {
		return
	}
	p, _ := auth.FromContext(r.Context())
	id := chi.URLParam(r, "delivery")
	d, err := s.store.Replay(r.Context(), e.TenantID, e.ID, id, p.KeyID)
	switch {
	case errors.Is(err, store.ErrNotFound):
		err = errDeliveryNotFound(id)
	case errors.Is(err, store.ErrPending):
		err = httpx.Errorf(http.StatusConflict, "delivery_pending",
			"delivery %q is still being sent or retried; replay it once it is delivered, failed or cancelled", id)
	case errors.Is(err, store.ErrDisabled):
		err = httpx.Errorf(http.StatusConflict, "webhook_disabled", "the webhook is disabled; enable it to replay its deliveries")
	}
	if err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	s.log.InfoContext(r.Context(), "webhooks: delivery replay requested", "tenant", e.TenantID, "endpoint", e.ID,
		"delivery", id, "actor", p.KeyID)
	s.loop.Wake()
	httpx.WriteJSON(w, http.StatusAccepted, deliveryJSON(d))
}
