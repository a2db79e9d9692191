package dlq

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferryhq/ferry/events/schema"
	"github.com/ferryhq/ferry/platform/auth"
	"github.com/ferryhq/ferry/platform/httpx"
	"github.com/ferryhq/ferry/platform/jobs"
	"github.com/ferryhq/ferry/platform/kafkax"
	"github.com/ferryhq/ferry/services/dlq/internal/redrive"
	"github.com/ferryhq/ferry/services/dlq/internal/store"
)

const source = "ferry/dlq"

// List limits.
const (
	defaultListLimit = 50
	maxListLimit     = 500
	maxQueryLen      = 256
	maxFilterTags    = 10
	sampleSize       = 10
	// bodySlack is the room the fields of a re-drive body other than the
	// payload may take.
	bodySlack = 16 << 10
)

// classRule is what a bad class filter is told.
var classRule = func() string {
	names := make([]string, len(schema.ErrorClasses))
	for i, c := range schema.ErrorClasses {
		names[i] = string(c)
	}
	return "must be one of " + strings.Join(names, ", ")
}()

// Errors of the dlq routes.
var (
	errNotFound = &httpx.Error{Status: http.StatusNotFound, Code: "dlq_entry_not_found", Message: "no dead-lettered job with this id"}
	errInFlight = &httpx.Error{Status: http.StatusConflict, Code: "redrive_in_flight",
		Message: "this entry is being re-driven by another request; retry shortly", RetryAfter: time.Second}
	errUnavailable = &httpx.Error{Status: http.StatusServiceUnavailable, Code: "unavailable",
		Message: "the re-drive could not be produced; nothing was re-driven, retry", RetryAfter: time.Second}
)

func storeErr(err error) error {
	if errors.Is(err, store.ErrNotFound) {
		return errNotFound
	}
	return err
}

// ---- filters and cursors ----

// filterJSON is the filter of a bulk re-drive; list takes the same fields
// as query parameters.
type filterJSON struct {
	Type  string     `json:"type,omitempty"`
	Queue string     `json:"queue,omitempty"`
	Class string     `json:"class,omitempty"`
	Q     string     `json:"q,omitempty"`
	From  *time.Time `json:"from,omitempty"`
	To    *time.Time `json:"to,omitempty"`
	// Tags must all be on the job (the list's repeated tag parameter).
	Tags []string `json:"tags,omitempty"`
}

func (f filterJSON) validate(bad map[string]string) store.Filter {
	if f.Class != "" && !schema.ErrorClass(f.Class).Valid() {
		bad["class"] = classRule
	}
	if len(f.Q) > maxQueryLen {
		bad["q"] = fmt.Sprintf("must be at most %d characters", maxQueryLen)
	}
	// Filters are query parameters of Postgres text columns: NUL or
	// invalid UTF-8 would fail the query (500) instead of matching nothing.
	for name, v := range map[string]string{"type": f.Type, "queue": f.Queue, "q": f.Q} {
		if err := schema.CheckText(v); err != nil {
			bad[name] = schema.FieldMessage(err)
		}
	}
	if len(f.Tags) > maxFilterTags {
		bad["tags"] = fmt.Sprintf("at most %d tags", maxFilterTags)
	}
	for _, tag := range f.Tags {
		if err := schema.CheckText(tag); err != nil || tag == "" || len(tag) > maxQueryLen {
			bad["tags"] = fmt.Sprintf("each tag must be storable text of 1 to %d bytes", maxQueryLen)
		}
	}
	if f.From != nil && f.To != nil && !f.From.Before(*f.To) {
		bad["to"] = "must be after from"
	}
	return store.Filter{Type: f.Type, Queue: f.Queue, Class: f.Class, Q: f.Q, From: f.From, To: f.To, Tags: f.Tags}
}

func invalid(bad map[string]string) error {
	if len(bad) == 0 {
		return nil
	}
	e := httpx.Errorf(http.StatusBadRequest, "invalid_filter", "the request has invalid fields")
	e.Fields = bad
	return e
}

// ---- routes ----

func (s *Service) handleList(w http.ResponseWriter, r *http.Request) {
	p, _ := auth.FromContext(r.Context())
	q := r.URL.Query()
	bad := map[string]string{}
	fj := filterJSON{Type: q.Get("type"), Queue: q.Get("queue"), Class: q.Get("class"), Q: q.Get("q"), Tags: q["tag"]}
	for name, dst := range map[string]**time.Time{"from": &fj.From, "to": &fj.To} {
		if v := q.Get(name); v != "" {
			t, err := time.Parse(time.RFC3339Nano, v)
			if err != nil {
				bad[name] = "must be an RFC 3339 time"
				continue
			}
			*dst = &t
		}
	}
	f := fj.validate(bad)
	if err := invalid(bad); err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	limit, err := httpx.ParseLimit(r, defaultListLimit, maxListLimit)
	if err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	after, err := httpx.KeysetParam(r)
	if err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	var pos *store.Cursor
	if after != nil {
		pos = &store.Cursor{DeadAt: after.T, JobID: after.ID}
	}
	rows, err := s.store.List(r.Context(), p.TenantID, f, pos, limit+1)
	if err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	rows, next := httpx.TrimPage(rows, limit, func(e store.Entry) string { return httpx.Keyset{T: e.DeadAt, ID: e.JobID}.String() })
	entries := make([]Entry, 0, len(rows))
	for _, e := range rows {
		entries = append(entries, entryFromStore(e))
	}
	httpx.WriteList(w, "entries", entries, next)
}

