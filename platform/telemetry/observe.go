package telemetry

import (
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
)

// Observe registers cb as the callback of the observable instruments on m
// and returns what unregisters it. A registration that fails goes to
// otel.Handle and yields a no-op: a service runs on without those gauges
// rather than failing to start for want of a metric.
func Observe(m metric.Meter, cb metric.Callback, instruments ...metric.Observable) (unregister func()) {
	reg, err := m.RegisterCallback(cb, instruments...)
	if err != nil {
		otel.Handle(err)
		return func() {}
	}
	return func() { _ = reg.Unregister() }
}
