package projection

import (
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/plugin/kotel"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/ferryhq/ferry/platform/kafkax"
)

// tracer makes the projection's process spans.
//
// A record's processing is a span "<topic> process" (kotel's
// WithProcessSpan: messaging attributes with the consumer group) that is a
// child of the record's receive span, so it sits in the job's trace. It
// starts before the batch's transaction and ends once the transaction (rows
// and offsets) committed, so its duration is the time until the record's
// effect became visible.
//
// Cost: spans are made only for records whose trace is sampled; records of
// unsampled traces (the bulk under a ratio sampler at 10k records/s) cost
// one span-context lookup each. When no span can be recorded at all (no
// exporter configured: kafkax.PropagateOnly), a batch costs nothing.
// A span per batch with a link per record was the alternative; it keeps
// every batch out of the jobs' traces and still pays a link per record.
type tracer struct {
	kt *kotel.Tracer
}

func newTracer(group string) tracer {
	return tracer{kt: kafkax.Tracer(kotel.ConsumerGroup(group))}
}

func (t tracer) start(recs []*kgo.Record) []trace.Span {
	if kafkax.PropagateOnly() {
		return nil
	}
	var spans []trace.Span
	for _, r := range recs {
		if !trace.SpanContextFromContext(kafkax.RecordContext(r)).IsSampled() {
			continue
		}
		_, span := t.kt.WithProcessSpan(r)
		spans = append(spans, span)
	}
	return spans
}

func (t tracer) end(spans []trace.Span, err error) {
	for _, s := range spans {
		if err != nil {
			s.SetStatus(codes.Error, "batch not applied: "+err.Error())
		}
		s.End()
	}
}
