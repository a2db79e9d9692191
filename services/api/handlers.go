package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/trace"

	"github.com/ferryhq/ferry/events/schema"
	"github.com/ferryhq/ferry/platform/auth"
	"github.com/ferryhq/ferry/platform/httpx"
	"github.com/ferryhq/ferry/services/api/internal/idem"
	"github.com/ferryhq/ferry/services/api/internal/store"
	"github.com/ferryhq/ferry/services/api/internal/submit"
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
)

// item is one submission of a request.
type item struct {
	req submit.Request
	key string
	// err is set when the item was rejected before validation (decoding).
	err *httpx.Error
}

// outcome is the answer for one item.
type outcome struct {
	job     Job
	created bool // a new job (202) rather than a deduplicated one (200)
	err     *httpx.Error
}

func validationError(inv *submit.Invalid) *httpx.Error {
	if inv.TooLarge {
		e := httpx.Errorf(http.StatusRequestEntityTooLarge, "payload_too_large", "%s", "payload "+inv.Fields["payload"])
		e.Fields = inv.Fields
		return e
	}
	e := httpx.Errorf(http.StatusUnprocessableEntity, "validation_failed", "the job has invalid fields")
	switch inv.Code {
	case submit.CodePayloadUnstorable:
		e.Code, e.Message = inv.Code, "the payload holds a value Postgres cannot store (see fields); nothing was queued"
	case submit.CodeRunAtTooFar:
		e.Code, e.Message = inv.Code, "the job would start later than this deployment can keep it (see fields)"
	}
	e.Fields = inv.Fields
	return e
}

