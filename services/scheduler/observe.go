package scheduler

import (
	"context"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/ferryhq/ferry/events/schema"
	"github.com/ferryhq/ferry/platform/jobs"
	"github.com/ferryhq/ferry/platform/kafkax"
	"github.com/ferryhq/ferry/platform/telemetry"
	"github.com/ferryhq/ferry/services/scheduler/internal/qstore"
)

// Metric names of the scheduler (OpenTelemetry names; Prometheus shows dots
// as underscores, counters with _total and seconds with _seconds).
const (
	MetricDispatches    = "ferry.scheduler.dispatches"
	MetricCompletions   = "ferry.scheduler.completions"
	MetricRetries       = "ferry.scheduler.retries"
	MetricDeadLetters   = "ferry.scheduler.dead_letters"
	MetricLeaseExpiries = "ferry.scheduler.lease_expiries"
	MetricQueueReady    = "ferry.queue.ready"
	MetricQueueDelayed  = "ferry.queue.delayed"
	MetricQueueRunning  = "ferry.queue.running"
	MetricQueueOldest   = "ferry.queue.oldest_ready.age"
)

// gaugeMaxAge is how long one Redis snapshot answers scrapes.
const gaugeMaxAge = time.Second

// gaugeMaxInflight bounds the in-flight jobs a snapshot inspects per pool.
const gaugeMaxInflight = 20000

// counterQueues are the queue labels of the scheduler's counters: queue
// names come from clients, so they are bounded (telemetry.LabelValues).
var counterQueues = telemetry.NewLabelValues(telemetry.MaxLabelValues)

// queueOf is the queue label of t's job (by pointer: a template, with its
// job's spec, is large to copy once per dispatched job).
func queueOf(t *qstore.Template) string { return counterQueues.Value(jobs.QueueOf(t.Job)) }

type jobKey struct{ pool, queue, tenant string }
type classKey struct {
	queue, tenant string
	class         schema.ErrorClass
}

// instruments are the scheduler's counters, made once per process.
type instruments struct {
	dispatches, completions, retries, deadLetters, leaseExpiries metric.Int64Counter

	byJob    *telemetry.AttrCache[jobKey]
	byClass  *telemetry.AttrCache[classKey]
	byTenant *telemetry.AttrCache[string]
	byPool   *telemetry.AttrCache[string]
}

var metrics = sync.OnceValue(func() *instruments {
	m := otel.Meter("ferry/scheduler")
	counter := func(name, unit, desc string) metric.Int64Counter {
		c, err := m.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		if err != nil {
			otel.Handle(err)
		}
		return c
	}
	return &instruments{
		dispatches:    counter(MetricDispatches, "{job}", "Jobs handed to workers (dispatch commands produced), by pool, queue and tenant."),
		completions:   counter(MetricCompletions, "{job}", "Completed events the scheduler applied, by tenant."),
		retries:       counter(MetricRetries, "{job}", "Failed attempts the scheduler decided to retry, by queue, tenant and error class."),
		deadLetters:   counter(MetricDeadLetters, "{job}", "Jobs dead-lettered (terminal failure or expired), by queue, tenant and error class."),
		leaseExpiries: counter(MetricLeaseExpiries, "{job}", "In-flight jobs re-queued because their lease expired (worker_lost), by pool."),
		byJob: telemetry.NewAttrCache(func(k jobKey) []attribute.KeyValue {
			return []attribute.KeyValue{attribute.String("pool", k.pool), attribute.String("queue", k.queue), attribute.String("tenant", k.tenant)}
		}),
		byClass: telemetry.NewAttrCache(func(k classKey) []attribute.KeyValue {
			return []attribute.KeyValue{attribute.String("queue", k.queue), attribute.String("tenant", k.tenant), attribute.String("class", string(k.class))}
		}),
		byTenant: telemetry.NewAttrCache(func(t string) []attribute.KeyValue {
			return []attribute.KeyValue{attribute.String("tenant", t)}
		}),
		byPool: telemetry.NewAttrCache(func(p string) []attribute.KeyValue {
			return []attribute.KeyValue{attribute.String("pool", p)}
		}),
	}
})

// MetricNames are the OpenTelemetry names of the scheduler's metrics.
func MetricNames() []string {
	return []string{MetricDispatches, MetricCompletions, MetricRetries, MetricDeadLetters, MetricLeaseExpiries,
		MetricQueueReady, MetricQueueDelayed, MetricQueueRunning, MetricQueueOldest}
}

// observeDispatch runs before a dispatch step's records are produced: each
// dispatch record gets a context carrying its job's trace (the traceparent
// stored with the enqueued attempt), so kotel's publish span and the
// traceparent header continue that trace; and the step is counted.
func (s *Service) observeDispatch(ctx context.Context, pool string, res qstore.DispatchResult, recs []*kgo.Record, owner recordOwners) {
	m := metrics()
	if res.LeaseExpiries > 0 {
		m.leaseExpiries.Add(ctx, int64(res.LeaseExpiries), m.byPool.Get(pool))
		s.log.Warn("leases expired; jobs re-queued as worker_lost", "pool", pool, "jobs", res.LeaseExpiries)
	}
	for _, r := range recs {
		t := owner[r]
		if t.DispatchID == "" {
			s.countDeadLetter(ctx, *t, schema.ClassExpired)
			continue
		}
		m.dispatches.Add(ctx, 1, m.byJob.Get(jobKey{pool, queueOf(t), t.TenantID}))
		if t.TraceParent != "" {
			r.Context = telemetry.ContextWithTraceParent(ctx, t.TraceParent)
		}
	}
}

