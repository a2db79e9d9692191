package api

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/ferryhq/ferry/events/schema"
	"github.com/ferryhq/ferry/platform/auth"
	"github.com/ferryhq/ferry/platform/httpx"
	"github.com/ferryhq/ferry/platform/quarantine"
)

// The quarantine routes (admin key only) show operators the records a
// consumer group parked because it could not apply them
// (platform/quarantine), and let them retry or discard each. Every group's
// rows live in the one shared table, so the api serves them all.

// QuarantinedRecord is the resource of the quarantine routes. Key, Value
// and Headers are shown by the inspect route only: as text when valid
// UTF-8 without NUL, else base64 (encoding says which).
type QuarantinedRecord struct {
	ID               string              `json:"id"`
	ConsumerGroup    string              `json:"consumer_group"`
	Topic            string              `json:"topic"`
	Partition        int32               `json:"partition"`
	Offset           int64               `json:"offset"`
	Status           quarantine.Status   `json:"status"`
	Error            string              `json:"error"`
	Tries            int                 `json:"tries"`
	FirstSeen        time.Time           `json:"first_seen"`
	LastSeen         time.Time           `json:"last_seen"`
	RecordTime       *time.Time          `json:"record_time"`
	RetryRequestedAt *time.Time          `json:"retry_requested_at"`
	ResolvedAt       *time.Time          `json:"resolved_at"`
	DiscardedAt      *time.Time          `json:"discarded_at"`
	DiscardedBy      string              `json:"discarded_by,omitempty"`
	DiscardReason    string              `json:"discard_reason,omitempty"`
	ValueBytes       int                 `json:"value_bytes"`
	Key              *quarantine.Bytes   `json:"key,omitempty"`
	Value            *quarantine.Bytes   `json:"value,omitempty"`
	Headers          []quarantine.Header `json:"headers,omitempty"`
}

func quarantinedResource(r quarantine.Record, full bool) QuarantinedRecord {
	out := QuarantinedRecord{
		ID: strconv.FormatInt(r.ID, 10), ConsumerGroup: r.Group, Topic: r.Topic, Partition: r.Partition, Offset: r.Offset,
		Status: r.Status, Error: r.Error, Tries: r.Tries, FirstSeen: r.FirstSeen, LastSeen: r.LastSeen,
		RecordTime: r.RecordTime, RetryRequestedAt: r.RetryRequestedAt, ResolvedAt: r.ResolvedAt,
		DiscardedAt: r.DiscardedAt, DiscardedBy: r.DiscardedBy, DiscardReason: r.DiscardReason, ValueBytes: r.ValueBytes,
	}
	if !full {
		return out
	}
	if r.Key != nil {
		k := quarantine.EncodeBytes(r.Key)
		out.Key = &k
	}
	v := quarantine.EncodeBytes(r.Value)
	out.Value = &v
	out.Headers = r.Headers
	if out.Headers == nil {
		out.Headers = []quarantine.Header{}
	}
	return out
}

// Errors of the quarantine routes.
var (
	errQuarantineNotFound = &httpx.Error{Status: http.StatusNotFound, Code: "quarantine_record_not_found",
		Message: "no quarantined record with this id"}
	errQuarantineResolved = &httpx.Error{Status: http.StatusConflict, Code: "quarantine_record_resolved",
		Message: "the record was re-applied and resolved; there is nothing to retry or discard"}
)

func quarantineErr(err error) error {
	switch {
	case errors.Is(err, quarantine.ErrNotFound):
		return errQuarantineNotFound
	case errors.Is(err, quarantine.ErrState):
		return errQuarantineResolved
	}
	return err
}

// Quarantine list limits and bounds of the parameters.
const (
	defaultQuarantineLimit = 50
	maxQuarantineLimit     = 200
	maxGroupParam          = 256
	maxDiscardReason       = 1000
)

func (s *Service) quarantineRoutes(r chi.Router) {
	r.Get("/v1/admin/quarantine", s.handleListQuarantine)
	r.Get("/v1/admin/quarantine/{id}", s.handleGetQuarantine)
	r.Post("/v1/admin/quarantine/{id}/retry", s.handleRetryQuarantine)
	r.Post("/v1/admin/quarantine/{id}/discard", s.handleDiscardQuarantine)
}