func (s *Service) handleGet(w http.ResponseWriter, r *http.Request) {
	p, _ := auth.FromContext(r.Context())
	e, err := s.store.Get(r.Context(), p.TenantID, chi.URLParam(r, "id"))
	if err != nil {
		httpx.WriteError(w, r, storeErr(err))
		return
	}
	httpx.WriteJSON(w, http.StatusOK, entryFromStore(e))
}

func (s *Service) handleSuppress(w http.ResponseWriter, r *http.Request)   { s.suppress(w, r, true) }
func (s *Service) handleUnsuppress(w http.ResponseWriter, r *http.Request) { s.suppress(w, r, false) }

func (s *Service) suppress(w http.ResponseWriter, r *http.Request, on bool) {
	p, _ := auth.FromContext(r.Context())
	id := chi.URLParam(r, "id")
	if err := s.store.Suppress(r.Context(), p.TenantID, id, p.KeyID, on, s.cfg.Now()); err != nil {
		httpx.WriteError(w, r, storeErr(err))
		return
	}
	e, err := s.store.Get(r.Context(), p.TenantID, id)
	if err != nil {
		httpx.WriteError(w, r, storeErr(err))
		return
	}
	s.log.InfoContext(r.Context(), "dlq entry suppression changed", "tenant", p.TenantID, "job_id", id, "suppressed", on, "actor", p.KeyID)
	httpx.WriteJSON(w, http.StatusOK, entryFromStore(e))
}

func (s *Service) handlePurge(w http.ResponseWriter, r *http.Request) {
	p, _ := auth.FromContext(r.Context())
	id := chi.URLParam(r, "id")
	if err := s.store.Purge(r.Context(), p.TenantID, id, s.cfg.Now()); err != nil {
		httpx.WriteError(w, r, storeErr(err))
		return
	}
	s.log.InfoContext(r.Context(), "dlq entry purged", "tenant", p.TenantID, "job_id", id, "actor", p.KeyID)
	w.WriteHeader(http.StatusNoContent)
}

// redriveBody is the optional body of a single re-drive.
type redriveBody struct {
	Payload     json.RawMessage `json:"payload,omitempty"`
	MaxAttempts *int            `json:"max_attempts,omitempty"`
}

// decodeRedriveBody reads a re-drive's optional body and checks its edits
// under the tenant's limits, as a submission of the tenant is checked
// (jobs.CheckRedriveEdit).
func (s *Service) decodeRedriveBody(w http.ResponseWriter, r *http.Request) (redrive.Edit, error) {
	p, _ := auth.FromContext(r.Context())
	lim, err := s.limits.Limits(r.Context(), p.TenantID)
	if err != nil {
		s.log.ErrorContext(r.Context(), "tenant settings read failed", "tenant", p.TenantID, "err", err)
		return redrive.Edit{}, errUnavailable
	}
	limit := int64(lim.MaxPayloadBytes) + bodySlack
	raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		var maxErr *http.MaxBytesError
		if errors.As(err, &maxErr) {
			return redrive.Edit{}, httpx.Errorf(http.StatusRequestEntityTooLarge, "payload_too_large", "request body exceeds %d bytes", limit)
		}
		return redrive.Edit{}, httpx.Errorf(http.StatusBadRequest, "invalid_json", "could not read the request body")
	}
	if len(bytes.TrimSpace(raw)) == 0 {
		return redrive.Edit{}, nil
	}
	var b redriveBody
	r.Body = io.NopCloser(bytes.NewReader(raw))
	if err := httpx.DecodeJSON(w, r, limit, &b); err != nil {
		return redrive.Edit{}, err
	}
	payload, err := jobs.CheckRedriveEdit(b.Payload, b.MaxAttempts, lim)
	var inv *jobs.Invalid
	if errors.As(err, &inv) {
		return redrive.Edit{}, inv.HTTPError()
	}
	return redrive.Edit{Payload: payload, MaxAttempts: b.MaxAttempts}, err
}

type redriveResponse struct {
	Job          jobs.Job `json:"job"`
	Entry        Entry    `json:"entry"`
	Deduplicated bool     `json:"deduplicated"`
}