// checkKeyHeader refuses an Idempotency-Key header that is too long or not
// storable text (the key is stored in the status projection).
func checkKeyHeader(key string) *httpx.Error {
	msg := ""
	if err := schema.CheckText(key); err != nil {
		msg = schema.FieldMessage(err)
	} else if len(key) > submit.MaxIdempotencyKey {
		msg = fmt.Sprintf("must be at most %d characters", submit.MaxIdempotencyKey)
	}
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
	var req submit.Request
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
		httpx.WriteJSON(w, http.StatusAccepted, o.job)
	default:
		httpx.WriteJSON(w, http.StatusOK, o.job)
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
	resp := struct {
		Jobs  []batchItem `json:"jobs"`
		Error *itemError  `json:"error,omitempty"`
	}{Jobs: make([]batchItem, len(out))}
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
	status := http.StatusAccepted
	switch {
	case created > 0:
	case deduped > 0:
		status = http.StatusOK
	default:
		status = failStatus
		resp.Error = &itemError{Status: status, Error: &httpx.Error{Code: "batch_rejected", Message: "no job of the batch was accepted; see each item's error"}}
	}
	httpx.WriteJSON(w, status, resp)
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

// submit validates, deduplicates and produces items. It returns an error only
// when the whole request fails: a store is unreachable, or the new jobs of
// the request would exceed the tenant's rate limit or queue limit (limits
// apply to a request all or nothing: no item is accepted).
func (s *Service) submit(ctx context.Context, settings auth.Settings, items []item) ([]outcome, error) {
	p, _ := auth.FromContext(ctx)
	tenant := p.TenantID
	now := s.cfg.Now().UTC().Truncate(time.Microsecond)
	out := make([]outcome, len(items))
	accepted := make([]submit.Accepted, len(items))
	var claims []idem.Claim
	var claimIdx []int
	for i, it := range items {
		if it.err != nil {
			out[i].err = it.err
			continue
		}
		a, err := submit.Validate(it.req, now, submit.Limits{MaxPayloadBytes: s.maxPayload(settings), MaxAttemptsByType: s.cfg.MaxAttemptsByType, MaxDelay: s.cfg.MaxDelay})
		if err != nil {
			var inv *submit.Invalid
			if errors.As(err, &inv) {
				out[i].err = validationError(inv)
				continue
			}
			return nil, err
		}
		accepted[i] = a
		if it.key != "" {
			claims = append(claims, idem.Claim{Key: it.key, Hash: a.Hash, JobID: "job_" + schema.NewEventID()})
			claimIdx = append(claimIdx, i)
		}
	}

	// Idempotency: Redis first, then the projection for keys Redis lacks.
	skip := make([]bool, len(items))
	var finished []idem.Finished
	var owned []idem.Claim // keys this request holds until produced
	ownedBy := map[int]idem.Claim{}
	dedupIDs := map[int]string{}
	if len(claims) > 0 {
		res, err := s.idem.Claim(ctx, tenant, claims)
		if err != nil {
			s.log.ErrorContext(ctx, "idempotency claim failed", "tenant", tenant, "err", err)
			return nil, errUnavailable
		}
		var fresh []int // indexes into claims
		for ci, r := range res {
			i := claimIdx[ci]
			switch r.Outcome {
			case idem.Claimed:
				claims[ci].JobID = r.JobID // an expired claim's job id, if any
				fresh = append(fresh, ci)
			case idem.InFlight:
				out[i].err, skip[i] = errInFlight, true
			case idem.Reused:
				out[i].err, skip[i] = errKeyReused, true
			case idem.Done:
				dedupIDs[i], skip[i] = r.JobID, true
			}
		}
		if len(fresh) > 0 {
			keys := make([]string, len(fresh))
			for k, ci := range fresh {
				keys[k] = claims[ci].Key
			}
			held, err := s.store.ByIdempotencyKeys(ctx, tenant, keys)
			if err != nil {
				_ = s.idem.Release(context.WithoutCancel(ctx), tenant, pick(claims, fresh))
				return nil, err
			}
			for _, ci := range fresh {
				i, c := claimIdx[ci], claims[ci]
				if j, ok := held[c.Key]; ok {
					skip[i] = true
					finished = append(finished, idem.Finished{Key: c.Key, Hash: j.RequestHash, JobID: j.ID})
					if j.RequestHash == c.Hash {
						job := jobFromRow(j.Row, now)
						out[i] = outcome{job: dedup(job)}
					} else {
						out[i].err = errKeyReused
					}
					continue
				}
				owned = append(owned, c)
				ownedBy[i] = c
			}
		}
	}
	if len(dedupIDs) > 0 {
		if err := s.resolveDuplicates(ctx, tenant, items, accepted, dedupIDs, out, now); err != nil {
			_ = s.idem.Release(context.WithoutCancel(ctx), tenant, owned)
			return nil, err
		}
	}

	// Limits count the jobs this request would create; replays and rejected
	// items cost nothing.
	var fresh []string // the queue of each job this request would create
	for i := range items {
		if out[i].err == nil && !skip[i] {
			fresh = append(fresh, accepted[i].Spec.Queue)
		}
	}
	if len(fresh) > 0 {
		if err := s.checkLimits(ctx, tenant, settings, fresh); err != nil {
			_ = s.idem.Release(context.WithoutCancel(ctx), tenant, owned)
			return nil, err
		}
	}

	// Produce every new job in one call.
	traceID := ""
	if sc := trace.SpanContextFromContext(ctx); sc.HasTraceID() {
		traceID = sc.TraceID().String()
	}
	var recs []*kgo.Record
	var recIdx []int
	var release, abandon []idem.Claim
	for i := range items {
		if out[i].err != nil || skip[i] {
			continue
		}
		a := accepted[i]
		id := "job_" + schema.NewEventID()
		if c, ok := ownedBy[i]; ok {
			id = c.JobID // the claim's: a retry after a lost request reuses it
		}
		ev := schema.Enqueued{
			JobRef:    schema.JobRef{JobID: id, TenantID: tenant, Attempt: 1},
			Job:       a.Spec,
			CreatedAt: now, RunAt: a.RunAt, Reason: schema.ReasonSubmitted, Actor: p.KeyID,
		}
		if c, ok := ownedBy[i]; ok {
			ev.IdempotencyKey, ev.RequestHash = c.Key, c.Hash
		}
		rec, err := schema.NewRecord(s.deps.Topics.Lifecycle(schema.EventEnqueued), source, ev)
		if err != nil {
			_ = s.idem.Release(context.WithoutCancel(ctx), tenant, owned)
			return nil, err
		}
		if schema.RecordBytes(rec) > schema.MaxSubmitRecordBytes {
			// Refused here rather than failing the produce (and every
			// retry of the client) or a later retry event.
			out[i] = outcome{err: errRecordTooLarge}
			if c, ok := ownedBy[i]; ok {
				release = append(release, c)
			}
			continue
		}
		recs = append(recs, rec)
		recIdx = append(recIdx, i)
		job := jobFromSubmission(id, tenant, a.Spec, now, a.RunAt, traceID)
		f := false
		job.Deduplicated = &f
		out[i] = outcome{job: job, created: true}
	}
	submitted := map[string][]byte{}
	if len(recs) > 0 {
		s.testPause(ctx, pauseClaimed, len(owned) > 0)
		results := s.deps.Kafka.ProduceSync(ctx, recs...)
		s.testPause(ctx, pauseProduced, len(owned) > 0)
		for k, res := range results {
			i := recIdx[k]
			if res.Err != nil {
				s.log.ErrorContext(ctx, "produce enqueued failed", "tenant", tenant, "job_id", out[i].job.ID, "err", res.Err)
				out[i] = outcome{err: errUnavailable}
				if c, ok := ownedBy[i]; ok {
					abandon = append(abandon, c) // it may have reached Kafka
				}
				continue
			}
			if c, ok := ownedBy[i]; ok {
				finished = append(finished, idem.Finished{Key: c.Key, Hash: c.Hash, JobID: out[i].job.ID})
			}
			cached := out[i].job
			cached.Deduplicated = nil
			b, _ := json.Marshal(cached)
			submitted[cached.ID] = b
			s.log.DebugContext(ctx, "job submitted", "tenant", tenant, "job_id", cached.ID, "type", cached.Type, "queue", cached.Queue)
		}
	}
	if produced := len(submitted); produced > 0 {
		// Count what this replica accepted until the cached count refreshes.
		s.counts.Add(tenant, func(c store.Counts) store.Counts { c.Pending += int64(produced); return c })
	}
	bg := context.WithoutCancel(ctx)
	if err := s.idem.Release(bg, tenant, release); err != nil {
		s.log.WarnContext(ctx, "idempotency release failed", "tenant", tenant, "err", err)
	}
	if err := s.idem.Abandon(bg, tenant, abandon); err != nil {
		s.log.WarnContext(ctx, "idempotency release failed", "tenant", tenant, "err", err)
	}
	if err := s.idem.Complete(bg, tenant, finished, submitted); err != nil {
		// The jobs are produced; the projection remains the durable record.
		s.log.WarnContext(ctx, "idempotency completion failed", "tenant", tenant, "err", err)
	}
	return out, nil
}

func pick(claims []idem.Claim, idx []int) []idem.Claim {
	out := make([]idem.Claim, len(idx))
	for k, ci := range idx {
		out[k] = claims[ci]
	}
	return out
}

func dedup(j Job) Job {
	t := true
	j.Deduplicated = &t
	return j
}

// resolveDuplicates answers items whose key names a finished job with that
// job: from the projection, else from the submitted cache, else rebuilt from
// the (identical) request.
func (s *Service) resolveDuplicates(ctx context.Context, tenant string, items []item, accepted []submit.Accepted, ids map[int]string, out []outcome, now time.Time) error {
	list := make([]string, 0, len(ids))
	for _, id := range ids {
		list = append(list, id)
	}
	rows, err := s.store.GetMany(ctx, tenant, list)
	if err != nil {
		return err
	}
	var missing []string
	for _, id := range list {
		if _, ok := rows[id]; !ok {
			missing = append(missing, id)
		}
	}
	cached, err := s.idem.Submitted(ctx, missing...)
	if err != nil {
		s.log.WarnContext(ctx, "submitted cache read failed", "tenant", tenant, "err", err)
		cached = map[string][]byte{}
	}
	for i, id := range ids {
		if row, ok := rows[id]; ok {
			out[i] = outcome{job: dedup(jobFromRow(row.Row, now))}
			continue
		}
		var j Job
		if b, ok := cached[id]; ok && json.Unmarshal(b, &j) == nil && j.TenantID == tenant {
			out[i] = outcome{job: dedup(j.withStatusNow(now))}
			continue
		}
		a := accepted[i]
		out[i] = outcome{job: dedup(jobFromSubmission(id, tenant, a.Spec, now, a.RunAt, ""))}
	}
	return nil
}

// lookup finds a job of tenant: the projection's row wins, else the
// submitted cache.
func (s *Service) lookup(ctx context.Context, tenant, id string) (Job, bool, error) {
	now := s.cfg.Now()
	row, ok, err := s.store.Get(ctx, tenant, id)
	if err != nil {
		return Job{}, false, err
	}
	if ok {
		return jobFromRow(row.Row, now), true, nil
	}
	cached, err := s.idem.Submitted(ctx, id)
	if err != nil {
		s.log.WarnContext(ctx, "submitted cache read failed", "tenant", tenant, "job_id", id, "err", err)
		return Job{}, false, nil
	}
	var j Job
	if b, ok := cached[id]; ok && json.Unmarshal(b, &j) == nil && j.TenantID == tenant {
		return j.withStatusNow(now), true, nil
	}
	return Job{}, false, nil
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
		httpx.WriteJSON(w, http.StatusOK, j)
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

func (s *Service) handleList(w http.ResponseWriter, r *http.Request) {
	p, _ := auth.FromContext(r.Context())
	q := r.URL.Query()
	f := store.Filter{Type: q.Get("type"), Queue: q.Get("queue"), Tags: q["tag"], Now: s.cfg.Now()}
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
	f.Limit = limit + 1
	rows, err := s.store.List(r.Context(), p.TenantID, f)
	if err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	rows, next := httpx.TrimPage(rows, limit, func(j store.Job) string { return httpx.Keyset{T: j.CreatedAt, ID: j.ID}.String() })
	jobs := make([]Job, 0, len(rows))
	for _, row := range rows {
		jobs = append(jobs, jobFromRow(row.Row, f.Now))
	}
	httpx.WriteList(w, "jobs", jobs, next)
}
