package api

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/ferryhq/ferry/platform/auth"
	"github.com/ferryhq/ferry/platform/httpx"
	"github.com/ferryhq/ferry/platform/jobs"
	"github.com/ferryhq/ferry/services/api/internal/schedules"
)

// The firing loop of every api replica: a timer on the earliest due time
// of any schedule, woken early by Postgres NOTIFY when a schedule changes
// (on any replica). Each due schedule is claimed with FOR UPDATE SKIP
// LOCKED, so replicas share the work and never fire the same row at once;
// its jobs are created through the same submission path as POST /v1/jobs
// (validation, limits, Idempotency-Key), with a job id and key derived from
// (schedule id, fire time). Should a replica die after producing a fire's
// job but before its transaction commits, the next claim fires the same
// fire time again: the key answers with the existing job, and even without
// it (Redis flushed, projection behind) the enqueued event carries the same
// job id, which the scheduler and projections apply once.
const (
	// claimBatch bounds the schedules one firing transaction holds.
	claimBatch = 32
	// lockedRetry is how soon a loop looks again at a due schedule that
	// another replica holds (it is firing it, or it died holding it).
	lockedRetry = 50 * time.Millisecond
	// fireRetry is how soon a fire that could not be stored (Kafka or
	// Redis unavailable) is tried again.
	fireRetry = time.Second
	// queuedRecheck is how often a queue_one schedule with a waiting fire
	// looks whether the previous run has finished.
	queuedRecheck = time.Second
)

// scheduleFire is what a schedule's fire adds to a submission item.
type scheduleFire struct {
	jobID    string
	schedule string
	at       time.Time
}

// apply makes the job's run_at its fire time (nil: a plain submission).
func (f *scheduleFire) apply(a jobs.Accepted) jobs.Accepted {
	if f != nil {
		a.RunAt = f.at
	}
	return a
}

func (f *scheduleFire) scheduleID() string {
	if f == nil {
		return ""
	}
	return f.schedule
}

// fireOf is the fire of schedule id at t; trigger marks a manual one, so
// it never collides with a cron fire time.
func fireOf(id string, at time.Time, trigger bool) (*scheduleFire, string) {
	name := id
	if trigger {
		name += ":trigger"
	}
	key := "ferry:schedule:" + name + "@" + at.UTC().Format(time.RFC3339Nano)
	return &scheduleFire{jobID: jobs.DerivedID(key, at), schedule: id, at: at}, key
}

// fireLoop fires due schedules until ctx is done.
func (s *Service) fireLoop(ctx context.Context) {
	wake := make(chan struct{}, 1)
	var listener sync.WaitGroup
	defer listener.Wait()
	listener.Go(func() {
		s.schedules.Listen(ctx, func() {
			select {
			case wake <- struct{}{}:
			default:
			}
		}, s.log)
	})
	// The fire counters exist from the start, so dashboards see zeros.
	fireMetrics().fires.Add(ctx, 0, firedAttr)
	fireMetrics().fires.Add(ctx, 0, skippedAttr)
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		s.fireDue(ctx)
		timer.Reset(s.untilDue(ctx))
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		case <-wake:
		}
	}
}

// claimTimeout bounds one claim transaction, which a shutdown lets finish:
// a claim whose jobs were produced commits, rather than leaving its fire
// times to be fired again after the restart.
const claimTimeout = 10 * time.Second

// fireDue claims and fires due schedules until none is left unclaimed.
func (s *Service) fireDue(ctx context.Context) {
	for ctx.Err() == nil {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), claimTimeout)
		n, err := s.schedules.Claim(cctx, s.cfg.Now().UTC(), claimBatch, s.fireSchedule)
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				s.log.ErrorContext(ctx, "schedules: claim failed", "err", err)
			}
			return
		}
		if n < claimBatch {
			return
		}
	}
}

// untilDue is how long the loop may sleep: until the earliest due time,
// at most the idle interval (a safety net for a lost notification).
func (s *Service) untilDue(ctx context.Context) time.Duration {
	next, err := s.schedules.NextDue(ctx)
	switch {
	case err != nil:
		if ctx.Err() == nil {
			s.log.WarnContext(ctx, "schedules: next due time", "err", err)
		}
		return fireRetry
	case next == nil:
		return s.cfg.ScheduleIdle
	}
	d := time.Until(*next)
	if d <= 0 {
		return lockedRetry // due, but another replica holds it
	}
	return min(d, s.cfg.ScheduleIdle)
}

