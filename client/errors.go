package client

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// Stable error codes of the Ferry API (the "code" of an error answer).
const (
	CodeUnauthorized          = "unauthorized"
	CodeForbidden             = "forbidden"
	CodeNotFound              = "not_found"
	CodeJobNotFound           = "job_not_found"
	CodeDLQEntryNotFound      = "dlq_entry_not_found"
	CodeWebhookNotFound       = "webhook_not_found"
	CodeInvalidJSON           = "invalid_json"
	CodeUnknownField          = "unknown_field"
	CodeInvalidParameter      = "invalid_parameter"
	CodeInvalidCursor         = "invalid_cursor"
	CodeInvalidFilter         = "invalid_filter"
	CodeInvalidLastEventID    = "invalid_last_event_id"
	CodeTenantRequired        = "tenant_required"
	CodeValidationFailed      = "validation_failed"
	CodePayloadUnstorable     = "payload_unstorable"
	CodeRunAtTooFar           = "run_at_too_far"
	CodeInvalidURL            = "invalid_url"
	CodeURLNotAllowed         = "url_not_allowed"
	CodeIdempotencyKeyReused  = "idempotency_key_reused"
	CodeIdempotencyInFlight   = "idempotency_request_in_flight"
	CodeRedriveInFlight       = "redrive_in_flight"
	CodeJobFinished           = "job_finished"
	CodeBatchRejected         = "batch_rejected"
	CodePayloadTooLarge       = "payload_too_large"
	CodeRecordTooLarge        = "record_too_large"
	CodeBatchTooLarge         = "batch_too_large"
	CodeBatchExceedsRateLimit = "batch_exceeds_rate_limit"
	CodeTenantRateLimited     = "tenant_rate_limited"
	CodeTenantQueueFull       = "tenant_queue_full"
	CodeTooManyQueues         = "too_many_queues"
	CodeTooManyStreams        = "too_many_streams"
	CodeTooManyEndpoints      = "too_many_endpoints"
	CodeUnavailable           = "unavailable"
	CodeNotVisibleYet         = "not_visible_yet"
	CodeDNSUnavailable        = "dns_unavailable"
	CodeInternal              = "internal"
)

// Sentinel errors: errors.Is(err, ErrNotFound) holds for an *APIError whose
// code belongs to the family.
var (
	// ErrNotFound: no such job, DLQ entry or webhook for this tenant (404).
	ErrNotFound = errors.New("ferry: not found")
	// ErrUnauthorized: a missing, invalid or revoked API key (401).
	ErrUnauthorized = errors.New("ferry: unauthorized")
	// ErrForbidden: the key may not use this route (403).
	ErrForbidden = errors.New("ferry: forbidden")
	// ErrValidation: the request is malformed or has invalid fields
	// (400 and 422 other than idempotency conflicts); Fields says which.
	ErrValidation = errors.New("ferry: invalid request")
	// ErrIdempotencyConflict: the Idempotency-Key was used with another body.
	ErrIdempotencyConflict = errors.New("ferry: idempotency key reused with another body")
	// ErrInFlight: another request with the same key, or re-driving the
	// same entry, is still running; retry.
	ErrInFlight = errors.New("ferry: request in flight")
	// ErrRateLimited: a tenant limit refused the request (429); RetryAfter
	// says when it may succeed.
	ErrRateLimited = errors.New("ferry: rate limited")
	// ErrTooLarge: a payload, record or batch is too large (413).
	ErrTooLarge = errors.New("ferry: too large")
	// ErrJobFinished: the job already finished (cancel answers 409).
	ErrJobFinished = errors.New("ferry: job already finished")
	// ErrUnavailable: Ferry could not reach Kafka, Redis or DNS, or a job
	// submitted moments ago is not readable yet (503); retry.
	ErrUnavailable = errors.New("ferry: unavailable")
)

// APIError is an error answer of the Ferry API:
// {"error":{"code":...,"message":...,"fields":{...}}}.
type APIError struct {
	// Status is the HTTP status.
	Status int
	// Code is the stable machine-readable code (the Code… constants).
	Code string
	// Message is for humans; do not match on it.
	Message string
	// Fields names the invalid fields of a validation error.
	Fields map[string]string
	// RequestID identifies the request in Ferry's logs.
	RequestID string
	// RetryAfter is the answer's Retry-After, zero when absent.
	RetryAfter time.Duration
	// Body is the raw answer (a cancel's 409 also holds the job).
	Body []byte
}

