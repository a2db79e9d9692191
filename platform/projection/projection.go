// Package projection runs exactly-once Kafka → Postgres projections.
//
// A projection consumes its topics in a consumer group, applies each polled
// batch of records in one Postgres transaction and stores the next offsets of
// the batch's partitions in the same transaction (table ferry_offsets). On
// assignment it resumes from the stored offsets, never from Kafka's committed
// ones, so a crash anywhere neither loses nor doubles a row.
//
// A batch that fails is retried while the failure is transient; a record
// that fails deterministically is isolated by bisecting the batch and parked
// in the quarantine (platform/quarantine) together with the offsets past it,
// so one record never stops the projection for everyone.
package projection

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferryhq/ferry/platform/kafkax"
	"github.com/ferryhq/ferry/platform/pgstore"
	"github.com/ferryhq/ferry/platform/quarantine"
)

//go:embed migrations/*.sql
var migrations embed.FS

// Migrations are the projection schema migrations; `ferry migrate` applies them.
var Migrations = pgstore.Register("projection", migrations, "migrations")

// Migrate creates the offsets and quarantine tables. Run it before Run.
func Migrate(ctx context.Context, pool *pgxpool.Pool) error {
	if err := Migrations.Apply(ctx, pool); err != nil {
		return err
	}
	return quarantine.Migrate(ctx, pool)
}

// ApplyFunc writes one batch of records inside tx; Run commits tx together
// with the batch's next offsets, so a batch is applied exactly once even
// across crashes. It must still be idempotent per record: producers retry,
// so the same event (same ce_id) may be in the log twice. It should skip
// records it cannot decode rather than fail.
// Returning an error retries the batch; an error quarantine.IsPoison
// accepts (a Postgres data or constraint error, or one marked with
// quarantine.Poison) leads, after quarantine.MaxTries, to the batch being
// split and the record that causes it parked. ApplyFunc also re-applies a
// single parked record an operator retries, possibly long after the
// records that followed it: it must not depend on order (schema.PositionOf).
type ApplyFunc func(ctx context.Context, tx pgx.Tx, recs []*kgo.Record) error

// Config of a projection.
type Config struct {
	// Group is the consumer group and the key of the stored offsets.
	Group  string
	Topics []string
	Kafka  kafkax.Config
	// MaxBatch bounds records per transaction. Defaults to 2000.
	MaxBatch int
	// FetchMinBytes and FetchMaxWait: the broker answers a fetch once it has
	// FetchMinBytes for it or FetchMaxWait has passed. A projection is not on
	// any job's critical path, so it lets records gather into larger batches
	// (fewer transactions, and far fewer fetches for the broker to answer
	// while jobs run) at the price of up to FetchMaxWait of extra projection
	// lag. Default to 256 KiB and 50ms.
	FetchMinBytes int32
	FetchMaxWait  time.Duration
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// Run consumes until ctx is done. A batch that fails is retried with
// backoff while the failure is transient and its poison records are parked
// (package quarantine); beside the consumer, quarantine.Watch re-applies the
// group's records an operator retries. Run returns only on ctx
// cancellation or a setup error.
func Run(ctx context.Context, pool *pgxpool.Pool, cfg Config, apply ApplyFunc) error {
	cfg = withDefaults(cfg)
	log := cfg.Logger
	minBytes, maxWait := fetchDefaults(cfg.FetchMinBytes, cfg.FetchMaxWait)
	opts := append(kafkax.Group(cfg.Group, cfg.Topics...),
		kgo.BlockRebalanceOnPoll(),
		kgo.FetchMinBytes(minBytes),
		kgo.FetchMaxWait(maxWait),
		kgo.AdjustFetchOffsetsFn(func(ctx context.Context, assigned map[string]map[int32]kgo.Offset) (map[string]map[int32]kgo.Offset, error) {
			return storedOffsets(ctx, pool, cfg.Group, assigned)
		}),
	)
	al := newAligner(alignHold(maxWait), cfg.MaxBatch)
	opts = append(opts, rebalanceLogs(cfg.Group, log, al.forget)...)
	cl, err := kafkax.NewClient(cfg.Kafka, opts...)
	if err != nil {
		return err
	}
	defer cl.Close()
	bgCtx, stopBg := context.WithCancel(ctx)
	var bg sync.WaitGroup
	bg.Go(func() { watch(bgCtx, pool, cl, cfg, apply) })
	defer func() { stopBg(); bg.Wait() }()
	settler := newSettler(pool, cfg.Group, apply, log)
	tr := newTracer(cfg.Group)
	for {
		recs := al.poll(ctx, cl, cfg.Group, log)
		if ctx.Err() != nil {
			cl.AllowRebalance()
			return nil
		}
		for len(recs) > 0 { // held records and a poll's can exceed MaxBatch
			batch := recs[:min(len(recs), cfg.MaxBatch)]
			recs = recs[len(batch):]
			spans := tr.start(batch)
			err := settler.Settle(ctx, batch)
			tr.end(spans, err)
			if err != nil {
				cl.AllowRebalance()
				return nil // ctx cancelled mid-retry; the uncommitted rest is re-read on restart
			}
		}
		cl.AllowRebalance()
	}
}

// logFetchErrors logs the fetch errors of a poll but its context's end
// (cancellation, or the deadline of a poll that waited for held records).
func logFetchErrors(fetches kgo.Fetches, group string, log *slog.Logger) {
	fetches.EachError(func(topic string, p int32, err error) {
		if !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
			log.Warn("projection fetch error", "group", group, "topic", topic, "partition", p, "err", err)
		}
	})
}

