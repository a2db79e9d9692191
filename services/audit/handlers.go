package audit

import (
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/ferryhq/ferry/events/schema"
	"github.com/ferryhq/ferry/platform/auth"
	"github.com/ferryhq/ferry/platform/httpx"
	"github.com/ferryhq/ferry/services/audit/internal/store"
)

func badParam(name, format string, args ...any) *httpx.Error {
	e := httpx.Errorf(http.StatusBadRequest, "invalid_parameter", format, args...)
	e.Fields = map[string]string{name: e.Message}
	return e
}

// filterOf reads the filters shared by events and export, scoped to the
// caller's tenant.
func filterOf(r *http.Request) (store.Filter, error) {
	p, _ := auth.FromContext(r.Context())
	q := r.URL.Query()
	f := store.Filter{TenantID: p.TenantID, JobID: q.Get("job_id"), Actor: q.Get("actor")}
	if at, ok := schema.AuditTypeOf(q.Get("type")); ok {
		f.Type = at
	} else if t := q.Get("type"); t != "" {
		et := schema.EventType(strings.TrimSuffix(strings.TrimPrefix(t, "ferry.job."), ".v1"))
		if !et.Valid() {
			return f, badParam("type", "type %q is not a lifecycle event (enqueued, started, progress, completed, failed, dlq, cancelled) nor one of %s",
				t, strings.Join(schema.AuditTypes(), ", "))
		}
		f.Type = string(et)
	}
	for _, tp := range []struct {
		name string
		dst  *time.Time
	}{{"from", &f.From}, {"to", &f.To}} {
		if v := q.Get(tp.name); v != "" {
			t, err := time.Parse(time.RFC3339Nano, v)
			if err != nil {
				return f, badParam(tp.name, "%s must be an RFC 3339 time such as 2026-01-02T15:04:05Z", tp.name)
			}
			*tp.dst = t
		}
	}
	if !f.From.IsZero() && !f.To.IsZero() && !f.From.Before(f.To) {
		return f, badParam("to", "to must be after from")
	}
	return f, nil
}

func (s *Service) handleEvents(w http.ResponseWriter, r *http.Request) {
	f, err := filterOf(r)
	if err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	limit, err := httpx.ParseLimit(r, s.cfg.PageLimit, s.cfg.MaxPageLimit)
	if err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	after, err := cursorParam(r)
	if err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	events, next, err := s.store.List(r.Context(), f, after, limit)
	if err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	cursor := ""
	if next != nil {
		cursor = httpx.Keyset{T: next.Occurred, ID: next.EventID}.String()
	}
	httpx.WriteList(w, "events", events, cursor)
}

// cursorParam reads the cursor parameter: nil for the first page.
func cursorParam(r *http.Request) (*store.Cursor, error) {
	k, err := httpx.KeysetParam(r)
	if err != nil || k == nil {
		return nil, err
	}
	if k.T.IsZero() {
		return nil, httpx.ErrInvalidCursor
	}
	return &store.Cursor{Occurred: k.T, EventID: k.ID}, nil
}

// csvHeader is the column order of a CSV export.
var csvHeader = []string{"event_id", "tenant_id", "job_id", "type", "attempt", "occurred_at", "recorded_at",
	"actor", "trace_id", "chain_id", "seq", "prev_hash", "hash", "data"}

func (s *Service) handleExport(w http.ResponseWriter, r *http.Request) {
	f, err := filterOf(r)
	if err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	format := r.URL.Query().Get("format")
	if format == "" {
		format = "ndjson"
	}
	if format != "ndjson" && format != "csv" {
		httpx.WriteError(w, r, badParam("format", "format must be ndjson or csv"))
		return
	}
	if !s.exports.acquire(f.TenantID) {
		httpx.WriteError(w, r, &httpx.Error{Status: http.StatusTooManyRequests, Code: "too_many_exports", RetryAfter: exportRetryAfter,
			Message: fmt.Sprintf("the tenant already runs %d audit exports at once, its limit; retry when one finished", s.cfg.ExportConcurrency)})
		return
	}
	defer s.exports.release(f.TenantID)
	ew := newExportWriter(w, format, s.cfg.ExportWriteTimeout)
	defer ew.close(func(err error) { s.log.DebugContext(r.Context(), "audit export: final flush", "err", err) })
	w.Header().Set("Content-Disposition", `attachment; filename="audit-`+f.TenantID+`.`+format+`"`)
	w.Header().Set("Cache-Control", "no-store")
	n := 0
	err = ew.begin()
	if err == nil {
		err = s.store.Each(r.Context(), f, s.cfg.ExportBatch, func(page []store.Event) error {
			n += len(page)
			return ew.page(page)
		})
	}
	if err != nil {
		// The status line is gone; a truncated body is all the client can see.
		s.log.WarnContext(r.Context(), "audit export aborted", "rows", n, "err", err)
	}
}

func (s *Service) handleVerify(w http.ResponseWriter, r *http.Request) {
	p, _ := auth.FromContext(r.Context())
	if p.TenantID == "" && !p.Admin {
		httpx.WriteError(w, r, httpx.ErrForbidden)
		return
	}
	rep, err := s.store.Verify(r.Context(), p.TenantID, s.cfg.VerifyBatch)
	if err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	httpx.WriteJSON(w, http.StatusOK, rep)
}