func (s *Service) handleRedrive(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	p, _ := auth.FromContext(ctx)
	id := chi.URLParam(r, "id")
	edit, err := s.decodeRedriveBody(w, r)
	if err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	deadline := time.Now().Add(s.cfg.ClaimWait)
	for {
		e, err := s.store.Get(ctx, p.TenantID, id)
		if err != nil {
			httpx.WriteError(w, r, storeErr(err))
			return
		}
		if rd := e.Redrive; rd != nil && rd.State == store.StateDone {
			at := e.DeadAt
			if rd.RedrivenAt != nil {
				at = *rd.RedrivenAt
			}
			httpx.WriteJSON(w, http.StatusOK, redriveResponse{
				Job:   redrivenJob(p.TenantID, rd.JobID, id, rd.Spec, at, true),
				Entry: entryFromStore(e), Deduplicated: true,
			})
			return
		}
		now := s.cfg.Now().UTC()
		spec := redrive.Spec(e.Spec, edit, now)
		jobID, ok, err := s.store.ClaimOne(ctx, p.TenantID, id, jobs.NewID(), p.KeyID, spec, now, now.Add(-s.cfg.ClaimTTL))
		if err != nil {
			httpx.WriteError(w, r, err)
			return
		}
		if !ok {
			// Purged, re-driven or being re-driven meanwhile: look again.
			if time.Now().After(deadline) {
				httpx.WriteError(w, r, errInFlight)
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(25 * time.Millisecond):
			}
			continue
		}
		claim := store.Claim{DeadJobID: id, JobID: jobID, Spec: spec}
		if err := s.produce(ctx, []store.Claim{claim}, p, now); err != nil {
			s.log.ErrorContext(ctx, "produce re-drive failed", "tenant", p.TenantID, "job_id", id, "new_job_id", jobID, "err", err)
			s.release(ctx, p.TenantID, []store.Claim{claim})
			httpx.WriteError(w, r, errUnavailable)
			return
		}
		s.markDone(ctx, p.TenantID, []store.Claim{claim}, now)
		s.log.InfoContext(ctx, "dlq entry re-driven", "tenant", p.TenantID, "job_id", id, "new_job_id", jobID, "actor", p.KeyID)
		if fresh, err := s.store.Get(ctx, p.TenantID, id); err == nil {
			e = fresh
		}
		httpx.WriteJSON(w, http.StatusAccepted, redriveResponse{
			Job:   redrivenJob(p.TenantID, jobID, id, spec, now, false),
			Entry: entryFromStore(e),
		})
		return
	}
}

// produce emits the enqueued events of claims and waits for every ack. It
// returns the claims whose event failed, or an error for all of them.
func (s *Service) produce(ctx context.Context, claims []store.Claim, p auth.Principal, now time.Time) error {
	failed, err := s.produceEach(ctx, claims, p, now)
	if err == nil && len(failed) > 0 {
		err = fmt.Errorf("%d of %d re-drives not produced", len(failed), len(claims))
	}
	return err
}

// produceEach produces the enqueued events of claims and reports which
// failed; a setup error fails them all.
func (s *Service) produceEach(ctx context.Context, claims []store.Claim, p auth.Principal, now time.Time) (failed map[string]error, err error) {
	topic := s.deps.Topics.Lifecycle(schema.EventEnqueued)
	recs := make([]*kgo.Record, 0, len(claims))
	byRec := make(map[*kgo.Record]string, len(claims))
	for _, c := range claims {
		rec, err := schema.NewRecord(topic, source, redrive.Event(p.TenantID, c.DeadJobID, c.JobID, p.KeyID, c.Spec, now))
		if err != nil {
			return nil, err
		}
		recs = append(recs, rec)
		byRec[rec] = c.DeadJobID
	}
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.ProduceTimeout)
	defer cancel()
	if len(recs) == 1 {
		if err := kafkax.ProduceAll(pctx, s.deps.Kafka, recs...); err != nil {
			return map[string]error{claims[0].DeadJobID: err}, nil
		}
		return nil, nil
	}
	failed = map[string]error{}
	for _, res := range s.deps.Kafka.ProduceSync(pctx, recs...) {
		if res.Err != nil {
			failed[byRec[res.Record]] = res.Err
		}
	}
	return failed, nil
}

// finishCtx outlives the request so no claim is left pending because the
// client went away.
func finishCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
}

func (s *Service) markDone(ctx context.Context, tenant string, claims []store.Claim, now time.Time) {
	fctx, cancel := finishCtx(ctx)
	defer cancel()
	if err := s.store.MarkDone(fctx, tenant, claims, now); err != nil {
		// The projection confirms the re-drives from the log.
		s.log.ErrorContext(ctx, "recording re-drives failed; the projection will confirm them", "tenant", tenant, "count", len(claims), "err", err)
	}
}

