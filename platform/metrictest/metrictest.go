// Package metrictest reads the metrics a test made through an OpenTelemetry
// manual reader. It depends on nothing of Ferry, so any package's tests
// can use it (testenv imports the services' glue).
package metrictest

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// Int64Point is one data point of an int64 counter or gauge a test reads.
type Int64Point struct {
	Name  string
	Attrs attribute.Set
	Value int64
}

// Attr is the string value of the point's attribute key ("" when absent).
func (p Int64Point) Attr(key string) string {
	v, _ := p.Attrs.Value(attribute.Key(key))
	return v.AsString()
}

// Int64Points collects reader and returns every int64 sum and gauge data
// point, so tests of a service's metrics need no walk of the SDK's types.
func Int64Points(t testing.TB, reader *sdkmetric.ManualReader) []Int64Point {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	var out []Int64Point
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			var dps []metricdata.DataPoint[int64]
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				dps = d.DataPoints
			case metricdata.Gauge[int64]:
				dps = d.DataPoints
			}
			for _, dp := range dps {
				out = append(out, Int64Point{Name: m.Name, Attrs: dp.Attributes, Value: dp.Value})
			}
		}
	}
	return out
}
