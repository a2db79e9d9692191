package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"

	"github.com/ferryhq/ferry/events/schema"
	"github.com/ferryhq/ferry/platform/auth"
	"github.com/ferryhq/ferry/platform/httpx"
	"github.com/ferryhq/ferry/platform/jobs"
	"github.com/ferryhq/ferry/services/api/internal/store"
)

// IdempotencyKeyHeader is the request header of idempotent submissions.
const IdempotencyKeyHeader = "Idempotency-Key"

const source = "ferry/api"

// envelopeSlack is the room a submission's fields other than the payload
// may take in the request body.
const envelopeSlack = 64 << 10

// Errors of the job routes.
var (
	errKeyReused = &httpx.Error{Status: http.StatusUnprocessableEntity, Code: "idempotency_key_reused",
		Message: "this Idempotency-Key was used with a different request body"}
	errInFlight = &httpx.Error{Status: http.StatusConflict, Code: "idempotency_request_in_flight",
		Message: "a request with this Idempotency-Key is still being processed; retry later", RetryAfter: time.Second}
	errUnavailable = &httpx.Error{Status: http.StatusServiceUnavailable, Code: "unavailable",
		Message: "the job could not be stored; retry", RetryAfter: time.Second}
	// errNotVisibleYet answers a read of a job submitted moments ago that
	// the status projection, far behind, does not show yet (findJobs).
	errNotVisibleYet = &httpx.Error{Status: http.StatusServiceUnavailable, Code: "not_visible_yet",
		Message: "this job may have been submitted moments ago and is not readable yet; retry", RetryAfter: time.Second}
)

// item is one submission of a request.
type item struct {
	req jobs.Request
	key string
	// err is set when the item was rejected before validation (decoding).
	err *httpx.Error
	// fire is set on the items a schedule fires (schedule_fire.go).
	fire *scheduleFire
}

// newJobID is the id a new job of the item gets: random, or derived from
// its schedule's fire so that a repeated fire makes the same job.
func (it item) newJobID() string {
	if it.fire != nil {
		return it.fire.jobID
	}
	return jobs.NewID()
}

// outcome is the answer for one item.
type outcome struct {
	job     Job
	created bool // a new job (202) rather than a deduplicated one (200)
	err     *httpx.Error
}

// checkKeyHeader refuses an Idempotency-Key header that is too long or not
// storable text (the key is stored in the status projection).
func checkKeyHeader(key string) *httpx.Error {
	msg := jobs.CheckIdempotencyKey(key)
	if msg == "" {
		return nil
	}
	e := httpx.Errorf(http.StatusUnprocessableEntity, "validation_failed", "Idempotency-Key %s", msg)
	e.Fields = map[string]string{"idempotency_key": msg}
	return e
}

// errRecordTooLarge answers a job whose enqueued event would not fit in a
// Kafka record with room for its retries' history.
var errRecordTooLarge = httpx.Errorf(http.StatusRequestEntityTooLarge, "record_too_large",
	"the job's event would exceed %d bytes (payload, tags and fields together); make the payload smaller", schema.MaxSubmitRecordBytes)

func (s *Service) handleSubmit(w http.ResponseWriter, r *http.Request) {
	settings, err := s.tenantSettings(r.Context())
	if err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	var req jobs.Request
	if err := httpx.DecodeJSON(w, r, int64(s.maxPayload(settings))+envelopeSlack, &req); err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	key := r.Header.Get(IdempotencyKeyHeader)
	if key == "" {
		key = req.IdempotencyKey
	}
	if e := checkKeyHeader(key); e != nil {
		httpx.WriteError(w, r, e)
		return
	}
	out, err := s.submit(r.Context(), settings, []item{{req: req, key: key}})
	if err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	o := out[0]
	switch {
	case o.err != nil:
		httpx.WriteError(w, r, o.err)
	case o.created:
		writeJob(w, http.StatusAccepted, &o.job)
	default:
		writeJob(w, http.StatusOK, &o.job)
	}
}

// batchItem is one entry of a batch answer: a job or an error.
type batchItem struct {
	*Job
	Error *itemError `json:"error,omitempty"`
}

type itemError struct {
	Status int `json:"status"`
	*httpx.Error
}