// fireSchedule handles one claimed schedule: decide which fire times fire
// (catch-up, overlap), create their jobs and record the outcome in sc,
// which the claim stores.
func (s *Service) fireSchedule(ctx context.Context, sc *schedules.Schedule) {
	now := s.cfg.Now().UTC()
	spec, err := parseSpec(sc.Cron, sc.TimeZone)
	if err != nil { // a zone the new tzdata no longer knows
		sc.LastError, sc.DueAt = "the schedule no longer parses: "+err.Error(), nil
		return
	}
	st := schedules.State{Overlap: sc.Overlap, Catchup: sc.Catchup, CatchupLimit: sc.CatchupLimit,
		NextFire: sc.NextFireAt, QueuedFire: sc.QueuedFireAt}
	if sc.Overlap != schedules.OverlapAllow {
		st.PrevActive = s.previousRunActive(ctx, sc, now)
	}
	plan := schedules.Decide(spec, st, now, s.cfg.ScheduleGrace)
	jobs, err := s.submitFires(ctx, sc, plan.Fire, false)
	var refusal *httpx.Error
	switch {
	case errors.As(err, &refusal) && refused(refusal):
		sc.LastError, plan.Skipped = refusal.Message, plan.Skipped+len(plan.Fire)-len(jobs)
		recordFires(sc, jobs, now)
	case err != nil:
		s.log.WarnContext(ctx, "schedules: fire failed; retrying", "tenant", sc.TenantID, "schedule_id", sc.ID, "err", err)
		sc.LastError, sc.DueAt = "the fire could not be stored; retrying: "+err.Error(), ptr(now.Add(fireRetry))
		return
	default:
		sc.LastError = ""
		recordFires(sc, jobs, now)
	}
	sc.NextFireAt, sc.QueuedFireAt, sc.Skipped = plan.Next, plan.Queue, sc.Skipped+int64(plan.Skipped)
	sc.DueAt = dueAt(sc, now)
	observeFires(ctx, plan, now, s.cfg.ScheduleGrace)
}

// refused reports whether a submission error is a refusal of the job
// (invalid, over a limit) rather than a failure worth retrying.
func refused(e *httpx.Error) bool {
	return e.Status < 500 && e.Status != http.StatusConflict
}

// recordFires notes the jobs a fire created.
func recordFires(sc *schedules.Schedule, jobs []Job, now time.Time) {
	if len(jobs) == 0 {
		return
	}
	sc.LastFireAt, sc.LastJobID = ptr(now), jobs[len(jobs)-1].ID
	sc.Fired += int64(len(jobs))
}

// dueAt is when a firing loop must look at sc next: its next fire time, or
// sooner when a fire waits for the previous run; never while paused.
func dueAt(sc *schedules.Schedule, now time.Time) *time.Time {
	if sc.Paused {
		return nil
	}
	due := sc.NextFireAt
	if sc.QueuedFireAt != nil && (due == nil || due.After(now.Add(queuedRecheck))) {
		due = ptr(now.Add(queuedRecheck))
	}
	return due
}

func ptr[T any](v T) *T { return &v }

// previousRunActive reports whether the schedule's last job is queued,
// scheduled or running. A job the projection does not have yet is active;
// one it no longer has (deleted by retention) finished long ago.
func (s *Service) previousRunActive(ctx context.Context, sc *schedules.Schedule, now time.Time) bool {
	if sc.LastJobID == "" {
		return false
	}
	j, ok, err := s.lookup(ctx, sc.TenantID, sc.LastJobID)
	switch {
	case err != nil:
		s.log.WarnContext(ctx, "schedules: previous run status unknown; treating it as active", "schedule_id", sc.ID, "err", err)
		return true
	case ok:
		return !j.Status.Terminal()
	}
	return sc.LastFireAt != nil && now.Sub(*sc.LastFireAt) < s.cfg.JobRetention
}

