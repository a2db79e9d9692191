// Package projection runs exactly-once Kafka → Postgres projections.
//
// A projection consumes its topics in a consumer group, applies each polled
// batch of records in one Postgres transaction and stores the next offsets of
// the batch's partitions in the same transaction (table ferry_offsets). On
// assignment it resumes from the stored offsets, never from Kafka's committed
// ones, so a crash anywhere neither loses nor doubles a row.
package projection

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferryhq/ferry/platform/kafkax"
	"github.com/ferryhq/ferry/platform/pgstore"
)

//go:embed migrations/*.sql
var migrations embed.FS

// Migrate creates the offsets table. Run it before Run.
func Migrate(ctx context.Context, pool *pgxpool.Pool) error {
	return pgstore.MigrateEmbedded(ctx, pool, "projection", migrations, "migrations")
}

// ApplyFunc writes one batch of records inside tx. It must be idempotent per
// record (a batch may be re-applied after a crash before commit is
// impossible, but a record may legitimately be delivered twice by
// producers), and should skip records it cannot decode rather than fail:
// returning an error retries the whole batch.
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

// Run consumes until ctx is done. Errors applying a batch are logged and
// the batch retried with backoff; Run returns only on ctx cancellation or a
// setup error.
func Run(ctx context.Context, pool *pgxpool.Pool, cfg Config, apply ApplyFunc) error {
	if cfg.MaxBatch <= 0 {
		cfg.MaxBatch = 2000
	}
	if cfg.FetchMinBytes <= 0 {
		cfg.FetchMinBytes = 256 << 10
	}
	if cfg.FetchMaxWait <= 0 {
		cfg.FetchMaxWait = 50 * time.Millisecond
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	opts := append(kafkax.Group(cfg.Group, cfg.Topics...),
		kgo.BlockRebalanceOnPoll(),
		kgo.FetchMinBytes(cfg.FetchMinBytes),
		kgo.FetchMaxWait(cfg.FetchMaxWait),
		kgo.AdjustFetchOffsetsFn(func(ctx context.Context, assigned map[string]map[int32]kgo.Offset) (map[string]map[int32]kgo.Offset, error) {
			return storedOffsets(ctx, pool, cfg.Group, assigned)
		}),
	)
	cl, err := kafkax.NewClient(cfg.Kafka, opts...)
	if err != nil {
		return err
	}
	defer cl.Close()
	lagCtx, stopLag := context.WithCancel(ctx)
	lagDone := make(chan struct{})
	go func() {
		defer close(lagDone)
		kafkax.WatchLag(lagCtx, cl, cfg.Group, cfg.Topics, func(ctx context.Context) (map[string]map[int32]int64, error) {
			return loadOffsets(ctx, pool, cfg.Group)
		})
	}()
	defer func() { stopLag(); <-lagDone }()
	tr := newTracer(cfg.Group)
	for {
		fetches := cl.PollRecords(ctx, cfg.MaxBatch)
		if ctx.Err() != nil {
			cl.AllowRebalance()
			return nil
		}
		fetches.EachError(func(topic string, p int32, err error) {
			if !errors.Is(err, context.Canceled) {
				log.Warn("projection fetch error", "group", cfg.Group, "topic", topic, "partition", p, "err", err)
			}
		})
		recs := fetches.Records()
		if len(recs) > 0 {
			spans := tr.start(recs)
			err := applyWithRetry(ctx, pool, cfg.Group, recs, apply, log)
			tr.end(spans, err)
			if err != nil {
				cl.AllowRebalance()
				return nil // ctx cancelled mid-retry; the uncommitted batch is re-read on restart
			}
		}
		cl.AllowRebalance()
	}
}

func applyWithRetry(ctx context.Context, pool *pgxpool.Pool, group string, recs []*kgo.Record, apply ApplyFunc, log *slog.Logger) error {
	backoff := 50 * time.Millisecond
	for {
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if err := apply(ctx, tx, recs); err != nil {
				return err
			}
			return saveOffsets(ctx, tx, group, recs)
		})
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		log.Error("projection batch failed; retrying", "group", group, "records", len(recs), "err", err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 5*time.Second)
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
	stored, err := loadOffsets(ctx, pool, group)
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

// loadOffsets reads the group's stored next offsets by topic and partition.
func loadOffsets(ctx context.Context, pool *pgxpool.Pool, group string) (map[string]map[int32]int64, error) {
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
