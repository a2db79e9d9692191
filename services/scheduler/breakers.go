package scheduler

import (
	"context"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/ferryhq/ferry/events/schema"
	"github.com/ferryhq/ferry/platform/auth"
	"github.com/ferryhq/ferry/platform/httpx"
	"github.com/ferryhq/ferry/platform/jobs"
	"github.com/ferryhq/ferry/platform/kafkax"
	"github.com/ferryhq/ferry/platform/telemetry"
	"github.com/ferryhq/ferry/services/scheduler/internal/qstore"
)

// Metrics of flow control (Prometheus: ferry_scheduler_gate_parked,
// ferry_scheduler_breakers_open, ferry_scheduler_breaker_transitions_total).
const (
	MetricGateParked         = "ferry.scheduler.gate.parked"
	MetricBreakersOpen       = "ferry.scheduler.breakers.open"
	MetricBreakerTransitions = "ferry.scheduler.breaker.transitions"
)

// breakerPublishEvery is how often the breaker outbox is drained; a
// transition is published within about that long.
const breakerPublishEvery = 250 * time.Millisecond

// breakerClaimVisibility is how long a claimed transition stays hidden
// from other replicas while it is being published.
const breakerClaimVisibility = 30 * time.Second

// flowRoutes mounts the flow-control routes (with the queue routes).
func (s *Service) flowRoutes(r chi.Router) {
	r.Get("/v1/breakers", s.handleListBreakers)
	r.Post("/v1/breakers/{type}/reset", s.handleResetBreaker)
	r.Get("/v1/concurrency/{key}", s.handleConcurrency)
	r.Get("/v1/rate-limits", s.handleRateLimits)
}

// rateLimitView is a dispatch rate limit in effect on the wire: of a job
// type (type) or of a concurrency key (key).
type rateLimitView struct {
	Type      string  `json:"type,omitempty"`
	Key       string  `json:"key,omitempty"`
	PerSecond float64 `json:"per_second"`
	Burst     int     `json:"burst"`
	// Waiting counts the jobs held back by the limit.
	Waiting int64 `json:"waiting"`
}

func (s *Service) handleRateLimits(w http.ResponseWriter, r *http.Request) {
	rs, err := s.store.RateLimits(r.Context(), tenantOf(r))
	if err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	out := make([]rateLimitView, 0, len(rs))
	for _, x := range rs {
		out = append(out, rateLimitView{Type: x.Type, Key: x.Key, PerSecond: x.PerSecond, Burst: x.Burst, Waiting: x.Waiting})
	}
	httpx.WriteList(w, "rate_limits", out, "")
}

// breakerView is a circuit breaker on the wire.
type breakerView struct {
	Type  string `json:"type"`
	State string `json:"state"`
	// OpenUntil is when an open breaker lets a probe through.
	OpenUntil *time.Time `json:"open_until"`
	// Probe is the job a half-open breaker let through (null while none runs).
	Probe *string `json:"probe_job_id"`
	// Failures counted within the window; Waiting, the jobs held back.
	Failures int64  `json:"failures"`
	Waiting  int64  `json:"waiting"`
	Config   brkCfg `json:"config"`
}

type brkCfg struct {
	Failures int             `json:"failures"`
	Window   schema.Duration `json:"window"`
	Cooldown schema.Duration `json:"cooldown"`
}

func viewOfBreaker(b qstore.BreakerState) breakerView {
	v := breakerView{Type: b.Type, State: b.State, Failures: b.Failures, Waiting: b.Waiting,
		Config: brkCfg{Failures: b.Config.Failures, Window: schema.Duration(b.Config.Window), Cooldown: schema.Duration(b.Config.Cooldown)}}
	if b.State == schema.BreakerOpen {
		u := b.Until.UTC()
		v.OpenUntil = &u
	}
	if b.State == schema.BreakerHalfOpen && b.Probe != "" {
		p := b.Probe
		v.Probe = &p
	}
	return v
}

func (s *Service) handleListBreakers(w http.ResponseWriter, r *http.Request) {
	bs, err := s.store.Breakers(r.Context(), tenantOf(r), s.cfg.Now())
	if err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	out := make([]breakerView, 0, len(bs))
	for _, b := range bs {
		out = append(out, viewOfBreaker(b))
	}
	httpx.WriteList(w, "breakers", out, "")
}

// pathParam is the unescaped path parameter name, if valid says it is
// one (a rule of platform/jobs); otherwise it answers 422 validation_failed.
func pathParam(w http.ResponseWriter, r *http.Request, name string, valid func(string) bool, rule string) (string, bool) {
	v, err := url.PathUnescape(chi.URLParam(r, name))
	if err != nil || !valid(v) {
		e := httpx.Errorf(http.StatusUnprocessableEntity, "validation_failed", "invalid %s", name)
		e.Fields = map[string]string{name: rule}
		httpx.WriteError(w, r, e)
		return "", false
	}
	return v, true
}