// submitFires creates the jobs of sc's fires at times through the
// submission path, as the schedule's tenant. It returns the jobs (new or,
// for a fire made before, the existing one), or the error that refused or
// failed the request: a retryable one when any fire failed retryably (the
// fires that did succeed answer with their job when tried again).
func (s *Service) submitFires(ctx context.Context, sc *schedules.Schedule, times []time.Time, trigger bool) ([]Job, error) {
	if len(times) == 0 {
		return nil, nil
	}
	var req jobs.Request
	if err := json.Unmarshal(sc.Template, &req); err != nil {
		return nil, httpx.Errorf(http.StatusUnprocessableEntity, "invalid_schedule", "the schedule's job template does not decode: %v", err)
	}
	ctx = auth.WithPrincipal(ctx, auth.Principal{TenantID: sc.TenantID, KeyID: sc.ID})
	settings, err := s.activeTenantSettings(ctx, sc.TenantID)
	if err != nil {
		return nil, err
	}
	items := make([]item, len(times))
	for i, at := range times {
		items[i].req = req
		items[i].fire, items[i].key = fireOf(sc.ID, at, trigger)
	}
	out, err := s.submit(ctx, settings, items)
	if err != nil {
		return nil, err
	}
	return fireOutcomes(out, items)
}

// fireOutcomes reads the answers of a fire's items: a job, an existing job
// (a repeated fire, even one whose template changed since), or an error.
func fireOutcomes(out []outcome, items []item) ([]Job, error) {
	jobs := make([]Job, 0, len(out))
	var firstErr *httpx.Error
	for i, o := range out {
		switch {
		case o.err == nil:
			jobs = append(jobs, o.job)
		case o.err.Code == errKeyReused.Code:
			jobs = append(jobs, Job{ID: items[i].fire.jobID})
		case firstErr == nil || !refused(o.err):
			firstErr = o.err
		}
	}
	if firstErr != nil {
		return jobs, firstErr
	}
	return jobs, nil
}

// activeTenantSettings are the settings of the schedule's tenant; a
// disabled or deleted tenant's schedules make no jobs.
func (s *Service) activeTenantSettings(ctx context.Context, tenant string) (auth.Settings, error) {
	t, ok, err := s.tenants.Get(ctx, tenant)
	switch {
	case err != nil:
		return auth.Settings{}, errUnavailable
	case ok && t.DisabledAt != nil:
		return auth.Settings{}, httpx.Errorf(http.StatusForbidden, "tenant_disabled", "the tenant is disabled")
	}
	return t.Settings, nil
}

// Metrics of the firing loop.
const (
	// MetricScheduleFires counts fire times by outcome: fired (a job was
	// created) or skipped (by the catch-up or overlap policy, or refused).
	// Prometheus: ferry_schedule_fires_total.
	MetricScheduleFires = "ferry.schedule.fires"
	// MetricScheduleFireDelay is how late on-time fires created their job
	// after their fire time. Prometheus: ferry_schedule_fire_delay_seconds.
	MetricScheduleFireDelay = "ferry.schedule.fire_delay"
)

var fireMetrics = sync.OnceValue(func() struct {
	fires metric.Int64Counter
	delay metric.Float64Histogram
} {
	m := otel.Meter("ferry/api")
	fires, err := m.Int64Counter(MetricScheduleFires, metric.WithDescription("Schedule fire times handled, by outcome (fired, skipped)."))
	if err != nil {
		otel.Handle(err)
	}
	delay, err := m.Float64Histogram(MetricScheduleFireDelay, metric.WithUnit("s"),
		metric.WithDescription("How late an on-time schedule fire created its job after its fire time."),
		metric.WithExplicitBucketBoundaries(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5))
	if err != nil {
		otel.Handle(err)
	}
	return struct {
		fires metric.Int64Counter
		delay metric.Float64Histogram
	}{fires, delay}
})

var (
	firedAttr   = metric.WithAttributes(attribute.String("outcome", "fired"))
	skippedAttr = metric.WithAttributes(attribute.String("outcome", "skipped"))
)

// observeFires records a plan's fires and skips.
func observeFires(ctx context.Context, p schedules.Plan, now time.Time, grace time.Duration) {
	m := fireMetrics()
	m.fires.Add(ctx, int64(len(p.Fire)), firedAttr)
	m.fires.Add(ctx, int64(p.Skipped), skippedAttr)
	for _, t := range p.Fire {
		if d := now.Sub(t); d <= grace {
			m.delay.Record(ctx, d.Seconds())
		}
	}
}
