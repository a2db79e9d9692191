package kafkax

import (
	"context"
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/plugin/kotel"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"
)

// propagateOnly is set when no span can be recorded (see SetPropagateOnly).
var propagateOnly atomic.Bool

// SetPropagateOnly tells the clients' hooks whether no span is ever
// recorded (the telemetry package sets it when it installs a NeverSample
// tracer provider because nothing would receive spans). Then the hooks only
// propagate the trace context, instead of starting and ending a
// non-recording kotel span per produced and fetched record: RecordContext
// of a fetched record carries the producer's span context, and a record
// produced under a context with a valid span context gets that traceparent,
// so a job keeps one trace id across every hop as before (a fetched
// record's trace is read from its header by RecordContext). A record produced
// without a span context still goes through kotel, which starts a new
// (unrecorded) root so the trace id exists.
func SetPropagateOnly(on bool) { propagateOnly.Store(on) }

// PropagateOnly reports whether no span is ever recorded (SetPropagateOnly),
// so a consumer can skip per-record tracing work altogether.
func PropagateOnly() bool { return propagateOnly.Load() }

// processTracer starts the process spans of ProcessSpan's fast path.
var processTracer = otel.Tracer("github.com/ferryhq/ferry/platform/kafkax")

// RecordContext is the context a fetched record's trace continues from:
// the span context of its traceparent header. When spans are recorded,
// kotel's fetch hook has put it (with the fetch span) in r.Context; when
// none ever is (PropagateOnly), the fetch hook leaves r.Context alone and
// the header is parsed here, only for the records whose trace a consumer
// continues (a worker's dispatch, a scheduler's enqueued, its decisions):
// parsing it for every fetched record of every consumer cost ~2.7 % of
// `ferry dev`'s CPU at full load (docs/performance.md, Round 18). The
// context is kept in r.Context, so a second call parses nothing; like any
// use of a fetched record, it belongs to the one goroutine handling r.
func RecordContext(r *kgo.Record) context.Context {
	if r.Context == nil {
		r.Context = context.Background()
		if propagateOnly.Load() {
			r.Context = otel.GetTextMapPropagator().Extract(r.Context, kotel.NewRecordCarrier(r))
		}
	}
	return r.Context
}

// ProcessSpan is t.WithProcessSpan(r): the span of a consumer's work on r,
// a child of the span context r carries, so what the work produces stays
// in the job's trace. When no span is ever recorded (PropagateOnly) it
// starts the same unrecorded child without building kotel's messaging
// attributes, which nothing would read (BenchmarkProcessSpan: 1.4 µs, 9
// allocations and 1.3 KB → 0.5 µs, 4 allocations and 176 bytes; it is in
// every start of a job by a worker, docs/performance.md, Round 14).
func ProcessSpan(t *kotel.Tracer, r *kgo.Record) (context.Context, trace.Span) {
	if !propagateOnly.Load() {
		return t.WithProcessSpan(r)
	}
	return processTracer.Start(RecordContext(r), "process", trace.WithSpanKind(trace.SpanKindConsumer))
}

// hooks wraps kotel's tracer hooks with the propagate-only fast path.
type hooks struct{ t *kotel.Tracer }

var (
	_ kgo.HookProduceRecordBuffered   = hooks{}
	_ kgo.HookProduceRecordUnbuffered = hooks{}
	_ kgo.HookFetchRecordBuffered     = hooks{}
	_ kgo.HookFetchRecordUnbuffered   = hooks{}
)

func (h hooks) OnProduceRecordBuffered(r *kgo.Record) {
	if propagateOnly.Load() && r.Context != nil {
		if sc := trace.SpanContextFromContext(r.Context); sc.IsValid() {
			otel.GetTextMapPropagator().Inject(r.Context, kotel.NewRecordCarrier(r))
			return
		}
	}
	h.t.OnProduceRecordBuffered(r)
}

func (h hooks) OnProduceRecordUnbuffered(r *kgo.Record, err error) {
	// Ends the span of the buffered hook; on the fast path r.Context's span
	// is the caller's non-recording one, whose End does nothing.
	if propagateOnly.Load() && !trace.SpanFromContext(r.Context).IsRecording() {
		return
	}
	h.t.OnProduceRecordUnbuffered(r, err)
}

// OnFetchRecordBuffered starts kotel's fetch span; when no span is ever
// recorded it does nothing: RecordContext reads the trace when a consumer
// needs it.
func (h hooks) OnFetchRecordBuffered(r *kgo.Record) {
	if propagateOnly.Load() {
		return
	}
	h.t.OnFetchRecordBuffered(r)
}

func (h hooks) OnFetchRecordUnbuffered(r *kgo.Record, polled bool) {
	if propagateOnly.Load() && !trace.SpanFromContext(r.Context).IsRecording() {
		return // no span was started, or it records nothing
	}
	h.t.OnFetchRecordUnbuffered(r, polled)
}
