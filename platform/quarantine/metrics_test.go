package quarantine

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/ferryhq/ferry/platform/metrictest"
)

// TestMetrics: a group's parked counter exists (at 0) before anything is
// parked, so dashboards, alerts and the metric-name golden see it on every
// running stack; parked adds one; the gauge reports each status.
func TestMetrics(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	otel.SetMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)))
	ctx := context.Background()
	m := instruments()
	m.counter.Add(ctx, 0, m.attrs("g1")) // what Watch does at start
	m.set("g1", map[Status]int64{StatusParked: 2, StatusRetry: 0, StatusResolved: 1, StatusDiscarded: 0})

	collect := func() (parked map[string]int64, gauge map[string]int64) {
		parked, gauge = map[string]int64{}, map[string]int64{}
		for _, p := range metrictest.Int64Points(t, reader) {
			switch p.Name {
			case MetricParked:
				parked[p.Attr("group")] = p.Value
			case MetricRecords:
				gauge[p.Attr("group")+"/"+p.Attr("status")] = p.Value
			}
		}
		return parked, gauge
	}
	parkedN, gauge := collect()
	if n, ok := parkedN["g1"]; !ok || n != 0 {
		t.Fatalf("parked counter before parking: %v", parkedN)
	}
	if gauge["g1/parked"] != 2 || gauge["g1/resolved"] != 1 || len(gauge) != 4 {
		t.Fatalf("gauge %v", gauge)
	}
	parked(ctx, "g1")
	m.forget("g1")
	parkedN, gauge = collect()
	if parkedN["g1"] != 1 || len(gauge) != 0 {
		t.Fatalf("after parking and forgetting: counter %v, gauge %v", parkedN, gauge)
	}
}