// withDefaults fills cfg's unset MaxBatch and Logger.
func withDefaults(cfg Config) Config {
	if cfg.MaxBatch <= 0 {
		cfg.MaxBatch = 2000
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return cfg
}

// fetchDefaults fills unset fetch settings (Config.FetchMinBytes).
func fetchDefaults(minBytes int32, maxWait time.Duration) (int32, time.Duration) {
	if minBytes <= 0 {
		minBytes = 256 << 10
	}
	if maxWait <= 0 {
		maxWait = 50 * time.Millisecond
	}
	return minBytes, maxWait
}

// watch runs, until ctx is done, what goes beside a projection's consumer:
// its lag gauge (measured with cl, from its stored offsets) and
// quarantine.Watch, which re-applies the records an operator retries.
func watch(ctx context.Context, pool *pgxpool.Pool, cl *kgo.Client, cfg Config, apply ApplyFunc) {
	var bg sync.WaitGroup
	bg.Go(func() {
		kafkax.WatchLag(ctx, cl, cfg.Group, cfg.Topics, func(ctx context.Context) (map[string]map[int32]int64, error) {
			return StoredOffsets(ctx, pool, cfg.Group)
		})
	})
	bg.Go(func() {
		quarantine.Watch(ctx, pool, cfg.Group, func(ctx context.Context, tx pgx.Tx, rec *kgo.Record) error {
			return apply(ctx, tx, []*kgo.Record{rec})
		}, cfg.Logger)
	})
	bg.Wait()
}

// rebalanceLogs log the partitions the projection gives up: revoked in a
// rebalance (info) or lost with its group session (warning: they are not
// projected by this replica until it rejoins, and then resume from the
// offsets in Postgres). Assignment is not hooked: with BlockRebalanceOnPoll
// an assignment callback would make new partitions wait for the poll.
// giveUp runs first in both callbacks with the partitions given up (a
// Shared reader waits there until the batches it handed out are applied;
// both forget what their aligner holds of them).
func rebalanceLogs(group string, log *slog.Logger, giveUp func(*kgo.Client, map[string][]int32)) []kgo.Opt {
	count := func(ps map[string][]int32) int {
		n := 0
		for _, p := range ps {
			n += len(p)
		}
		return n
	}
	return []kgo.Opt{
		kgo.OnPartitionsRevoked(func(_ context.Context, cl *kgo.Client, ps map[string][]int32) {
			giveUp(cl, ps)
			if n := count(ps); n > 0 {
				log.Info("projection partitions revoked", "group", group, "partitions", n)
			}
		}),
		kgo.OnPartitionsLost(func(_ context.Context, cl *kgo.Client, ps map[string][]int32) {
			giveUp(cl, ps)
			if n := count(ps); n > 0 {
				log.Warn("projection partitions lost with the group session; they resume from the stored offsets after the rejoin",
					"group", group, "partitions", n)
			}
		}),
	}
}

// batchTx begins a batch's transaction with custom plans only, in the
// same round trip as BEGIN. A projection reads and writes its rows by key,
// but a pooled connection caches a statement's generic plan once it has run
// it five times, planned with the statistics of that moment: a table
// analysed while it held a few dozen rows then looks as cheap to walk in
// any index that starts with the tenant as in its primary key, and the
// cached plan keeps walking it while the table grows, until the next
// analyse, up to a minute later. The status projection's lookup did that
// (jobs_queue instead of the primary key, every row of the tenant per job),
// 0.4-0.9 s per batch at 20,000 rows, and fell behind (docs/performance.md,
// Round 12). A custom plan sees the table's current size and the batch's
// keys each time, for a few hundred µs of planning per batch.
var batchTx = pgx.TxOptions{BeginQuery: "BEGIN; SET LOCAL plan_cache_mode = force_custom_plan"}

// newSettler applies a prefix of a batch, or parks one record, in one
// transaction with the offsets past it: exactly once either way.
func newSettler(pool *pgxpool.Pool, group string, apply ApplyFunc, log *slog.Logger) *quarantine.Settler {
	return &quarantine.Settler{
		Group:  group,
		Logger: log,
		Apply: func(ctx context.Context, recs []*kgo.Record) error {
			return pgx.BeginTxFunc(ctx, pool, batchTx, func(tx pgx.Tx) error {
				if err := apply(ctx, tx, recs); err != nil {
					return err
				}
				return saveOffsets(ctx, tx, group, recs)
			})
		},
		Park: func(ctx context.Context, rec *kgo.Record, cause error, tries int) error {
			return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				if err := quarantine.Park(ctx, tx, group, rec, cause, tries); err != nil {
					return err
				}
				return saveOffsets(ctx, tx, group, []*kgo.Record{rec})
			})
		},
	}
}

