package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/ferryhq/ferry/events/schema"
	"github.com/ferryhq/ferry/platform/auth"
	"github.com/ferryhq/ferry/platform/httpx"
	"github.com/ferryhq/ferry/platform/jobs"
	"github.com/ferryhq/ferry/services/api/internal/schedules"
)

// Schedule settings that are not configurable.
const (
	defaultCatchupLimit = 10
	maxCatchupLimit     = 1000
	// nextFireTimes is how many upcoming fire times the resource shows.
	nextFireTimes = 5
)

var scheduleNamePattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$`)

// Errors of the schedule routes.
var (
	errScheduleNameTaken = &httpx.Error{Status: http.StatusConflict, Code: "schedule_name_taken",
		Message: "the tenant already has a schedule with this name"}
)

// Schedule is the schedule resource.
type Schedule struct {
	ID       string `json:"id"`
	TenantID string `json:"tenant_id"`
	ScheduleSettings
	// NextFireTimes are the upcoming fire times ([] while paused).
	NextFireTimes []time.Time `json:"next_fire_times"`
	QueuedFireAt  *time.Time  `json:"queued_fire_at"`
	LastFireAt    *time.Time  `json:"last_fire_at"`
	LastJobID     string      `json:"last_job_id"`
	LastError     string      `json:"last_error"`
	Fired         int64       `json:"fired"`
	Skipped       int64       `json:"skipped"`
	CreatedAt     time.Time   `json:"created_at"`
	UpdatedAt     time.Time   `json:"updated_at"`
}

// ScheduleSettings are the fields of a schedule its owner sets (not its
// firing state): what a change of it records (changes.go).
type ScheduleSettings struct {
	Name         string          `json:"name"`
	Cron         string          `json:"cron"`
	TimeZone     string          `json:"timezone"`
	Job          json.RawMessage `json:"job"`
	Overlap      string          `json:"overlap"`
	Catchup      string          `json:"catchup"`
	CatchupLimit int             `json:"catchup_limit"`
	Paused       bool            `json:"paused"`
}

func settingsOf(sc schedules.Schedule) ScheduleSettings {
	return ScheduleSettings{Name: sc.Name, Cron: sc.Cron, TimeZone: sc.TimeZone, Job: sc.Template, Overlap: sc.Overlap,
		Catchup: sc.Catchup, CatchupLimit: sc.CatchupLimit, Paused: sc.Paused}
}

func scheduleResource(sc schedules.Schedule) Schedule {
	out := Schedule{ID: sc.ID, TenantID: sc.TenantID, ScheduleSettings: settingsOf(sc),
		NextFireTimes: []time.Time{}, QueuedFireAt: sc.QueuedFireAt, LastFireAt: sc.LastFireAt, LastJobID: sc.LastJobID,
		LastError: sc.LastError, Fired: sc.Fired, Skipped: sc.Skipped, CreatedAt: sc.CreatedAt, UpdatedAt: sc.UpdatedAt}
	if spec, err := parseSpec(sc.Cron, sc.TimeZone); err == nil && !sc.Paused && sc.NextFireAt != nil {
		out.NextFireTimes = append([]time.Time{*sc.NextFireAt}, spec.NextN(*sc.NextFireAt, nextFireTimes-1)...)
	}
	return out
}

func parseSpec(expr, tz string) (schedules.Spec, error) {
	loc, err := schedules.ParseTimeZone(tz)
	if err != nil {
		return schedules.Spec{}, err
	}
	return schedules.Parse(expr, loc)
}

// scheduleRoutes registers the schedule routes (tenant-scoped).
func (s *Service) scheduleRoutes(r chi.Router) {
	r.Post("/v1/schedules", s.handleCreateSchedule)
	r.Get("/v1/schedules", s.handleListSchedules)
	r.Get("/v1/schedules/{id}", s.handleGetSchedule)
	r.Patch("/v1/schedules/{id}", s.handleUpdateSchedule)
	r.Delete("/v1/schedules/{id}", s.handleDeleteSchedule)
	r.Post("/v1/schedules/{id}/pause", s.handlePauseSchedule)
	r.Post("/v1/schedules/{id}/resume", s.handleResumeSchedule)
	r.Post("/v1/schedules/{id}/trigger", s.handleTriggerSchedule)
}

// scheduleRequest is the body of POST and PATCH /v1/schedules; absent
// fields keep their value (PATCH) or default (POST).
type scheduleRequest struct {
	Name         *string         `json:"name"`
	Cron         *string         `json:"cron"`
	TimeZone     *string         `json:"timezone"`
	Job          json.RawMessage `json:"job"`
	Overlap      *string         `json:"overlap"`
	Catchup      *string         `json:"catchup"`
	CatchupLimit *int            `json:"catchup_limit"`
	Paused       *bool           `json:"paused"`
}

// scheduleEdit applies a request to a schedule and checks the result.
type scheduleEdit struct {
	s        *Service
	settings auth.Settings
	now      time.Time
	bad      map[string]string
	tzBad    bool
}

// apply sets the request's fields on sc and reports the first error:
// 422 invalid_timezone or invalid_schedule with every bad field, or the
// job template's own error.
func (e *scheduleEdit) apply(req scheduleRequest, sc *schedules.Schedule) error {
	timing := sc.NextFireAt == nil && sc.DueAt == nil // a new schedule
	set := func(dst *string, src *string) {
		if src != nil {
			timing = timing || dst == &sc.Cron || dst == &sc.TimeZone
			*dst = *src
		}
	}
	set(&sc.Name, req.Name)
	set(&sc.Cron, req.Cron)
	set(&sc.TimeZone, req.TimeZone)
	set(&sc.Overlap, req.Overlap)
	set(&sc.Catchup, req.Catchup)
	if req.CatchupLimit != nil {
		sc.CatchupLimit = *req.CatchupLimit
	}
	e.checkFields(sc)
	spec, err := e.checkTiming(sc)
	if err != nil {
		return err
	}
	if len(req.Job) > 0 {
		if err := e.checkTemplate(req.Job, sc); err != nil {
			return err
		}
	}
	if timing {
		sc.NextFireAt = nextFire(spec, e.now)
	}
	if req.Paused != nil {
		setPaused(sc, *req.Paused, spec, e.now)
	}
	sc.DueAt = dueAt(sc, e.now)
	return nil
}

// checkFields checks name and policies.
func (e *scheduleEdit) checkFields(sc *schedules.Schedule) {
	if err := schema.CheckText(sc.Name); err != nil || !scheduleNamePattern.MatchString(sc.Name) {
		e.bad["name"] = "must hold 1 to 128 letters, digits, '_', '.', ':' or '-', starting with a letter or digit"
	}
	switch sc.Overlap {
	case schedules.OverlapAllow, schedules.OverlapSkip, schedules.OverlapQueueOne:
	default:
		e.bad["overlap"] = `must be "allow", "skip" or "queue_one"`
	}
	switch sc.Catchup {
	case schedules.CatchupSkip, schedules.CatchupOne, schedules.CatchupAll:
	default:
		e.bad["catchup"] = `must be "skip", "one" or "all"`
	}
	if sc.CatchupLimit < 1 || sc.CatchupLimit > maxCatchupLimit {
		e.bad["catchup_limit"] = fmt.Sprintf("must be between 1 and %d", maxCatchupLimit)
	}
}

// checkTiming parses the expression and the zone, then answers every field
// error found so far.
func (e *scheduleEdit) checkTiming(sc *schedules.Schedule) (schedules.Spec, error) {
	loc, err := schedules.ParseTimeZone(sc.TimeZone)
	if err != nil {
		e.bad["timezone"], e.tzBad = err.Error(), true
		loc = time.UTC
	}
	if sc.TimeZone == "" {
		sc.TimeZone = "UTC"
	}
	var spec schedules.Spec
	if err := schema.CheckText(sc.Cron); err != nil {
		e.bad["cron"] = schema.FieldMessage(err)
	} else if spec, err = schedules.Parse(sc.Cron, loc); err != nil {
		e.bad["cron"] = err.Error() + ` (5 fields "min hour dom month dow", 6 with a leading seconds field, a descriptor such as "@daily", or "@every 30s")`
	}
	if len(e.bad) == 0 {
		return spec, nil
	}
	code, msg := "invalid_schedule", "the schedule has invalid fields"
	if e.tzBad && len(e.bad) == 1 {
		code, msg = "invalid_timezone", "timezone is not an IANA time zone"
	}
	err = httpx.Errorf(http.StatusUnprocessableEntity, code, "%s", msg)
	err.(*httpx.Error).Fields = e.bad
	return spec, err
}

// templateOnlyFields are submission fields a template may not hold: the
// schedule decides when its jobs run and keys each fire itself.
var templateOnlyFields = map[string]string{
	"run_at": "a schedule's jobs run at its fire times", "delay": "a schedule's jobs run at their fire times",
	"not_after": "an absolute time cannot apply to every fire", "idempotency_key": "each fire is keyed by the schedule",
}

// checkTemplate validates the job template exactly as POST /v1/jobs
// validates a submission, with the tenant's limits, and stores it.
func (e *scheduleEdit) checkTemplate(raw json.RawMessage, sc *schedules.Schedule) error {
	var req jobs.Request
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		ie := itemDecodeError(err)
		ie.Fields = prefixFields(ie.Fields)
		return ie
	}
	var fields map[string]json.RawMessage
	_ = json.Unmarshal(raw, &fields)
	for f, why := range templateOnlyFields {
		if _, ok := fields[f]; ok {
			e.bad["job."+f] = "not allowed in a schedule's job: " + why
		}
	}
	if len(e.bad) > 0 {
		ve := httpx.Errorf(http.StatusUnprocessableEntity, "invalid_schedule", "the schedule's job has fields a schedule sets itself")
		ve.Fields = e.bad
		return ve
	}
	lim := jobs.TenantLimits(e.settings, e.s.jobDefaults())
	if _, err := jobs.Validate(req, e.now, lim); err != nil {
		var inv *jobs.Invalid
		if !errors.As(err, &inv) {
			return err
		}
		ve := inv.HTTPError()
		ve.Fields = prefixFields(ve.Fields)
		return ve
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, raw); err != nil {
		return err
	}
	sc.Template = compact.Bytes()
	return nil
}

func prefixFields(in map[string]string) map[string]string {
	out := make(map[string]string, len(in))
	for k, v := range in {
		out["job."+k] = v
	}
	return out
}

// nextFire is spec's first fire time after now (nil: none).
func nextFire(spec schedules.Spec, now time.Time) *time.Time {
	if t := spec.Next(now); !t.IsZero() {
		return &t
	}
	return nil
}

// setPaused pauses or resumes sc. Fire times that pass while paused are
// not caught up: a resumed schedule fires from its next fire time after
// now. A fire waiting for the previous run (queue_one) is dropped.
func setPaused(sc *schedules.Schedule, paused bool, spec schedules.Spec, now time.Time) {
	if sc.Paused == paused {
		return
	}
	sc.Paused = paused
	if paused {
		sc.QueuedFireAt = nil
		return
	}
	sc.NextFireAt = nextFire(spec, now)
}

func (s *Service) handleCreateSchedule(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	p, _ := auth.FromContext(ctx)
	req, e, err := s.scheduleBody(w, r)
	if err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	if len(req.Job) == 0 || req.Cron == nil {
		httpx.WriteError(w, r, missingScheduleFields(req))
		return
	}
	sc := schedules.Schedule{TenantID: p.TenantID, ID: schedules.NewID(), Overlap: schedules.OverlapAllow,
		Catchup: schedules.CatchupOne, CatchupLimit: defaultCatchupLimit}
	if err := e.apply(req, &sc); err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	created, err := s.schedules.Create(ctx, sc, s.cfg.MaxSchedules, s.scheduleRecorder(schema.ActionCreated))
	if err != nil {
		httpx.WriteError(w, r, s.scheduleStoreError(err))
		return
	}
	httpx.WriteJSON(w, http.StatusCreated, scheduleResource(created))
}

func missingScheduleFields(req scheduleRequest) error {
	e := httpx.Errorf(http.StatusUnprocessableEntity, "invalid_schedule", "a schedule needs a name, a cron expression and a job")
	e.Fields = map[string]string{}
	if req.Cron == nil {
		e.Fields["cron"] = "is required"
	}
	if len(req.Job) == 0 {
		e.Fields["job"] = "is required"
	}
	return e
}

// scheduleBody decodes a POST or PATCH body and prepares its checks with
// the caller's tenant settings.
func (s *Service) scheduleBody(w http.ResponseWriter, r *http.Request) (scheduleRequest, *scheduleEdit, error) {
	settings, err := s.tenantSettings(r.Context())
	if err != nil {
		return scheduleRequest{}, nil, err
	}
	var req scheduleRequest
	if err := httpx.DecodeJSON(w, r, int64(s.maxPayload(settings))+envelopeSlack, &req); err != nil {
		return scheduleRequest{}, nil, err
	}
	return req, &scheduleEdit{s: s, settings: settings, now: s.cfg.Now().UTC(), bad: map[string]string{}}, nil
}

// scheduleStoreError maps the store's errors to answers.
func (s *Service) scheduleStoreError(err error) error {
	switch {
	case errors.Is(err, schedules.ErrNotFound):
		return httpx.ErrNotFound
	case errors.Is(err, schedules.ErrNameTaken):
		return errScheduleNameTaken
	case errors.Is(err, schedules.ErrTooMany):
		return httpx.Errorf(http.StatusUnprocessableEntity, "too_many_schedules",
			"the tenant already has %d schedules, its limit (FERRY_SCHEDULES_MAX_PER_TENANT); delete one first", s.cfg.MaxSchedules)
	}
	var he *httpx.Error
	if errors.As(err, &he) {
		return he
	}
	return err
}

func (s *Service) handleGetSchedule(w http.ResponseWriter, r *http.Request) {
	p, _ := auth.FromContext(r.Context())
	sc, err := s.schedules.Get(r.Context(), p.TenantID, chi.URLParam(r, "id"))
	if err != nil {
		httpx.WriteError(w, r, s.scheduleStoreError(err))
		return
	}
	httpx.WriteJSON(w, http.StatusOK, scheduleResource(sc))
}

func (s *Service) handleListSchedules(w http.ResponseWriter, r *http.Request) {
	p, _ := auth.FromContext(r.Context())
	writeIDPage(w, r, "schedules", defaultListLimit, maxListLimit,
		func(after string, limit int) ([]schedules.Schedule, error) {
			return s.schedules.List(r.Context(), p.TenantID, after, limit)
		},
		func(sc schedules.Schedule) string { return sc.ID }, scheduleResource)
}

// writeIDPage answers one page of a list ordered by id: read returns up to
// limit items after the cursor's id (limit is one more than the page, to
// know whether another follows); resource renders each item.
func writeIDPage[T, R any](w http.ResponseWriter, r *http.Request, key string, def, max int,
	read func(after string, limit int) ([]T, error), id func(T) string, resource func(T) R) {
	limit, after, err := pageParams(r, def, max)
	if err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	rows, err := read(after.ID, limit+1)
	if err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	rows, next := httpx.TrimPage(rows, limit, func(v T) string { return httpx.Keyset{ID: id(v)}.String() })
	out := make([]R, 0, len(rows))
	for _, v := range rows {
		out = append(out, resource(v))
	}
	httpx.WriteList(w, key, out, next)
}

func (s *Service) handleUpdateSchedule(w http.ResponseWriter, r *http.Request) {
	req, e, err := s.scheduleBody(w, r)
	if err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	s.changeSchedule(w, r, schema.ActionUpdated, func(sc *schedules.Schedule) error { return e.apply(req, sc) })
}

func (s *Service) handlePauseSchedule(w http.ResponseWriter, r *http.Request) {
	s.setPausedRoute(w, r, true, schema.ActionPaused)
}

func (s *Service) handleResumeSchedule(w http.ResponseWriter, r *http.Request) {
	s.setPausedRoute(w, r, false, schema.ActionResumed)
}

// setPausedRoute pauses or resumes; idempotent.
func (s *Service) setPausedRoute(w http.ResponseWriter, r *http.Request, paused bool, action string) {
	now := s.cfg.Now().UTC()
	s.changeSchedule(w, r, action, func(sc *schedules.Schedule) error {
		spec, err := parseSpec(sc.Cron, sc.TimeZone)
		if err != nil {
			return err
		}
		setPaused(sc, paused, spec, now)
		sc.DueAt = dueAt(sc, now)
		return nil
	})
}

// changeSchedule applies fn to the caller's schedule {id} under its row
// lock, records the change as action and answers the schedule.
func (s *Service) changeSchedule(w http.ResponseWriter, r *http.Request, action string, fn func(*schedules.Schedule) error) {
	ctx := r.Context()
	p, _ := auth.FromContext(ctx)
	sc, err := s.schedules.Change(ctx, p.TenantID, chi.URLParam(r, "id"), fn, s.scheduleRecorder(action))
	if err != nil {
		httpx.WriteError(w, r, s.scheduleStoreError(err))
		return
	}
	httpx.WriteJSON(w, http.StatusOK, scheduleResource(sc))
}

func (s *Service) handleDeleteSchedule(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	p, _ := auth.FromContext(ctx)
	if _, err := s.schedules.Delete(ctx, p.TenantID, chi.URLParam(r, "id"), s.scheduleRecorder(schema.ActionDeleted)); err != nil {
		httpx.WriteError(w, r, s.scheduleStoreError(err))
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// handleTriggerSchedule fires the schedule now, whatever its overlap
// policy and even while paused, and answers 202 with the job.
func (s *Service) handleTriggerSchedule(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	p, _ := auth.FromContext(ctx)
	now := s.cfg.Now().UTC().Truncate(time.Microsecond)
	var job Job
	_, err := s.schedules.Change(ctx, p.TenantID, chi.URLParam(r, "id"), func(sc *schedules.Schedule) error {
		jobs, err := s.submitFires(ctx, sc, []time.Time{now}, true)
		if err != nil {
			return err
		}
		job = jobs[0]
		recordFires(sc, jobs, now)
		return nil
	}, s.scheduleRecorder(schema.ActionTriggered))
	if err != nil {
		httpx.WriteError(w, r, s.scheduleStoreError(err))
		return
	}
	writeJob(w, http.StatusAccepted, &job)
}
