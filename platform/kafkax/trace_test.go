package kafkax

import (
	"context"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
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
	if got := trace.SpanContextFromContext(in.Context); got.TraceID() != tid || got.SpanID() != sid {
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
