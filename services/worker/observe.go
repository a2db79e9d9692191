package worker

import (
	"context"
	"errors"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/ferryhq/ferry/events/schema"
	"github.com/ferryhq/ferry/platform/jobs"
	"github.com/ferryhq/ferry/platform/telemetry"
)

// Metric names of the worker (OpenTelemetry names; Prometheus shows them
// with underscores and a _seconds suffix for durations).
const (
	MetricHandlerDuration = "ferry.worker.handler.duration"
	MetricAttempts        = "ferry.worker.attempts"
	MetricStartLatency    = "ferry.worker.start_latency"
	MetricRunning         = "ferry.worker.running"
	MetricHeld            = "ferry.worker.held"
)

// MetricNames are the OpenTelemetry names of the worker's metrics.
func MetricNames() []string {
	return []string{MetricHandlerDuration, MetricAttempts, MetricStartLatency, MetricRunning, MetricHeld}
}

// registerGauges registers the gauges of this worker's slots and hold; call
// the returned function to unregister them. Two workers of one process
// (ferry dev's pools) observe the same gauges under their own pool.
func (s *Service) registerGauges() func() {
	m := otel.Meter("ferry/worker")
	running, err1 := m.Int64ObservableGauge(MetricRunning, metric.WithUnit("{job}"),
		metric.WithDescription("Jobs this worker runs in its slots (at most FERRY_WORKER_CONCURRENCY), by pool."))
	held, err2 := m.Int64ObservableGauge(MetricHeld, metric.WithUnit("{dispatch}"),
		metric.WithDescription("Dispatches leased ahead of their due time that this worker holds until due, outside its slots (at most FERRY_WORKER_HOLD), by pool."))
	if err := errors.Join(err1, err2); err != nil {
		otel.Handle(err)
		return func() {}
	}
	a := metric.WithAttributes(attribute.String("pool", s.cfg.Pool))
	return telemetry.Observe(m, func(_ context.Context, o metric.Observer) error {
		s.mu.Lock()
		n := len(s.running)
		s.mu.Unlock()
		o.ObserveInt64(running, int64(n), a)
		o.ObserveInt64(held, int64(s.hold.len()), a)
		return nil
	}, running, held)
}

// secondsBuckets suit both sub-millisecond noop handlers and hour-long jobs.
var secondsBuckets = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600}

type outcomeKey struct{ pool, queue, typ, outcome string }
type latencyKey struct{ pool, queue, tenant string }

type instruments struct {
	duration, attempts, latency metric.Float64Histogram
	byOutcome                   *telemetry.AttrCache[outcomeKey]
	byTenant                    *telemetry.AttrCache[latencyKey]
	tracer                      trace.Tracer
}

var metrics = sync.OnceValue(func() *instruments {
	m := otel.Meter("ferry/worker")
	hist := func(name, unit, desc string, buckets []float64) metric.Float64Histogram {
		h, err := m.Float64Histogram(name, metric.WithUnit(unit), metric.WithDescription(desc), metric.WithExplicitBucketBoundaries(buckets...))
		if err != nil {
			otel.Handle(err)
		}
		return h
	}
	return &instruments{
		duration: hist(MetricHandlerDuration, "s", "Handler run time, by pool, queue, type and outcome (succeeded or the error class).", secondsBuckets),
		attempts: hist(MetricAttempts, "{attempt}", "The attempt number of each finished run, by pool, queue, type and outcome: how many tries jobs need.",
			[]float64{1, 2, 3, 4, 5, 6, 8, 10, 15, 20, 25}),
		latency: hist(MetricStartLatency, "s", "Time from a job being ready (submitted, or due after its delay or backoff) to its handler starting, by pool, queue and tenant.", secondsBuckets),
		byOutcome: telemetry.NewAttrCache(func(k outcomeKey) []attribute.KeyValue {
			return []attribute.KeyValue{attribute.String("pool", k.pool), attribute.String("queue", k.queue), attribute.String("type", k.typ), attribute.String("outcome", k.outcome)}
		}),
		byTenant: telemetry.NewAttrCache(func(k latencyKey) []attribute.KeyValue {
			return []attribute.KeyValue{attribute.String("pool", k.pool), attribute.String("queue", k.queue), attribute.String("tenant", k.tenant)}
		}),
		tracer: otel.Tracer("ferry/worker"),
	}
})

// Queue names and job types come from clients: their metric labels are
// bounded (telemetry.LabelValues); span attributes keep the real names.
var (
	queueLabels = telemetry.NewLabelValues(telemetry.MaxLabelValues)
	typeLabels  = telemetry.NewLabelValues(telemetry.MaxLabelValues)
)

func queueOf(d schema.Dispatch) string { return jobs.QueueOf(d.Job) }

// startHandlerSpan starts the span "handler <type>" as a child of ctx (the
// dispatch's process span, in the job's trace) and records the
// submission-to-start latency. Events the run produces use the returned ctx.
func (s *Service) startHandlerSpan(ctx context.Context, d schema.Dispatch, startedAt time.Time) (context.Context, trace.Span) {
	m := metrics()
	if !d.ReadyAt.IsZero() {
		m.latency.Record(ctx, max(startedAt.Sub(d.ReadyAt).Seconds(), 0), m.byTenant.Get(latencyKey{s.cfg.Pool, queueLabels.Value(queueOf(d)), d.TenantID}))
	}
	ctx, span := m.tracer.Start(ctx, "handler "+d.Job.Type, trace.WithSpanKind(trace.SpanKindInternal))
	if span.IsRecording() {
		span.SetAttributes(
			attribute.String("ferry.job.id", d.JobID),
			attribute.String("ferry.job.type", d.Job.Type),
			attribute.String("ferry.job.queue", queueOf(d)),
			attribute.String("ferry.tenant.id", d.TenantID),
			attribute.Int("ferry.job.attempt", d.Attempt),
			attribute.String("ferry.worker.pool", s.cfg.Pool))
	}
	return ctx, span
}

// endHandler records the run's duration, its attempt number and outcome,
// and ends the handler span.
func (s *Service) endHandler(span trace.Span, d schema.Dispatch, startedAt, finishedAt time.Time, herr, cause error) {
	outcome := outcomeOf(herr, cause)
	m := metrics()
	a := m.byOutcome.Get(outcomeKey{s.cfg.Pool, queueLabels.Value(queueOf(d)), typeLabels.Value(d.Job.Type), outcome})
	m.duration.Record(context.Background(), finishedAt.Sub(startedAt).Seconds(), a)
	m.attempts.Record(context.Background(), float64(d.Attempt), a)
	if span.IsRecording() {
		span.SetAttributes(attribute.String("ferry.job.outcome", outcome))
		if herr != nil {
			span.SetStatus(codes.Error, outcome)
			span.RecordError(herr)
		}
	}
	span.End()
}

// outcomeOf names a run's outcome: succeeded, handed_back, or the error class.
func outcomeOf(herr, cause error) string {
	switch {
	case herr == nil:
		return "succeeded"
	case errors.Is(cause, errShutdown):
		return "handed_back"
	case errors.Is(cause, errJobCancelled):
		return string(schema.ClassCancelled)
	case errors.Is(cause, errJobTimeout):
		return string(schema.ClassTimeout)
	case errors.As(herr, new(*Detached)):
		return "detached"
	}
	class, _ := ClassOf(herr)
	return string(class)
}
