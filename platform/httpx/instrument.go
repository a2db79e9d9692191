package httpx

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/go-chi/chi/v5"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
	"go.opentelemetry.io/otel/trace"
)

// instrument is every service's HTTP tracing and metrics: a server span
// per request, continuing the caller's traceparent, and the semantic
// conventions' three server histograms (http.server.request.duration,
// http.server.request.body.size, http.server.response.body.size).
//
// It replaced otelhttp, whose per-request attribute building was ~20 of the
// ~200 µs a single POST /v1/jobs cost the api at 1,000 jobs/s
// (docs/performance.md, Round 14). Here a span's attributes are built only
// when the span is recorded (sampled: an exporter is configured), and the
// metric attributes are one cached set per (method, route, status, scheme,
// protocol): bounded, since the route is chi's pattern, never the path.
// The Host header is not an attribute (otelhttp made it server.address),
// so a client cannot grow the metrics' cardinality.
func instrument() func(http.Handler) http.Handler {
	in := newInstruments()
	tracer := otel.Tracer("github.com/ferryhq/ferry/platform/httpx")
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			start := time.Now()
			ctx := otel.GetTextMapPropagator().Extract(r.Context(), propagation.HeaderCarrier(r.Header))
			ctx, span := tracer.Start(ctx, r.Method, trace.WithSpanKind(trace.SpanKindServer))
			defer span.End()
			if span.IsRecording() {
				span.SetAttributes(requestAttrs(r)...)
			}
			// The counting body goes on the handler's copy of the request
			// only: net/http looks at the type of its own request's body
			// when it answers (to drain or close after an unread body).
			inner := r.WithContext(ctx)
			var body *countingBody
			if r.Body != nil && r.Body != http.NoBody {
				body = &countingBody{ReadCloser: r.Body}
				inner.Body = body
			}
			rw := &statusWriter{ResponseWriter: w}
			next.ServeHTTP(rw, inner)

			status := rw.statusOrOK()
			route := routePattern(r)
			if span.IsRecording() {
				if route != "" {
					span.SetName(r.Method + " " + route)
				}
				span.SetAttributes(semconv.HTTPRoute(route), semconv.HTTPResponseStatusCode(status),
					semconv.HTTPResponseBodySize(int(rw.written)))
				if status >= 500 {
					span.SetStatus(codes.Error, "")
				}
			}
			in.record(ctx, r, route, status, time.Since(start), body.bytesRead(), rw.written)
		})
	}
}

// routePattern is the chi route that served r ("" when none matched).
func routePattern(r *http.Request) string {
	if rc := chi.RouteContext(r.Context()); rc != nil {
		return rc.RoutePattern()
	}
	return ""
}

// requestAttrs describe a request on a recorded span.
func requestAttrs(r *http.Request) []attribute.KeyValue {
	return []attribute.KeyValue{
		semconv.HTTPRequestMethodKey.String(r.Method),
		semconv.URLPath(r.URL.Path),
		semconv.URLScheme(scheme(r)),
		semconv.NetworkProtocolVersion(protocolVersion(r)),
		semconv.UserAgentOriginal(r.UserAgent()),
		semconv.ClientAddress(r.RemoteAddr),
	}
}

// instruments are the three server histograms and their attribute sets.
type instruments struct {
	duration                  metric.Float64Histogram
	requestSize, responseSize metric.Int64Histogram
	// sets caches a metric.MeasurementOption per metricKey.
	sets sync.Map
}

type metricKey struct {
	method, route, scheme, proto string
	status                       int
}

func newInstruments() *instruments {
	m := otel.Meter("github.com/ferryhq/ferry/platform/httpx")
	in := &instruments{}
	// The errors are those of an invalid name or unit: these are constant.
	in.duration, _ = m.Float64Histogram("http.server.request.duration", metric.WithUnit("s"),
		metric.WithDescription("Duration of HTTP server requests."),
		metric.WithExplicitBucketBoundaries(0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10))
	in.requestSize, _ = m.Int64Histogram("http.server.request.body.size", metric.WithUnit("By"),
		metric.WithDescription("Size of HTTP server request bodies."))
	in.responseSize, _ = m.Int64Histogram("http.server.response.body.size", metric.WithUnit("By"),
		metric.WithDescription("Size of HTTP server response bodies."))
	return in
}

func (in *instruments) record(ctx context.Context, r *http.Request, route string, status int, took time.Duration, read, written int64) {
	k := metricKey{method: standardMethod(r.Method), route: route, scheme: scheme(r), proto: protocolVersion(r), status: status}
	opt, ok := in.sets.Load(k)
	if !ok {
		opt, _ = in.sets.LoadOrStore(k, metric.WithAttributeSet(attribute.NewSet(
			semconv.HTTPRequestMethodKey.String(k.method), semconv.HTTPRoute(k.route), semconv.URLScheme(k.scheme),
			semconv.NetworkProtocolName("http"), semconv.NetworkProtocolVersion(k.proto),
			semconv.HTTPResponseStatusCode(k.status))))
	}
	o := opt.(metric.MeasurementOption)
	in.duration.Record(ctx, took.Seconds(), o)
	in.requestSize.Record(ctx, read, o)
	in.responseSize.Record(ctx, written, o)
}

// standardMethod keeps the metric attribute to the methods HTTP defines
// ("_OTHER" for the rest, as the semantic conventions say).
func standardMethod(m string) string {
	switch m {
	case http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete,
		http.MethodHead, http.MethodOptions, http.MethodConnect, http.MethodTrace:
		return m
	}
	return "_OTHER"
}

func scheme(r *http.Request) string {
	if r.TLS != nil {
		return "https"
	}
	return "http"
}

func protocolVersion(r *http.Request) string {
	switch {
	case r.ProtoMajor == 1 && r.ProtoMinor == 1:
		return "1.1"
	case r.ProtoMajor == 2:
		return "2"
	}
	return strconv.Itoa(r.ProtoMajor) + "." + strconv.Itoa(r.ProtoMinor)
}

// countingBody counts the bytes a handler read of a request body.
type countingBody struct {
	io.ReadCloser
	read int64
}

// bytesRead is what was read of the body; 0 for a request without one (nil).
func (b *countingBody) bytesRead() int64 {
	if b == nil {
		return 0
	}
	return b.read
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.read += int64(n)
	return n, err
}

// statusWriter records a response's status and size. It keeps the
// writer's optional abilities reachable: Flush for streams, and Unwrap for
// http.ResponseController (write deadlines of SSE and exports).
type statusWriter struct {
	http.ResponseWriter
	status  int
	written int64
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 && code >= 200 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(p)
	w.written += int64(n)
	return n, err
}

func (w *statusWriter) Flush() {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	_ = http.NewResponseController(w.ResponseWriter).Flush()
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// statusOrOK is the status sent: 200 when the handler wrote nothing.
func (w *statusWriter) statusOrOK() int {
	if w.status == 0 {
		return http.StatusOK
	}
	return w.status
}