// quarantineFilter reads the list's group, status, limit and cursor.
func quarantineFilter(r *http.Request) (quarantine.Filter, error) {
	limit, after, err := pageParams(r, defaultQuarantineLimit, maxQuarantineLimit)
	if err != nil {
		return quarantine.Filter{}, err
	}
	f := quarantine.Filter{Limit: limit + 1, Group: r.URL.Query().Get("group"), Status: quarantine.Status(r.URL.Query().Get("status"))}
	if after.ID != "" {
		if f.AfterID, err = strconv.ParseInt(after.ID, 10, 64); err != nil {
			return f, httpx.ErrInvalidCursor
		}
	}
	bad := func(field, msg string) error {
		e := httpx.Errorf(http.StatusBadRequest, "invalid_parameter", "%s %s", field, msg)
		e.Fields = map[string]string{field: msg}
		return e
	}
	if len(f.Group) > maxGroupParam || schema.CheckText(f.Group) != nil {
		return f, bad("group", fmt.Sprintf("must be a consumer group name (at most %d bytes of text)", maxGroupParam))
	}
	if f.Status != "" && !slices.Contains(quarantine.Statuses, f.Status) {
		return f, bad("status", "must be parked, retry, resolved or discarded")
	}
	return f, nil
}

func (s *Service) handleListQuarantine(w http.ResponseWriter, r *http.Request) {
	f, err := quarantineFilter(r)
	if err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	rs, err := quarantine.NewStore(s.deps.Postgres).List(r.Context(), f)
	if err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	rs, next := httpx.TrimPage(rs, f.Limit-1, func(q quarantine.Record) string {
		return httpx.Keyset{ID: strconv.FormatInt(q.ID, 10)}.String()
	})
	out := make([]QuarantinedRecord, 0, len(rs))
	for _, q := range rs {
		out = append(out, quarantinedResource(q, false))
	}
	httpx.WriteList(w, "records", out, next)
}

// quarantineID reads the {id} path parameter; an id that cannot be one is
// not found.
func quarantineID(r *http.Request) (int64, error) {
	id, err := strconv.ParseInt(chi.URLParam(r, "id"), 10, 64)
	if err != nil || id <= 0 {
		return 0, errQuarantineNotFound
	}
	return id, nil
}

func (s *Service) handleGetQuarantine(w http.ResponseWriter, r *http.Request) {
	id, err := quarantineID(r)
	if err == nil {
		var q quarantine.Record
		if q, err = quarantine.NewStore(s.deps.Postgres).Get(r.Context(), id); err == nil {
			httpx.WriteJSON(w, http.StatusOK, quarantinedResource(q, true))
			return
		}
	}
	httpx.WriteError(w, r, quarantineErr(err))
}

// handleRetryQuarantine marks the record for retry: its consumer group
// re-applies it within a few seconds (status resolved, or parked again with
// the new error). 202: the retry happens after the answer.
func (s *Service) handleRetryQuarantine(w http.ResponseWriter, r *http.Request) {
	id, err := quarantineID(r)
	if err == nil {
		var q quarantine.Record
		if q, err = quarantine.NewStore(s.deps.Postgres).Retry(r.Context(), id); err == nil {
			s.log.InfoContext(r.Context(), "quarantined record marked for retry", "id", id, "group", q.Group)
			httpx.WriteJSON(w, http.StatusAccepted, quarantinedResource(q, false))
			return
		}
	}
	httpx.WriteError(w, r, quarantineErr(err))
}

// discardBody is the optional body of a discard.
type discardBody struct {
	Reason string `json:"reason"`
}

func (s *Service) handleDiscardQuarantine(w http.ResponseWriter, r *http.Request) {
	id, err := quarantineID(r)
	if err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	reason, err := discardReason(w, r)
	if err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	p, _ := auth.FromContext(r.Context())
	q, err := quarantine.NewStore(s.deps.Postgres).Discard(r.Context(), id, p.KeyID, reason)
	if err != nil {
		httpx.WriteError(w, r, quarantineErr(err))
		return
	}
	s.log.InfoContext(r.Context(), "quarantined record discarded", "id", id, "group", q.Group, "by", p.KeyID)
	httpx.WriteJSON(w, http.StatusOK, quarantinedResource(q, false))
}

// discardReason reads the optional {"reason": "..."} body (empty allowed).
func discardReason(w http.ResponseWriter, r *http.Request) (string, error) {
	raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 16<<10))
	if err != nil {
		return "", httpx.Errorf(http.StatusRequestEntityTooLarge, "payload_too_large", "request body exceeds %d bytes", 16<<10)
	}
	if len(bytes.TrimSpace(raw)) == 0 {
		return "", nil
	}
	var b discardBody
	r.Body = io.NopCloser(bytes.NewReader(raw))
	if err := httpx.DecodeJSON(w, r, 16<<10, &b); err != nil {
		return "", err
	}
	if len(b.Reason) > maxDiscardReason || schema.CheckText(b.Reason) != nil {
		e := httpx.Errorf(http.StatusUnprocessableEntity, "validation_failed", "the discard has invalid fields")
		e.Fields = map[string]string{"reason": fmt.Sprintf("must be text of at most %d bytes", maxDiscardReason)}
		return "", e
	}
	return b.Reason, nil
}
