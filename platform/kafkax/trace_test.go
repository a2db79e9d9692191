package kafkax

import (
	"context"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

func TestPropagateOnlyHooks(t *testing.T) {
	prev, prevTP := otel.GetTextMapPropagator(), otel.GetTracerProvider()
	otel.SetTextMapPropagator(propagation.TraceContext{})
	otel.SetTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.NeverSample())))
	t.Cleanup(func() { otel.SetTextMapPropagator(prev); otel.SetTracerProvider(prevTP); SetPropagateOnly(false) })
	SetPropagateOnly(true)

	h := hooks{t: Tracer()}
	tid, _ := trace.TraceIDFromHex("0af7651916cd43dd8448eb211c80319c")
	sid, _ := trace.SpanIDFromHex("b7ad6b7169203331")
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid})
	out := &kgo.Record{Topic: "t", Context: trace.ContextWithSpanContext(context.Background(), sc)}
	h.OnProduceRecordBuffered(out)
	h.OnProduceRecordUnbuffered(out, nil)
	var tp string
	for _, hd := range out.Headers {
		if hd.Key == "traceparent" {
			tp = string(hd.Value)
		}
	}
	if want := "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00"; tp != want {
		t.Fatalf("traceparent = %q, want %q", tp, want)
	}

	in := &kgo.Record{Topic: "t", Headers: out.Headers}
	h.OnFetchRecordBuffered(in)
	h.OnFetchRecordUnbuffered(in, true)
	if in.Context != nil {
		t.Fatal("the fetch hook parsed the trace of a record no consumer has asked for")
	}
	if got := trace.SpanContextFromContext(RecordContext(in)); got.TraceID() != tid || got.SpanID() != sid {
		t.Fatalf("fetched record's span context = %v/%v, want %v/%v", got.TraceID(), got.SpanID(), tid, sid)
	}

	// Without a span context, kotel starts a root so the trace id exists.
	root := &kgo.Record{Topic: "t", Context: context.Background()}
	h.OnProduceRecordBuffered(root)
	h.OnProduceRecordUnbuffered(root, nil)
	if sc := trace.SpanContextFromContext(root.Context); !sc.IsValid() {
		t.Fatal("a record produced without a span context got no trace id")
	}
}

// TestProcessSpan: a consumer's span over a fetched record is a child of
// the record's span context, in the same trace, whether spans are recorded
// (kotel's span, named and attributed) or never (the propagate-only path,
// without attributes); what the work produces under it carries that trace.
func TestProcessSpan(t *testing.T) {
	prev, prevTP := otel.GetTextMapPropagator(), otel.GetTracerProvider()
	t.Cleanup(func() { otel.SetTextMapPropagator(prev); otel.SetTracerProvider(prevTP); SetPropagateOnly(false) })
	otel.SetTextMapPropagator(propagation.TraceContext{})
	tid, _ := trace.TraceIDFromHex("0af7651916cd43dd8448eb211c80319c")
	sid, _ := trace.SpanIDFromHex("b7ad6b7169203331")
	parent := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled, Remote: true})
	fetched := func() *kgo.Record {
		return &kgo.Record{Topic: "ferry.jobs.dispatch.short", Context: trace.ContextWithRemoteSpanContext(context.Background(), parent)}
	}

	for _, propagate := range []bool{true, false} {
		spans := tracetest.NewSpanRecorder()
		sampler := sdktrace.AlwaysSample()
		if propagate {
			sampler = sdktrace.NeverSample()
		}
		otel.SetTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSampler(sampler), sdktrace.WithSpanProcessor(spans)))
		SetPropagateOnly(propagate)

		ctx, span := ProcessSpan(Tracer(), fetched())
		sc := trace.SpanContextFromContext(ctx)
		if sc.TraceID() != tid || !sc.SpanID().IsValid() || sc.SpanID() == sid || sc.IsRemote() || span.IsRecording() == propagate {
			t.Fatalf("propagate-only %v: span context %v/%v remote %v recording %v", propagate, sc.TraceID(), sc.SpanID(), sc.IsRemote(), span.IsRecording())
		}
		span.End()
		if propagate {
			if n := len(spans.Ended()); n != 0 {
				t.Fatalf("propagate-only: %d spans recorded", n)
			}
			continue
		}
		ended := spans.Ended()
		if len(ended) != 1 || ended[0].Name() != "ferry.jobs.dispatch.short process" || ended[0].Parent().SpanID() != sid || len(ended[0].Attributes()) == 0 {
			t.Fatalf("recorded spans %v", ended)
		}
	}
}

// BenchmarkProcessSpan is one fetched record's process span when nothing
// is recorded, through kotel and through ProcessSpan's fast path.
func BenchmarkProcessSpan(b *testing.B) {
	prev, prevTP := otel.GetTextMapPropagator(), otel.GetTracerProvider()
	b.Cleanup(func() { otel.SetTextMapPropagator(prev); otel.SetTracerProvider(prevTP); SetPropagateOnly(false) })
	otel.SetTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.NeverSample())))
	tid, _ := trace.TraceIDFromHex("0af7651916cd43dd8448eb211c80319c")
	sid, _ := trace.SpanIDFromHex("b7ad6b7169203331")
	ctx := trace.ContextWithRemoteSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, Remote: true}))
	r := &kgo.Record{Topic: "ferry.jobs.dispatch.short", Key: []byte("job_0196a3c0-7f1e-7b3a-9f00-0123456789ab"), Partition: 3, Offset: 123456, Context: ctx}
	kt := Tracer()
	for _, fast := range []bool{false, true} {
		b.Run(map[bool]string{false: "kotel", true: "fast"}[fast], func(b *testing.B) {
			SetPropagateOnly(fast)
			b.ReportAllocs()
			for b.Loop() {
				_, span := ProcessSpan(kt, r)
				span.End()
			}
		})
	}
}