func (s *Service) handleBatch(w http.ResponseWriter, r *http.Request) {
	settings, err := s.tenantSettings(r.Context())
	if err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	var body struct {
		Jobs []json.RawMessage `json:"jobs"`
	}
	if err := httpx.DecodeJSON(w, r, s.cfg.MaxBatchBytes, &body); err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	switch {
	case len(body.Jobs) == 0:
		e := httpx.Errorf(http.StatusUnprocessableEntity, "validation_failed", "the batch holds no jobs")
		e.Fields = map[string]string{"jobs": fmt.Sprintf("must hold 1 to %d jobs", s.cfg.MaxBatchJobs)}
		httpx.WriteError(w, r, e)
		return
	case len(body.Jobs) > s.cfg.MaxBatchJobs:
		httpx.WriteError(w, r, httpx.Errorf(http.StatusRequestEntityTooLarge, "batch_too_large",
			"a batch holds at most %d jobs, got %d", s.cfg.MaxBatchJobs, len(body.Jobs)))
		return
	}
	header := r.Header.Get(IdempotencyKeyHeader)
	if e := checkKeyHeader(header); e != nil {
		httpx.WriteError(w, r, e)
		return
	}
	items := make([]item, len(body.Jobs))
	for i, raw := range body.Jobs {
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&items[i].req); err != nil {
			items[i].err = itemDecodeError(err)
			continue
		}
		switch {
		case items[i].req.IdempotencyKey != "":
			items[i].key = items[i].req.IdempotencyKey
		case header != "":
			items[i].key = header + "#" + strconv.Itoa(i)
		}
	}
	out, err := s.submit(r.Context(), settings, items)
	if err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	status, resp := batchAnswer(out)
	writeBatch(w, status, resp)
}

// batchResponse is the answer to a batch: per item, its job or its error.
type batchResponse struct {
	Jobs  []batchItem `json:"jobs"`
	Error *itemError  `json:"error,omitempty"`
}

// batchAnswer is 202 when the batch created a job, 200 when it only
// answered replays, else the items' common error status (422 when they
// differ) with batch_rejected.
func batchAnswer(out []outcome) (int, batchResponse) {
	resp := batchResponse{Jobs: make([]batchItem, len(out))}
	created, deduped, failStatus := 0, 0, 0
	for i, o := range out {
		if o.err != nil {
			resp.Jobs[i] = batchItem{Error: &itemError{Status: o.err.Status, Error: o.err}}
			if failStatus == 0 {
				failStatus = o.err.Status
			} else if failStatus != o.err.Status {
				failStatus = http.StatusUnprocessableEntity
			}
			continue
		}
		job := o.job
		resp.Jobs[i] = batchItem{Job: &job}
		if o.created {
			created++
		} else {
			deduped++
		}
	}
	switch {
	case created > 0:
		return http.StatusAccepted, resp
	case deduped > 0:
		return http.StatusOK, resp
	}
	resp.Error = &itemError{Status: failStatus, Error: &httpx.Error{Code: "batch_rejected", Message: "no job of the batch was accepted; see each item's error"}}
	return failStatus, resp
}

func itemDecodeError(err error) *httpx.Error {
	var typeErr *json.UnmarshalTypeError
	msg := err.Error()
	switch {
	case strings.HasPrefix(msg, "json: unknown field "):
		field := strings.Trim(strings.TrimPrefix(msg, "json: unknown field "), `"`)
		e := httpx.Errorf(http.StatusBadRequest, "unknown_field", "unknown field %q", field)
		e.Fields = map[string]string{field: "unknown field"}
		return e
	case errors.As(err, &typeErr):
		e := httpx.Errorf(http.StatusBadRequest, "invalid_json", "field %q must be %s", typeErr.Field, typeErr.Type)
		e.Fields = map[string]string{typeErr.Field: "must be " + typeErr.Type.String()}
		return e
	}
	return httpx.Errorf(http.StatusBadRequest, "invalid_json", "each job must be a JSON object")
}

// lookup finds a job of tenant in the status projection, waiting for it
// when the job may have been submitted moments ago (findJobs).
func (s *Service) lookup(ctx context.Context, tenant, id string) (Job, bool, error) {
	rows, err := s.findJobs(ctx, tenant, []string{id}, s.cfg.Now())
	if err != nil {
		return Job{}, false, err
	}
	row, ok := rows[id]
	if !ok {
		return Job{}, false, nil
	}
	return jobFromRow(row.Row, s.cfg.Now()), true, nil
}

func (s *Service) handleGet(w http.ResponseWriter, r *http.Request) {
	p, _ := auth.FromContext(r.Context())
	j, ok, err := s.lookup(r.Context(), p.TenantID, chi.URLParam(r, "id"))
	switch {
	case err != nil:
		httpx.WriteError(w, r, err)
	case !ok:
		httpx.WriteError(w, r, httpx.ErrNotFound)
	default:
		j = s.withWaiting(j)
		writeJob(w, http.StatusOK, &j)
	}
}

