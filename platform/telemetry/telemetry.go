// Package telemetry sets up logging, tracing and metrics once per process:
// slog JSON logs, an OpenTelemetry tracer provider (exported over OTLP when
// configured) with W3C trace-context propagation, and an OpenTelemetry meter
// provider exposed in Prometheus format on /metrics.
package telemetry

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"os"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"

	"github.com/ferryhq/ferry/platform/kafkax"
)

// Options configures Setup.
type Options struct {
	// Service is the OpenTelemetry service name (e.g. "ferry-api").
	Service  string
	LogLevel slog.Level
	// LogOutput defaults to stderr.
	LogOutput io.Writer
	// OTLPEndpoint, when set, exports traces over OTLP/gRPC.
	OTLPEndpoint string
	// SpanExporter, when set, receives spans too (tests use an in-memory one).
	SpanExporter sdktrace.SpanExporter
}

// Telemetry is the process-wide observability setup.
type Telemetry struct {
	Logger *slog.Logger
	// Metrics serves the Prometheus exposition of every OpenTelemetry metric.
	Metrics  http.Handler
	shutdown []func(context.Context) error
}

// Setup installs the global logger, tracer provider, propagator and meter
// provider. Call Shutdown before exit to flush spans.
func Setup(ctx context.Context, o Options) (*Telemetry, error) {
	out := o.LogOutput
	if out == nil {
		out = os.Stderr
	}
	logger := slog.New(slog.NewJSONHandler(out, &slog.HandlerOptions{Level: o.LogLevel})).With("service", o.Service)
	slog.SetDefault(logger)
	t := &Telemetry{Logger: logger}

	res := resource.NewWithAttributes(semconv.SchemaURL, semconv.ServiceName(o.Service))
	tpOpts := []sdktrace.TracerProviderOption{sdktrace.WithResource(res)}
	if o.OTLPEndpoint != "" {
		exp, err := otlptracegrpc.New(ctx, otlptracegrpc.WithEndpointURL(o.OTLPEndpoint))
		if err != nil {
			return nil, err
		}
		tpOpts = append(tpOpts, sdktrace.WithBatcher(exp))
	}
	if o.SpanExporter != nil {
		tpOpts = append(tpOpts, sdktrace.WithSyncer(o.SpanExporter))
	}
	if o.OTLPEndpoint == "" && o.SpanExporter == nil {
		// Nothing would receive the spans: do not record them. Trace and
		// span ids are still made and propagated (a job's trace_id stays
		// meaningful in logs and in its status). With an exporter, the
		// SDK's default applies: OTEL_TRACES_SAMPLER (for example
		// parentbased_traceidratio with OTEL_TRACES_SAMPLER_ARG=0.01 at high
		// rates), else parent-based always-on.
		tpOpts = append(tpOpts, sdktrace.WithSampler(sdktrace.NeverSample()))
	}
	// Kafka hooks only propagate trace context when nothing is recorded.
	kafkax.SetPropagateOnly(o.OTLPEndpoint == "" && o.SpanExporter == nil)
	tp := sdktrace.NewTracerProvider(tpOpts...)
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	t.shutdown = append(t.shutdown, tp.Shutdown)

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	exporter, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		return nil, err
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter), sdkmetric.WithResource(res))
	otel.SetMeterProvider(mp)
	t.shutdown = append(t.shutdown, mp.Shutdown)
	t.Metrics = promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
	return t, nil
}

// Shutdown flushes and stops the providers.
func (t *Telemetry) Shutdown(ctx context.Context) error {
	var errs []error
	for _, f := range t.shutdown {
		errs = append(errs, f(ctx))
	}
	return errors.Join(errs...)
}
