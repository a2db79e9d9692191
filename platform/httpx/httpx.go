// Package httpx is the HTTP plumbing every Ferry service shares: one JSON
// error shape with a stable code, request ids, JSON decoding with limits, the
// /healthz /readyz /metrics endpoints and a server that shuts down gracefully.
package httpx

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"

	"github.com/ferryhq/ferry/events/schema"
)

// Error is an API error with a stable machine-readable code.
type Error struct {
	Status  int               `json:"-"`
	Code    string            `json:"code"`
	Message string            `json:"message"`
	Fields  map[string]string `json:"fields,omitempty"`
	// RetryAfter, when set, is sent as the Retry-After header.
	RetryAfter time.Duration `json:"-"`
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

// Errorf builds an *Error.
func Errorf(status int, code, format string, args ...any) *Error {
	return &Error{Status: status, Code: code, Message: fmt.Sprintf(format, args...)}
}

// Common errors.
var (
	ErrNotFound     = &Error{Status: http.StatusNotFound, Code: "not_found", Message: "not found"}
	ErrUnauthorized = &Error{Status: http.StatusUnauthorized, Code: "unauthorized", Message: "missing or invalid API key"}
	ErrForbidden    = &Error{Status: http.StatusForbidden, Code: "forbidden", Message: "this key may not use this route"}
)

// WriteJSON writes v as JSON with status.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// WriteEncoded writes body, a JSON value a hand-written encoder made, with
// status, as WriteJSON writes a value: then a newline.
func WriteEncoded(w http.ResponseWriter, status int, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(body, '\n'))
}

// WriteError writes err as {"error": {...}}. Errors that are not *Error are
// logged and answered as 500 internal without leaking their text.
func WriteError(w http.ResponseWriter, r *http.Request, err error) {
	var e *Error
	if !errors.As(err, &e) {
		slog.ErrorContext(r.Context(), "internal error", "err", err, "path", r.URL.Path, "request_id", middleware.GetReqID(r.Context()))
		e = &Error{Status: http.StatusInternalServerError, Code: "internal", Message: "internal error"}
	}
	if e.RetryAfter > 0 {
		w.Header().Set("Retry-After", fmt.Sprint(int((e.RetryAfter+time.Second-1)/time.Second)))
	}
	WriteJSON(w, e.Status, map[string]any{"error": struct {
		*Error
		RequestID string `json:"request_id"`
	}{e, middleware.GetReqID(r.Context())}})
}

// DecodeJSON decodes the request body into v, refusing unknown fields,
// trailing data and bodies over maxBytes, with errors callers can return
// as they are.
func DecodeJSON(w http.ResponseWriter, r *http.Request, maxBytes int64, v any) error {
	body := http.MaxBytesReader(w, r.Body, maxBytes)
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return jsonError(err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return Errorf(http.StatusBadRequest, "invalid_json", "request body must hold a single JSON value")
	}
	return nil
}

func jsonError(err error) *Error {
	var maxErr *http.MaxBytesError
	var syntaxErr *json.SyntaxError
	var typeErr *json.UnmarshalTypeError
	switch {
	case errors.As(err, &maxErr):
		return Errorf(http.StatusRequestEntityTooLarge, "payload_too_large", "request body exceeds %d bytes", maxErr.Limit)
	case errors.As(err, &syntaxErr):
		return Errorf(http.StatusBadRequest, "invalid_json", "malformed JSON at byte %d", syntaxErr.Offset)
	case errors.As(err, &typeErr):
		e := Errorf(http.StatusBadRequest, "invalid_json", "field %q must be %s", typeErr.Field, typeErr.Type)
		e.Fields = map[string]string{typeErr.Field: "must be " + typeErr.Type.String()}
		return e
	case errors.Is(err, io.EOF):
		return Errorf(http.StatusBadRequest, "invalid_json", "request body is empty")
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		field := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
		e := Errorf(http.StatusBadRequest, "unknown_field", "unknown field %q", field)
		e.Fields = map[string]string{field: "unknown field"}
		return e
	}
	return Errorf(http.StatusBadRequest, "invalid_json", "%s", err.Error())
}

// Check is a readiness probe of one dependency.
type Check struct {
	Name  string
	Check func(context.Context) error
}

// NewRouter returns a chi router with request ids, panic recovery, tracing
// and metrics (instrument.go) and /healthz, /readyz (every check must pass) and /metrics.
func NewRouter(checks []Check, metrics http.Handler) chi.Router {
	r := chi.NewRouter()
	r.Use(middleware.RequestID, echoRequestID, middleware.Recoverer, storableURL, instrument())
	r.Get("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		WriteJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	r.Get("/readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		status, result := http.StatusOK, map[string]string{}
		for _, c := range checks {
			if err := c.Check(ctx); err != nil {
				status, result[c.Name] = http.StatusServiceUnavailable, err.Error()
			} else {
				result[c.Name] = "ok"
			}
		}
		WriteJSON(w, status, map[string]any{"status": http.StatusText(status), "checks": result})
	})
	if metrics != nil {
		r.Method(http.MethodGet, "/metrics", metrics)
	}
	r.NotFound(func(w http.ResponseWriter, r *http.Request) { WriteError(w, r, ErrNotFound) })
	r.MethodNotAllowed(func(w http.ResponseWriter, r *http.Request) {
		WriteError(w, r, Errorf(http.StatusMethodNotAllowed, "method_not_allowed", "%s is not allowed on %s", r.Method, r.URL.Path))
	})
	return r
}

// storableURL refuses, for every route of every service, a request whose
// path or query parameters hold a NUL or invalid UTF-8 (400
// invalid_parameter): such a value would reach Postgres as a query argument
// of a list filter or a path id and fail there as a 500. The rule is
// schema.CheckText, the one every stored text obeys.
func storableURL(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := schema.CheckText(r.URL.Path); err != nil {
			WriteError(w, r, Errorf(http.StatusBadRequest, "invalid_parameter", "the path %s", schema.FieldMessage(err)))
			return
		}
		for name, values := range r.URL.Query() {
			for _, v := range append([]string{name}, values...) {
				if err := schema.CheckText(v); err != nil {
					e := Errorf(http.StatusBadRequest, "invalid_parameter", "query parameter %s", schema.FieldMessage(err))
					e.Fields = map[string]string{schema.SanitizeText(name, 64): schema.FieldMessage(err)}
					WriteError(w, r, e)
					return
				}
			}
		}
		next.ServeHTTP(w, r)
	})
}

// echoRequestID returns the request id to the client as X-Request-Id.
func echoRequestID(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(middleware.RequestIDHeader, middleware.GetReqID(r.Context()))
		next.ServeHTTP(w, r)
	})
}

// Serve serves h on ln until ctx is done, then shuts down gracefully within
// timeout: it stops accepting, lets in-flight requests finish, and cancels
// the base context of long-lived ones (SSE streams) so they end.
func Serve(ctx context.Context, ln net.Listener, h http.Handler, timeout time.Duration) error {
	baseCtx, cancelBase := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelBase()
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		BaseContext:       func(net.Listener) context.Context { return baseCtx },
	}
	srv.RegisterOnShutdown(cancelBase)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	err := srv.Shutdown(sctx)
	<-errc
	return err
}
