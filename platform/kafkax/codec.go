package kafkax

import (
	"context"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/ferryhq/ferry/events/schema"
)

// DecodesMetric counts the records the process decoded (kind full: the
// CloudEvents attributes and the JSON data; kind header: the attributes
// only), EncodesMetric the records it encoded. With RequestsMetric they
// are the message side of a job's cost (docs/performance.md).
const (
	DecodesMetric = "ferry.events.decodes"
	EncodesMetric = "ferry.events.encodes"
)

var (
	decodeFull   = metric.WithAttributes(attribute.String("kind", "full"))
	decodeHeader = metric.WithAttributes(attribute.String("kind", "header"))
)

// registerCodec makes schema.Counts observable through m. Every process
// that produces or consumes records makes a Kafka client first, which
// registers it (requestRegistry.counts).
func registerCodec(m metric.Meter) {
	dec := observableCounter(m, DecodesMetric, "{record}",
		"Records decoded by this process: kind full (attributes and JSON data) or header (attributes only).")
	enc := observableCounter(m, EncodesMetric, "{record}", "Records encoded by this process.")
	if dec == nil || enc == nil {
		return
	}
	_, err := m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		c := schema.Counts()
		o.ObserveInt64(dec, c.Decodes, decodeFull)
		o.ObserveInt64(dec, c.MetaDecodes, decodeHeader)
		o.ObserveInt64(enc, c.Encodes)
		return nil
	}, dec, enc)
	if err != nil {
		otel.Handle(err)
	}
}
