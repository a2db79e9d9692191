package scheduler

import (
	"context"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/ferryhq/ferry/platform/kafkax"
	"github.com/ferryhq/ferry/platform/telemetry"
)

// Type-aware routing, the scheduler's side (the queue side is in
// qstore/route.go): a dispatch step returns, with each job, a partition
// owned by a live worker that handles the job's type, and the dispatch is
// produced there; a worker that rejects a dispatch (its partition moved)
// gets the job re-queued at the front by consume, without an attempt used.

// MetricJobsUnroutable is the gauge of parked jobs: ready, but of a type no
// live worker of their pool handles (Prometheus: ferry_jobs_unroutable).
const MetricJobsUnroutable = "ferry.jobs.unroutable"

// routeDispatches sends each dispatch record to the partition its step
// chose. Call it after observeDispatch, which sets the records' contexts;
// one without gets ctx, the produce's, as Produce would give it.
func routeDispatches(ctx context.Context, recs []*kgo.Record, owner recordOwners) {
	for _, r := range recs {
		if t := owner[r]; t.DispatchID != "" && t.Partition >= 0 {
			if r.Context == nil {
				r.Context = ctx
			}
			kafkax.ToPartition(r, t.Partition)
		}
	}
}

// registerRouteGauge registers ferry.jobs.unroutable by pool (a bounded
// label: job types come from clients, so they are not a label; GET
// /v1/queues counts them per queue); call the returned function to
// unregister it. One Redis read per pool answers scrapes for gaugeMaxAge.
func (s *Service) registerRouteGauge() func() {
	m := otel.Meter("ferry/scheduler")
	g, err := m.Int64ObservableGauge(MetricJobsUnroutable, metric.WithUnit("{job}"),
		metric.WithDescription("Ready jobs waiting because no live worker of their pool handles their type, by pool."))
	if err != nil {
		otel.Handle(err)
		return func() {}
	}
	var (
		mu   sync.Mutex
		at   time.Time
		last map[string]int64
	)
	return telemetry.Observe(m, func(ctx context.Context, o metric.Observer) error {
		mu.Lock()
		defer mu.Unlock()
		if now := s.cfg.Now(); at.IsZero() || now.Sub(at) >= gaugeMaxAge {
			rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			n, err := s.store.Unroutable(rctx, s.cfg.Pools)
			cancel()
			if err != nil {
				s.log.Debug("unroutable gauge", "err", err)
			} else {
				at, last = now, n
			}
		}
		for pool, n := range last {
			o.ObserveInt64(g, n, metric.WithAttributes(attribute.String("pool", pool)))
		}
		return nil
	}, g)
}
