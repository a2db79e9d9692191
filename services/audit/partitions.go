package audit

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"

	"github.com/ferryhq/ferry/platform/telemetry"
	"github.com/ferryhq/ferry/services/audit/internal/store"
)

// Partition upkeep is DDL: creating next months' partitions and dropping
// expired ones. A runtime role without DDL rights (FERRY_POSTGRES_MIGRATE
// =false after `ferry migrate grant`) cannot do it, so `ferry migrate up`
// and `ferry migrate partitions` do it as the schema owner, and the
// service only watches the runway: how many months ahead still have their
// partition. Rows are never refused for want of a partition: a month
// without one goes to the default partition (where its rows then stay, as
// audit rows are never moved, and retention never drops them).

// Metric names of the partition runway (Prometheus:
// ferry_audit_partitions_ahead, ferry_audit_default_partition_in_use).
const (
	MetricPartitionsAhead    = "ferry.audit.partitions_ahead"
	MetricDefaultPartitionIn = "ferry.audit.default_partition.in_use"
)

// MinRunway is the fewest months ahead with a partition the service
// accepts quietly: below it, it logs an error at every maintenance (and
// FerryAuditPartitionRunwayShort fires) while there is still at least a
// month to run `ferry migrate partitions`.
const MinRunway = 2

// OwnerPartitionsAhead is how many months ahead `ferry migrate up` and
// `ferry migrate partitions` create by default: a year, so a monthly
// scheduled run has eleven months of slack before the runway runs short.
const OwnerPartitionsAhead = 12

// Upkeep is what one partition upkeep did and found.
type Upkeep struct {
	Created []string
	// Held are months whose rows already sit in the default partition, so
	// their own partition cannot be created; their rows stay where they are.
	Held    []string
	Dropped []string
	Runway  store.Runway
}

// MaintainPartitions creates the monthly partitions from the retention
// horizon to ahead months after now's, drops those past retention, and
// reads the runway. It goes on past errors so the runway is always read;
// they are joined in err. [IsNoDDL] tells a role without DDL rights.
func MaintainPartitions(ctx context.Context, pool *pgxpool.Pool, retention time.Duration, ahead int, now time.Time) (Upkeep, error) {
	return maintain(ctx, store.New(pool, slog.Default(), func() time.Time { return now }), retention, ahead, now)
}

func maintain(ctx context.Context, st *store.Store, retention time.Duration, ahead int, now time.Time) (Upkeep, error) {
	var u Upkeep
	now = now.UTC()
	var errCreate, errDrop, errRunway error
	u.Created, u.Held, errCreate = st.EnsurePartitions(ctx, now.Add(-retention), store.MonthOf(now).Start.AddDate(0, ahead, 0))
	u.Dropped, errDrop = st.DropBefore(ctx, now.Add(-retention))
	u.Runway, errRunway = st.Runway(ctx, now)
	return u, errors.Join(errCreate, errDrop, errRunway)
}

// IsNoDDL reports whether err is Postgres refusing the role a privilege
// (SQLSTATE 42501), as it does DDL to Ferry's runtime role.
func IsNoDDL(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "42501"
}

// Maintain creates the partitions needed from the retention horizon to
// PartitionsAhead months ahead, drops the expired ones, and checks the
// runway. Run calls it at start and every MaintenanceInterval; errors are
// logged and retried next time.
func (s *Service) Maintain(ctx context.Context) {
	u, err := maintain(ctx, s.store, s.cfg.Retention, s.cfg.PartitionsAhead, s.cfg.Now())
	if ctx.Err() != nil {
		return
	}
	switch {
	case IsNoDDL(err):
		s.log.Warn("audit: this role may not create or drop partitions (no DDL rights, as intended for the runtime role): "+
			"run `ferry migrate partitions` as the schema owner, e.g. monthly", "err", err)
	case err != nil:
		s.log.Error("audit: partition maintenance", "err", err)
	}
	if len(u.Created) > 0 {
		s.log.Info("audit: created partitions", "partitions", u.Created)
	}
	if len(u.Dropped) > 0 {
		s.log.Info("audit: dropped expired partitions", "partitions", u.Dropped)
	}
	if len(u.Held) > 0 {
		s.log.Warn("audit: these months' rows went to the default partition, which keeps them (retention will not drop them)", "months", u.Held)
	}
	s.reportRunway(u.Runway)
}

// reportRunway logs an error when fewer than MinRunway months ahead have
// their partition.
func (s *Service) reportRunway(r store.Runway) {
	if r.Ahead >= MinRunway {
		return
	}
	firstUncovered := store.MonthOf(s.cfg.Now()).End.AddDate(0, r.Ahead, 0)
	s.log.Error("audit: partition runway short: rows from "+firstUncovered.Format("2006-01")+
		" on will go to the default partition; run `ferry migrate partitions` as the schema owner",
		"months_ahead", r.Ahead, "want_at_least", MinRunway)
}

// runwayGauges report the runway, read from Postgres at most every
// runwayMaxAge.
type runwayGauges struct {
	s  *Service
	mu sync.Mutex
	at time.Time
	r  store.Runway
	ok bool
}

const runwayMaxAge = 10 * time.Second

// registerRunwayGauges registers the runway gauges of s; call the returned
// function to unregister them.
func (s *Service) registerRunwayGauges() func() {
	m := otel.Meter("ferry/audit")
	ahead, err1 := m.Int64ObservableGauge(MetricPartitionsAhead, metric.WithUnit("{month}"),
		metric.WithDescription("Consecutive months after the current one whose audit partition exists; the first month without one goes to the default partition."))
	inDefault, err2 := m.Int64ObservableGauge(MetricDefaultPartitionIn,
		metric.WithDescription("1 when rows sit in the audit default partition (a month that had no partition), else 0."))
	if err := errors.Join(err1, err2); err != nil {
		otel.Handle(err)
		return func() {}
	}
	g := &runwayGauges{s: s}
	return telemetry.Observe(m, func(ctx context.Context, o metric.Observer) error {
		r, ok := g.read(ctx)
		if !ok {
			return nil
		}
		o.ObserveInt64(ahead, int64(r.Ahead))
		used := int64(0)
		if r.DefaultInUse {
			used = 1
		}
		o.ObserveInt64(inDefault, used)
		return nil
	}, ahead, inDefault)
}

func (g *runwayGauges) read(ctx context.Context) (store.Runway, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if time.Since(g.at) < runwayMaxAge {
		return g.r, g.ok
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	r, err := g.s.store.Runway(ctx, g.s.cfg.Now())
	g.at, g.r, g.ok = time.Now(), r, err == nil
	if err != nil {
		g.s.log.Warn("audit: reading the partition runway", "err", err)
	}
	return g.r, g.ok
}
