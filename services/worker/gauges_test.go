package worker

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/ferryhq/ferry/events/schema"
	"github.com/ferryhq/ferry/platform/metrictest"
)

// TestGaugesReportSlotsAndHold: a worker's gauges observe its running jobs
// and its held dispatches under its pool, and stop once unregistered.
func TestGaugesReportSlotsAndHold(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	prev := otel.GetMeterProvider()
	otel.SetMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)))
	t.Cleanup(func() { otel.SetMeterProvider(prev) })

	s := &Service{cfg: Config{Pool: "short"}, running: map[string]*run{"job_1": {}}, hold: newHold(10)}
	due := time.Now().Add(time.Hour)
	for _, id := range []string{"job_2", "job_3"} {
		d := schema.Dispatch{JobRef: schema.JobRef{JobID: id}, NotBefore: &due}
		if !s.hold.add(queued{rec: &kgo.Record{Key: []byte(id)}}, d) {
			t.Fatalf("hold refused %s", id)
		}
	}
	unregister := s.registerGauges()
	got := collectGauges(t, reader)
	if got[MetricRunning] != 1 || got[MetricHeld] != 2 {
		t.Fatalf("gauges %v, want %s 1 and %s 2 for pool short", got, MetricRunning, MetricHeld)
	}
	unregister()
	if got := collectGauges(t, reader); len(got) != 0 {
		t.Fatalf("gauges %v after unregister, want none", got)
	}
}

// collectGauges reads the int64 gauges of pool "short" from reader, by name.
func collectGauges(t *testing.T, reader *sdkmetric.ManualReader) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	for _, p := range metrictest.Int64Points(t, reader) {
		if p.Attr("pool") == "short" {
			out[p.Name] = p.Value
		}
	}
	return out
}