// countCompleted counts a completed event applied.
func countCompleted(ctx context.Context, tenant string) {
	m := metrics()
	m.completions.Add(ctx, 1, m.byTenant.Get(tenant))
}

// countRetry counts and logs a retry decision.
func (s *Service) countRetry(t qstore.Template, class schema.ErrorClass, delay time.Duration) {
	m := metrics()
	m.retries.Add(context.Background(), 1, m.byClass.Get(classKey{queueOf(&t), t.TenantID, class}))
	s.log.Info("retry scheduled", append(telemetry.JobAttrs(schema.JobRef{JobID: t.JobID, TenantID: t.TenantID, Attempt: t.Attempt}, nil),
		"class", class, "delay", delay.String())...)
}

// countDeadLetter counts and logs a dead-letter decision.
func (s *Service) countDeadLetter(ctx context.Context, t qstore.Template, class schema.ErrorClass) {
	m := metrics()
	m.deadLetters.Add(ctx, 1, m.byClass.Get(classKey{queueOf(&t), t.TenantID, class}))
	s.log.Info("job dead-lettered", append(telemetry.JobAttrs(schema.JobRef{JobID: t.JobID, TenantID: t.TenantID, Attempt: t.Attempt}, ctx),
		"class", class)...)
}

// traceDecisions gives each decision record (retry, dead letter, stop of a
// superseded copy) the trace of the consumed record of the same job, so the
// job's trace goes on through the scheduler's decisions. Only the consumed
// records of jobs with a decision have their trace read (RecordContext
// parses it): a batch of hundreds holds a few failures.
func traceDecisions(ctx context.Context, in, out []*kgo.Record) {
	if len(out) == 0 {
		return
	}
	byJob := make(map[string]trace.Span, len(out))
	for _, o := range out {
		byJob[string(o.Key)] = nil
	}
	for _, r := range in {
		if _, decided := byJob[string(r.Key)]; !decided {
			continue
		}
		if sp := trace.SpanFromContext(kafkax.RecordContext(r)); sp.SpanContext().IsValid() {
			byJob[string(r.Key)] = sp
		}
	}
	for _, o := range out {
		if sp := byJob[string(o.Key)]; sp != nil {
			o.Context = trace.ContextWithSpan(ctx, sp)
		}
	}
}

// gauges reports queue depths from Redis: at most one snapshot per
// gaugeMaxAge however many scrapes (or readers) ask.
type gauges struct {
	s *Service

	mu      sync.Mutex
	at      time.Time
	depths  []qstore.QueueDepth
	running []qstore.Running
}

// registerGauges registers the queue gauges of this scheduler; call the
// returned function to unregister them.
func (s *Service) registerGauges() func() {
	m := otel.Meter("ferry/scheduler")
	ready, err1 := m.Int64ObservableGauge(MetricQueueReady, metric.WithUnit("{job}"),
		metric.WithDescription("Jobs ready to run, waiting for a worker slot, by pool and queue."))
	delayed, err2 := m.Int64ObservableGauge(MetricQueueDelayed, metric.WithUnit("{job}"),
		metric.WithDescription("Jobs waiting for their run_at or retry backoff, by pool and queue."))
	running, err3 := m.Int64ObservableGauge(MetricQueueRunning, metric.WithUnit("{job}"),
		metric.WithDescription("Jobs dispatched and holding a lease, by pool, queue and tenant."))
	oldest, err4 := m.Float64ObservableGauge(MetricQueueOldest, metric.WithUnit("s"),
		metric.WithDescription("How long the ready job that has waited longest has been ready, by pool and queue (0 when none is ready)."))
	for _, err := range []error{err1, err2, err3, err4} {
		if err != nil {
			otel.Handle(err)
			return func() {}
		}
	}
	// Counters with a known attribute set start at 0, so rate() and alerts
	// see them before the first event.
	mc := metrics()
	for _, p := range s.cfg.Pools {
		mc.leaseExpiries.Add(context.Background(), 0, mc.byPool.Get(p))
	}
	g := &gauges{s: s}
	return telemetry.Observe(m, func(ctx context.Context, o metric.Observer) error {
		depths, runs, at := g.snapshot(ctx)
		for _, d := range depths {
			a := metric.WithAttributes(attribute.String("pool", d.Pool), attribute.String("queue", d.Queue))
			o.ObserveInt64(ready, d.Ready, a)
			o.ObserveInt64(delayed, d.Delayed, a)
			age := 0.0
			if !d.OldestReady.IsZero() && d.Ready > 0 {
				age = max(at.Sub(d.OldestReady).Seconds(), 0)
			}
			o.ObserveFloat64(oldest, age, a)
		}
		for _, r := range runs {
			o.ObserveInt64(running, r.Jobs, metric.WithAttributes(
				attribute.String("pool", r.Pool), attribute.String("queue", r.Queue), attribute.String("tenant", r.Tenant)))
		}
		return nil
	}, ready, delayed, running, oldest)
}

func (g *gauges) snapshot(ctx context.Context) ([]qstore.QueueDepth, []qstore.Running, time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := g.s.cfg.Now()
	if !g.at.IsZero() && now.Sub(g.at) < gaugeMaxAge {
		return g.depths, g.running, g.at
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	depths, runs, err := g.s.store.Gauges(ctx, g.s.cfg.Pools, gaugeMaxInflight)
	if err != nil {
		g.s.log.Debug("queue gauges", "err", err)
		return g.depths, g.running, g.at
	}
	g.at, g.depths, g.running = now, depths, runs
	return depths, runs, now
}
