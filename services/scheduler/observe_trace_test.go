package scheduler

import (
	"context"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/ferryhq/ferry/events/schema"
	"github.com/ferryhq/ferry/platform/kafkax"
)

// TestTraceDecisionsReadsOnlyDecidedJobs: each decision continues the
// trace of its job's last consumed record that carries one (propagate-only:
// read from the header), a decision without such a record keeps its
// context, and the consumed records of jobs without a decision are not
// read at all.
func TestTraceDecisionsReadsOnlyDecidedJobs(t *testing.T) {
	prev := otel.GetTextMapPropagator()
	otel.SetTextMapPropagator(propagation.TraceContext{})
	kafkax.SetPropagateOnly(true)
	t.Cleanup(func() { otel.SetTextMapPropagator(prev); kafkax.SetPropagateOnly(false) })

	consumed := func(job, traceparent string) *kgo.Record {
		r := &kgo.Record{Key: []byte(job)}
		if traceparent != "" {
			r.Headers = []kgo.RecordHeader{{Key: schema.HeaderTraceParent, Value: []byte(traceparent)}}
		}
		return r
	}
	const (
		first  = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
		second = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	)
	in := []*kgo.Record{consumed("j1", first), consumed("j2", first), consumed("j1", second), consumed("j3", "")}
	out := []*kgo.Record{{Key: []byte("j1")}, {Key: []byte("j3")}}
	traceDecisions(context.Background(), in, out)

	if got := trace.SpanContextFromContext(out[0].Context).TraceID().String(); got != "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Fatalf("j1's decision is in trace %s, want its last consumed record's", got)
	}
	if out[1].Context != nil {
		t.Fatal("j3's decision got a trace its consumed record does not carry")
	}
	if in[1].Context != nil {
		t.Fatal("the trace of j2's record was read, though j2 has no decision")
	}
}
