package quarantine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// Metric names (Prometheus: ferry_quarantined_records,
// ferry_quarantine_parked_total).
const (
	MetricRecords = "ferry.quarantined.records"
	MetricParked  = "ferry.quarantine.parked"
)

// WatchInterval is how often Watch re-applies records marked for retry and
// refreshes the gauge.
var WatchInterval = 2 * time.Second

// ReapplyFunc re-applies one quarantined record inside tx, the transaction
// that marks it resolved: a projection writes its rows through tx, so the
// record is applied exactly once; the scheduler applies it to Redis and
// Kafka (idempotent) while tx holds the row, so replicas never both do.
type ReapplyFunc func(ctx context.Context, tx pgx.Tx, rec *kgo.Record) error

// Watch runs group's side of the quarantine until ctx is done: every
// WatchInterval it re-applies the group's records marked for retry, one
// transaction each (resolved on success; parked again with the new error
// and one more try on failure), and reports the group's counts per status
// as the gauge. A record re-applied late is applied out of order with its
// partition: Ferry's consumers are order-independent (schema.PositionOf).
func Watch(ctx context.Context, pool *pgxpool.Pool, group string, reapply ReapplyFunc, log *slog.Logger) {
	if log == nil {
		log = slog.Default()
	}
	m := instruments()
	m.counter.Add(ctx, 0, m.attrs(group)) // the series exists before anything is parked
	defer m.forget(group)
	st := NewStore(pool)
	t := time.NewTicker(WatchInterval)
	defer t.Stop()
	for {
		if err := retryDue(ctx, pool, group, reapply, log); err != nil && ctx.Err() == nil {
			log.Warn("quarantine: retrying records", "group", group, "err", err)
		}
		if counts, err := st.Counts(ctx, group); err == nil {
			m.set(group, counts)
		} else if ctx.Err() == nil {
			log.Debug("quarantine: counts", "group", group, "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// errNoneDue ends a retry pass.
var errNoneDue = errors.New("no record to retry")

// retryDue re-applies, one by one, every record of group marked for retry.
func retryDue(ctx context.Context, pool *pgxpool.Pool, group string, reapply ReapplyFunc, log *slog.Logger) error {
	for ctx.Err() == nil {
		err := retryOne(ctx, pool, group, reapply, log)
		if errors.Is(err, errNoneDue) {
			return nil
		}
		if err != nil {
			return err
		}
	}
	return ctx.Err()
}

// retryOne claims one record marked for retry (SKIP LOCKED: replicas of the
// group share the work) and re-applies it; a failure parks it again.
func retryOne(ctx context.Context, pool *pgxpool.Pool, group string, reapply ReapplyFunc, log *slog.Logger) error {
	var claimed Record
	var cause error
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		r, err := scanRecord(tx.QueryRow(ctx, `SELECT `+columns+` FROM ferry_quarantine
			WHERE consumer_group = $1 AND status = 'retry' ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED`, group))
		if errors.Is(err, ErrNotFound) {
			return errNoneDue
		}
		if err != nil {
			return err
		}
		claimed = r
		rec, err := r.KafkaRecord()
		if err == nil {
			err = reapply(ctx, tx, rec)
		}
		if err != nil {
			cause = err
			return err
		}
		_, err = tx.Exec(ctx, `UPDATE ferry_quarantine SET status = 'resolved', resolved_at = now(), last_seen = now(),
			tries = tries + 1 WHERE id = $1`, r.ID)
		return err
	})
	switch {
	case err == nil:
		log.Info("quarantined record re-applied and resolved", "group", group, "id", claimed.ID,
			"topic", claimed.Topic, "partition", claimed.Partition, "offset", claimed.Offset)
		return nil
	case cause == nil || ctx.Err() != nil:
		return err // nothing due, the claim failed, or stopping: the row stays marked
	}
	log.Warn("quarantined record failed again; parked", "group", group, "id", claimed.ID, "err", cause)
	_, perr := pool.Exec(ctx, `UPDATE ferry_quarantine SET status = 'parked', error = $2, last_seen = now(), tries = tries + 1
		WHERE id = $1 AND status = 'retry'`, claimed.ID, errorText(cause))
	if perr != nil {
		return fmt.Errorf("quarantine: park record %d again: %w", claimed.ID, perr)
	}
	return nil
}

// meters are the process-wide quarantine instruments.
type meters struct {
	counter metric.Int64Counter
	mu      sync.Mutex
	counts  map[string]map[Status]int64 // by group
	byGroup map[string]metric.MeasurementOption
}

var instruments = sync.OnceValue(func() *meters {
	m := &meters{counts: map[string]map[Status]int64{}, byGroup: map[string]metric.MeasurementOption{}}
	meter := otel.Meter("ferry/quarantine")
	c, err := meter.Int64Counter(MetricParked, metric.WithUnit("{record}"),
		metric.WithDescription("Records a consumer group could not apply and parked in the quarantine, by group."))
	if err != nil {
		otel.Handle(err)
	}
	m.counter = c
	_, err = meter.Int64ObservableGauge(MetricRecords, metric.WithUnit("{record}"),
		metric.WithDescription("Quarantined records by consumer group and status (parked, retry, resolved, discarded), read from Postgres every 2s."),
		metric.WithInt64Callback(m.observe))
	if err != nil {
		otel.Handle(err)
	}
	return m
})

func (m *meters) attrs(group string) metric.MeasurementOption {
	m.mu.Lock()
	defer m.mu.Unlock()
	a, ok := m.byGroup[group]
	if !ok {
		a = metric.WithAttributes(attribute.String("group", group))
		m.byGroup[group] = a
	}
	return a
}

func (m *meters) observe(_ context.Context, o metric.Int64Observer) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for g, per := range m.counts {
		for st, n := range per {
			o.Observe(n, metric.WithAttributes(attribute.String("group", g), attribute.String("status", string(st))))
		}
	}
	return nil
}

func (m *meters) set(group string, counts map[Status]int64) {
	m.mu.Lock()
	m.counts[group] = counts
	m.mu.Unlock()
}

func (m *meters) forget(group string) {
	m.mu.Lock()
	delete(m.counts, group)
	m.mu.Unlock()
}

// parked counts one parked record of group.
func parked(ctx context.Context, group string) {
	m := instruments()
	m.counter.Add(context.WithoutCancel(ctx), 1, m.attrs(group))
}