// saveOffsets stores, per partition, the offset after the batch's last record.
func saveOffsets(ctx context.Context, tx pgx.Tx, group string, recs []*kgo.Record) error {
	type tp struct {
		topic string
		part  int32
	}
	next := map[tp]int64{}
	for _, r := range recs {
		k := tp{r.Topic, r.Partition}
		if r.Offset+1 > next[k] {
			next[k] = r.Offset + 1
		}
	}
	topics := make([]string, 0, len(next))
	parts := make([]int32, 0, len(next))
	offs := make([]int64, 0, len(next))
	for k, o := range next {
		topics = append(topics, k.topic)
		parts = append(parts, k.part)
		offs = append(offs, o)
	}
	_, err := tx.Exec(ctx, `
		INSERT INTO ferry_offsets (consumer_group, topic, partition, next_offset)
		SELECT $1, t, p, o FROM unnest($2::text[], $3::int[], $4::bigint[]) AS x(t, p, o)
		ON CONFLICT (consumer_group, topic, partition)
		DO UPDATE SET next_offset = GREATEST(ferry_offsets.next_offset, EXCLUDED.next_offset), updated_at = now()`,
		group, topics, parts, offs)
	if err != nil {
		return fmt.Errorf("projection: save offsets: %w", err)
	}
	return nil
}

// storedOffsets replaces the offsets Kafka would resume from with the ones
// stored with the rows; partitions never projected start at the beginning.
func storedOffsets(ctx context.Context, pool *pgxpool.Pool, group string, assigned map[string]map[int32]kgo.Offset) (map[string]map[int32]kgo.Offset, error) {
	stored, err := StoredOffsets(ctx, pool, group)
	if err != nil {
		return nil, err
	}
	out := make(map[string]map[int32]kgo.Offset, len(assigned))
	for t, parts := range assigned {
		out[t] = make(map[int32]kgo.Offset, len(parts))
		for p := range parts {
			if o, ok := stored[t][p]; ok {
				out[t][p] = kgo.NewOffset().At(o).WithEpoch(-1)
			} else {
				out[t][p] = kgo.NewOffset().AtStart()
			}
		}
	}
	return out, nil
}

// StoredOffsets reads the next offsets group stored with its rows, by topic
// and partition: where it resumes, and what its lag is measured from.
func StoredOffsets(ctx context.Context, pool *pgxpool.Pool, group string) (map[string]map[int32]int64, error) {
	rows, err := pool.Query(ctx, `SELECT topic, partition, next_offset FROM ferry_offsets WHERE consumer_group = $1`, group)
	if err != nil {
		return nil, fmt.Errorf("projection: load offsets: %w", err)
	}
	defer rows.Close()
	stored := map[string]map[int32]int64{}
	for rows.Next() {
		var t string
		var p int32
		var o int64
		if err := rows.Scan(&t, &p, &o); err != nil {
			return nil, err
		}
		if stored[t] == nil {
			stored[t] = map[int32]int64{}
		}
		stored[t][p] = o
	}
	return stored, rows.Err()
}