func (e *APIError) Error() string {
	return fmt.Sprintf("ferry: %d %s: %s", e.Status, e.Code, e.Message)
}

// Is maps the error's code to the sentinel errors of this package.
func (e *APIError) Is(target error) bool {
	s := sentinelOf(e.Status, e.Code)
	return s != nil && s == target
}

// sentinelOf maps a status and code to its family.
func sentinelOf(status int, code string) error {
	switch code {
	case CodeIdempotencyKeyReused:
		return ErrIdempotencyConflict
	case CodeIdempotencyInFlight, CodeRedriveInFlight:
		return ErrInFlight
	case CodeJobFinished:
		return ErrJobFinished
	case CodeTooManyEndpoints:
		return ErrValidation
	}
	switch status {
	case http.StatusNotFound:
		return ErrNotFound
	case http.StatusUnauthorized:
		return ErrUnauthorized
	case http.StatusForbidden:
		return ErrForbidden
	case http.StatusBadRequest, http.StatusUnprocessableEntity:
		return ErrValidation
	case http.StatusTooManyRequests:
		return ErrRateLimited
	case http.StatusRequestEntityTooLarge:
		return ErrTooLarge
	case http.StatusServiceUnavailable:
		return ErrUnavailable
	}
	return nil
}

// errorBody is the wire shape of an error answer.
type errorBody struct {
	Error *struct {
		Code      string      `json:"code"`
		Message   string      `json:"message"`
		RequestID string      `json:"request_id"`
		Fields    fieldErrors `json:"fields"`
	} `json:"error"`
}

// fieldErrors are the invalid fields of an error answer. Ferry sends an
// object of field → message; a list of {"field","message"} and messages
// given as lists (joined with "; ") are accepted too, so that an error
// from a proxy or an older server still names its fields.
type fieldErrors map[string]string

func (f *fieldErrors) UnmarshalJSON(b []byte) error {
	out := fieldErrors{}
	var obj map[string]json.RawMessage
	var list []struct {
		Field, Name, Message string
	}
	switch {
	case string(b) == "null":
		return nil
	case json.Unmarshal(b, &obj) == nil:
		for k, v := range obj {
			out[k] = messageText(v)
		}
	case json.Unmarshal(b, &list) == nil:
		for _, it := range list {
			out[cmp.Or(it.Field, it.Name)] = it.Message
		}
	default:
		return fmt.Errorf("error fields: %s", b)
	}
	*f = out
	return nil
}

// messageText renders a field's message: a string, strings joined with
// "; ", else the compact JSON.
func messageText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var ss []string
	if json.Unmarshal(raw, &ss) == nil {
		return strings.Join(ss, "; ")
	}
	var buf bytes.Buffer
	if json.Compact(&buf, raw) == nil {
		return buf.String()
	}
	return string(raw)
}

// errorCode returns the code of an error body, or "".
func errorCode(body []byte) string {
	var b errorBody
	if json.Unmarshal(body, &b) != nil || b.Error == nil {
		return ""
	}
	return b.Error.Code
}

// parseError turns an answer ≥ 400 into an *APIError; an answer that is
// not Ferry's JSON (a proxy's page) keeps its status and gets a code from it.
func parseError(resp *response) *APIError {
	e := &APIError{Status: resp.status, Body: resp.body}
	if ra, ok := parseRetryAfter(resp.header.Get("Retry-After"), time.Now()); ok {
		e.RetryAfter = ra
	}
	var b errorBody
	if json.Unmarshal(resp.body, &b) == nil && b.Error != nil && b.Error.Code != "" {
		e.Code, e.Message, e.RequestID, e.Fields = b.Error.Code, b.Error.Message, b.Error.RequestID, map[string]string(b.Error.Fields)
		return e
	}
	e.Code = fmt.Sprintf("http_%d", resp.status)
	e.Message = http.StatusText(resp.status)
	return e
}