// handleResetBreaker closes the caller's breaker of a type at once: its
// waiting jobs are dispatched again. The change is published (and so
// audited) with the caller's key as actor.
func (s *Service) handleResetBreaker(w http.ResponseWriter, r *http.Request) {
	typ, ok := pathParam(w, r, "type", jobs.ValidType, "must be a job type (URL-escaped)")
	if !ok {
		return
	}
	p, _ := auth.FromContext(r.Context())
	from, err := s.store.ResetBreaker(r.Context(), s.cfg.Now(), p.TenantID, typ, p.KeyID)
	if err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	s.log.Info("breaker reset", "tenant", p.TenantID, "type", typ, "was", from, "actor", p.KeyID)
	s.wakeAll()
	httpx.WriteJSON(w, http.StatusOK, map[string]string{"type": typ, "state": schema.BreakerClosed, "previous_state": from})
}

// concurrencyView is a concurrency key on the wire.
type concurrencyView struct {
	Key string `json:"key"`
	// Limit is the limit the key's jobs carry (null when none is known).
	Limit   *int  `json:"limit"`
	Running int64 `json:"running"`
	Waiting int64 `json:"waiting"`
}

func (s *Service) handleConcurrency(w http.ResponseWriter, r *http.Request) {
	key, ok := pathParam(w, r, "key", jobs.ValidConcurrencyKey, "must be a concurrency key (URL-escaped)")
	if !ok {
		return
	}
	st, err := s.store.Concurrency(r.Context(), tenantOf(r), key)
	if err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	v := concurrencyView{Key: key, Running: st.Running, Waiting: st.Waiting}
	if st.Limit > 0 {
		v.Limit = &st.Limit
	}
	httpx.WriteJSON(w, http.StatusOK, v)
}

// publishBreakersLoop publishes breaker transitions from the Redis outbox
// to the breakers topic until ctx ends: claimed, produced, acknowledged.
// A replica that dies in between leaves them to be claimed again after
// breakerClaimVisibility (at-least-once: a transition may be published
// twice).
func (s *Service) publishBreakersLoop(ctx context.Context) error {
	t := time.NewTicker(breakerPublishEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if err := s.publishBreakers(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("publishing breaker transitions", "err", err)
		}
	}
}

func (s *Service) publishBreakers(ctx context.Context) error {
	s.gate.RLock() // never during a rebuild
	defer s.gate.RUnlock()
	evs, err := s.store.ClaimBreakerEvents(ctx, s.cfg.Now(), breakerClaimVisibility, 100)
	if err != nil || len(evs) == 0 {
		return err
	}
	recs := make([]*kgo.Record, 0, len(evs))
	for _, e := range evs {
		rec, err := schema.NewRecord(s.deps.Topics.Breakers(), Source, e.BreakerChanged)
		if err != nil {
			return err
		}
		recs = append(recs, rec)
		s.log.Info("breaker changed", "tenant", e.TenantID, "type", e.JobType, "from", e.From, "to", e.To, "reason", e.Reason)
		breakerMetrics().transitions.Add(ctx, 1, metric.WithAttributes(attribute.String("to", e.To)))
	}
	if err := kafkax.ProduceAll(ctx, s.deps.Kafka, recs...); err != nil {
		return err
	}
	return s.store.AckBreakerEvents(context.WithoutCancel(ctx), evs)
}

type breakerInstruments struct{ transitions metric.Int64Counter }

var breakerMetrics = sync.OnceValue(func() breakerInstruments {
	c, err := otel.Meter("ferry/scheduler").Int64Counter(MetricBreakerTransitions, metric.WithUnit("{transition}"),
		metric.WithDescription("Circuit breaker state changes, by the state entered (open, half_open, closed)."))
	if err != nil {
		otel.Handle(err)
	}
	return breakerInstruments{transitions: c}
})

// registerGateGauges registers the gauges of jobs parked per gate and
// breakers not closed (over every tenant: labels stay bounded); call the
// returned function to unregister them.
func (s *Service) registerGateGauges() func() {
	// The transitions counter is exported from the start, at zero per
	// state, so a dashboard or alert on it never sees a missing series.
	for _, to := range []string{"open", "half_open", "closed"} {
		breakerMetrics().transitions.Add(context.Background(), 0, metric.WithAttributes(attribute.String("to", to)))
	}
	m := otel.Meter("ferry/scheduler")
	parked, err1 := m.Int64ObservableGauge(MetricGateParked, metric.WithUnit("{job}"),
		metric.WithDescription("Jobs held back by flow control, by gate (concurrency, rate_limit, breaker)."))
	open, err2 := m.Int64ObservableGauge(MetricBreakersOpen, metric.WithUnit("{breaker}"),
		metric.WithDescription("Circuit breakers open or half-open, over every tenant and job type."))
	if err1 != nil || err2 != nil {
		otel.Handle(err1)
		otel.Handle(err2)
		return func() {}
	}
	return telemetry.Observe(m, func(ctx context.Context, o metric.Observer) error {
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		g, err := s.store.Gates(ctx)
		if err != nil {
			return nil // Redis unreachable: no sample this scrape
		}
		for gate, n := range map[string]int64{"concurrency": g.Concurrency, "rate_limit": g.Rate, "breaker": g.Breaker} {
			o.ObserveInt64(parked, n, metric.WithAttributes(attribute.String("gate", gate)))
		}
		o.ObserveInt64(open, g.OpenBreakers)
		return nil
	}, parked, open)
}
