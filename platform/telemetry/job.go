package telemetry

import (
	"context"
	"log/slog"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/ferryhq/ferry/events/schema"
)

// JobAttrs are the attributes every job-related log line carries: job_id,
// tenant_id, attempt and, when ctx holds a span, trace_id. Use them as
// log.With(telemetry.JobAttrs(ref, ctx)...) or append them to a line.
func JobAttrs(ref schema.JobRef, ctx context.Context) []any {
	attrs := make([]any, 0, 4)
	attrs = append(attrs,
		slog.String("job_id", ref.JobID),
		slog.String("tenant_id", ref.TenantID),
		slog.Int("attempt", ref.Attempt))
	if ctx != nil {
		if sc := trace.SpanContextFromContext(ctx); sc.HasTraceID() {
			attrs = append(attrs, slog.String("trace_id", sc.TraceID().String()))
		}
	}
	return attrs
}

// TraceParent formats the span context of ctx as a W3C traceparent header
// value, "" when ctx holds none.
func TraceParent(ctx context.Context) string {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return ""
	}
	var c oneHeader
	propagation.TraceContext{}.Inject(trace.ContextWithSpanContext(context.Background(), sc), &c)
	return c.v
}

// ContextWithTraceParent returns ctx carrying the remote span context of a
// W3C traceparent value, so spans started from it (and records produced
// with it, through kotel) continue that trace. An empty or malformed value
// returns ctx unchanged.
func ContextWithTraceParent(ctx context.Context, traceparent string) context.Context {
	if traceparent == "" {
		return ctx
	}
	c := oneHeader{k: "traceparent", v: traceparent}
	return propagation.TraceContext{}.Extract(ctx, &c)
}

// oneHeader is a TextMapCarrier holding the traceparent only (tracestate is
// not kept), so formatting and parsing allocate no map.
type oneHeader struct{ k, v string }

func (c *oneHeader) Get(key string) string {
	if key == c.k {
		return c.v
	}
	return ""
}

func (c *oneHeader) Set(key, value string) {
	if key == "traceparent" {
		c.k, c.v = key, value
	}
}

func (c *oneHeader) Keys() []string { return []string{c.k} }

// AttrCache hands out metric measurement options for attribute sets built
// once per key, so hot paths record without building attributes each time.
// The keys must be low-cardinality (queue, tenant, type, pool, outcome). The
// zero value is not usable; see NewAttrCache.
type AttrCache[K comparable] struct {
	mu   sync.RWMutex
	m    map[K]metric.MeasurementOption
	make func(K) []attribute.KeyValue
}

// NewAttrCache returns a cache building attributes with mk.
func NewAttrCache[K comparable](mk func(K) []attribute.KeyValue) *AttrCache[K] {
	return &AttrCache[K]{m: map[K]metric.MeasurementOption{}, make: mk}
}

// Get returns the measurement option of k's attributes.
func (c *AttrCache[K]) Get(k K) metric.MeasurementOption {
	c.mu.RLock()
	o, ok := c.m[k]
	c.mu.RUnlock()
	if ok {
		return o
	}
	o = metric.WithAttributeSet(attribute.NewSet(c.make(k)...))
	c.mu.Lock()
	c.m[k] = o
	c.mu.Unlock()
	return o
}
