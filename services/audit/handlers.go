package audit

import (
	"encoding/csv"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
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
	if t := q.Get("type"); t != "" {
		et := schema.EventType(strings.TrimSuffix(strings.TrimPrefix(t, "ferry.job."), ".v1"))
		if !et.Valid() {
			return f, badParam("type", "type %q is not a lifecycle event (enqueued, started, progress, completed, failed, dlq, cancelled)", t)
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
	var write func(store.Event) error
	var flush func() error
	rc := http.NewResponseController(w)
	switch format {
	case "ndjson":
		w.Header().Set("Content-Type", "application/x-ndjson")
		enc := json.NewEncoder(w)
		write = func(e store.Event) error { return enc.Encode(e) }
		flush = rc.Flush
	case "csv":
		w.Header().Set("Content-Type", "text/csv; charset=utf-8")
		cw := csv.NewWriter(w)
		write = func(e store.Event) error {
			return cw.Write([]string{e.EventID, e.TenantID, e.JobID, e.Type, strconv.Itoa(e.Attempt),
				e.OccurredAt.Format(time.RFC3339Nano), e.RecordedAt.Format(time.RFC3339Nano), e.Actor, e.TraceID,
				e.ChainID, strconv.FormatInt(e.Seq, 10), e.PrevHash, e.Hash, string(e.Data)})
		}
		flush = func() error { cw.Flush(); return errors.Join(cw.Error(), rc.Flush()) }
		defer func() {
			if err := flush(); err != nil {
				s.log.DebugContext(r.Context(), "audit export: final flush", "err", err)
			}
		}()
		if err := cw.Write(csvHeader); err != nil {
			return
		}
	default:
		httpx.WriteError(w, r, badParam("format", "format must be ndjson or csv"))
		return
	}
	w.Header().Set("Content-Disposition", `attachment; filename="audit-`+f.TenantID+`.`+format+`"`)
	w.Header().Set("Cache-Control", "no-store")
	n := 0
	err = s.store.Each(r.Context(), f, s.cfg.ExportBatch, func(e store.Event) error {
		if err := write(e); err != nil {
			return err
		}
		if n++; n%s.cfg.ExportBatch == 0 {
			return flush()
		}
		return nil
	})
	if err != nil {
		// The status line is gone; a truncated body is all the client can see.
		s.log.WarnContext(r.Context(), "audit export aborted", "rows", n, "err", err)
		return
	}
	if format == "ndjson" {
		_ = flush()
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