func (s *Service) handleCancel(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	p, _ := auth.FromContext(ctx)
	id := chi.URLParam(r, "id")
	j, ok, err := s.lookup(ctx, p.TenantID, id)
	switch {
	case err != nil:
		httpx.WriteError(w, r, err)
		return
	case !ok:
		httpx.WriteError(w, r, httpx.ErrNotFound)
		return
	case j.Status.Terminal():
		httpx.WriteJSON(w, http.StatusConflict, map[string]any{
			"error": map[string]any{"code": "job_finished", "message": "the job already finished as " + string(j.Status),
				"request_id": middleware.GetReqID(ctx)},
			"job": j,
		})
		return
	}
	ev := schema.Cancelled{
		JobRef: schema.JobRef{JobID: j.ID, TenantID: p.TenantID, Attempt: max(1, j.Attempt)},
		Reason: "user", Actor: p.KeyID, At: s.cfg.Now().UTC(),
	}
	rec, err := schema.NewRecord(s.deps.Topics.Lifecycle(schema.EventCancelled), source, ev)
	if err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	if err := s.deps.Kafka.ProduceSync(ctx, rec).FirstErr(); err != nil {
		s.log.ErrorContext(ctx, "produce cancelled failed", "tenant", p.TenantID, "job_id", j.ID, "err", err)
		httpx.WriteError(w, r, errUnavailable)
		return
	}
	s.log.InfoContext(ctx, "job cancel requested", "tenant", p.TenantID, "job_id", j.ID, "actor", p.KeyID)
	httpx.WriteJSON(w, http.StatusAccepted, map[string]any{"job": j, "cancel_requested": true})
}

// List limits.
const (
	defaultListLimit = 50
	maxListLimit     = 500
)

// pageParams reads the limit (def when absent, at most max) and the
// httpx.Keyset cursor of a list request; the zero Keyset (no ID) on the
// first page.
func pageParams(r *http.Request, def, max int) (int, httpx.Keyset, error) {
	limit, err := httpx.ParseLimit(r, def, max)
	if err != nil {
		return 0, httpx.Keyset{}, err
	}
	after, err := httpx.KeysetParam(r)
	if err != nil || after == nil {
		return limit, httpx.Keyset{}, err
	}
	return limit, *after, nil
}

// createdRange reads the list's creation-time bounds, created_from
// (inclusive) and created_to (exclusive), RFC 3339 times; nil when absent.
func createdRange(q url.Values) (from, to *time.Time, err error) {
	fields := map[string]string{}
	read := func(name string) *time.Time {
		v := q.Get(name)
		if v == "" {
			return nil
		}
		t, perr := time.Parse(time.RFC3339Nano, v)
		if perr != nil {
			fields[name] = "must be an RFC 3339 time, e.g. 2025-01-31T08:00:00Z"
			return nil
		}
		return &t
	}
	from, to = read("created_from"), read("created_to")
	if from != nil && to != nil && !from.Before(*to) {
		fields["created_to"] = "must be after created_from"
	}
	if len(fields) > 0 {
		e := httpx.Errorf(http.StatusBadRequest, "invalid_parameter", "invalid creation time range")
		e.Fields = fields
		return nil, nil, e
	}
	return from, to, nil
}

func (s *Service) handleList(w http.ResponseWriter, r *http.Request) {
	p, _ := auth.FromContext(r.Context())
	q := r.URL.Query()
	f := store.Filter{Type: q.Get("type"), Queue: q.Get("queue"), Tags: q["tag"], Now: s.cfg.Now()}
	var err error
	if st := schema.Status(q.Get("status")); st != "" {
		switch st {
		case schema.StatusQueued, schema.StatusScheduled, schema.StatusRunning, schema.StatusSucceeded, schema.StatusDead, schema.StatusCancelled:
			f.Status = st
		default:
			e := httpx.Errorf(http.StatusUnprocessableEntity, "validation_failed", "invalid query parameters")
			e.Fields = map[string]string{"status": "must be one of queued, scheduled, running, succeeded, dead, cancelled"}
			httpx.WriteError(w, r, e)
			return
		}
	}
	if f.CreatedFrom, f.CreatedTo, err = createdRange(q); err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	limit, after, err := pageParams(r, defaultListLimit, maxListLimit)
	if err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	if after.ID != "" {
		if after.T.IsZero() {
			httpx.WriteError(w, r, httpx.ErrInvalidCursor)
			return
		}
		f.After = &store.Cursor{CreatedAt: after.T, ID: after.ID}
	}
	f.Limit = limit
	rows, nextAt, err := s.store.List(r.Context(), p.TenantID, f)
	if err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	next := ""
	if nextAt != nil {
		next = httpx.Keyset{T: nextAt.CreatedAt, ID: nextAt.ID}.String()
	}
	page := make([]Job, 0, len(rows))
	for _, row := range rows {
		page = append(page, s.withWaiting(jobFromRow(row.Row, f.Now)))
	}
	httpx.WriteList(w, "jobs", page, next)
}