func (s *Service) release(ctx context.Context, tenant string, claims []store.Claim) {
	fctx, cancel := finishCtx(ctx)
	defer cancel()
	if err := s.store.Release(fctx, tenant, claims); err != nil {
		// The claims expire after ClaimTTL.
		s.log.ErrorContext(ctx, "releasing re-drive claims failed", "tenant", tenant, "count", len(claims), "err", err)
	}
}

// bulkBody is the body of POST /v1/dlq/redrive.
type bulkBody struct {
	Filter filterJSON `json:"filter"`
	DryRun bool       `json:"dry_run"`
	// Limit bounds the entries this call re-drives; at most Config.BulkMax.
	Limit int `json:"limit,omitempty"`
}

func (s *Service) handleBulkRedrive(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	p, _ := auth.FromContext(ctx)
	var b bulkBody
	if err := httpx.DecodeJSON(w, r, 64<<10, &b); err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	bad := map[string]string{}
	f := b.Filter.validate(bad)
	if b.Limit < 0 || b.Limit > s.cfg.BulkMax {
		bad["limit"] = fmt.Sprintf("must be from 1 to %d", s.cfg.BulkMax)
	}
	if err := invalid(bad); err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	if b.DryRun {
		s.dryRun(w, r, p, f)
		return
	}
	limit := s.cfg.BulkMax
	if b.Limit > 0 {
		limit = b.Limit
	}
	// The call takes only the entries listed when it starts: the jobs it
	// re-drives may die again while it runs, and their new entries match
	// the filter too.
	asOf, err := s.store.Clock(ctx)
	if err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	done, failed, runErr := s.bulk(ctx, p, f, asOf, limit)
	if runErr != nil && done == 0 && failed == 0 {
		httpx.WriteError(w, r, runErr)
		return
	}
	remaining, err := s.store.CountRedrivable(context.WithoutCancel(ctx), p.TenantID, f, asOf)
	if err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	s.log.InfoContext(ctx, "dlq bulk re-drive", "tenant", p.TenantID, "actor", p.KeyID, "redriven", done, "failed", failed, "remaining", remaining)
	httpx.WriteJSON(w, http.StatusOK, map[string]any{
		"dry_run": false, "count": done, "redriven": done, "failed": failed, "remaining": remaining,
	})
}

// dryRun answers what a bulk re-drive of f would take now: how many
// entries, and the first of them.
func (s *Service) dryRun(w http.ResponseWriter, r *http.Request, p auth.Principal, f store.Filter) {
	n, err := s.store.CountRedrivable(r.Context(), p.TenantID, f, time.Time{})
	if err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	sample, err := s.store.Redrivable(r.Context(), p.TenantID, f, sampleSize)
	if err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	out := make([]Entry, 0, len(sample))
	for _, e := range sample {
		out = append(out, entryFromStore(e))
	}
	httpx.WriteJSON(w, http.StatusOK, map[string]any{"dry_run": true, "count": n, "sample": out})
}

// bulk re-drives up to limit entries matching f and listed by asOf in
// rate-limited batches. It stops at the first batch with a produce failure
// (Kafka is unwell) and returns how many entries it re-drove and how many
// failed.
func (s *Service) bulk(ctx context.Context, p auth.Principal, f store.Filter, asOf time.Time, limit int) (done, failed int, err error) {
	for done < limit {
		n := min(s.batch, limit-done)
		if err := s.limiter.WaitN(ctx, n); err != nil {
			return done, failed, err
		}
		now := s.cfg.Now().UTC()
		claims, err := s.store.ClaimBatch(ctx, p.TenantID, f, asOf, n, p.KeyID, now, jobs.NewID, func(e store.Entry) schema.JobSpec {
			return redrive.Spec(e.Spec, redrive.Edit{}, now)
		})
		if err != nil {
			return done, failed, err
		}
		if len(claims) == 0 {
			return done, failed, nil
		}
		bad, err := s.produceEach(ctx, claims, p, now)
		if err != nil {
			s.release(ctx, p.TenantID, claims)
			return done, failed, err
		}
		var ok, notOK []store.Claim
		for _, c := range claims {
			if _, isBad := bad[c.DeadJobID]; isBad {
				notOK = append(notOK, c)
			} else {
				ok = append(ok, c)
			}
		}
		s.markDone(ctx, p.TenantID, ok, now)
		s.release(ctx, p.TenantID, notOK)
		done += len(ok)
		failed += len(notOK)
		if len(notOK) > 0 {
			for _, e := range bad {
				s.log.ErrorContext(ctx, "bulk re-drive produce failed", "tenant", p.TenantID, "failed", len(notOK), "err", e)
				break
			}
			return done, failed, nil
		}
	}
	return done, failed, nil
}
