// Package store is the audit projection in Postgres: appending chained rows
// (the projection's apply function), queries with keyset pagination, the
// verification walk and partition maintenance.
package store

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferryhq/ferry/events/schema"
	"github.com/ferryhq/ferry/platform/background"
	"github.com/ferryhq/ferry/platform/pgstore"
	"github.com/ferryhq/ferry/platform/projection"
	"github.com/ferryhq/ferry/platform/telemetry"
	"github.com/ferryhq/ferry/services/audit/internal/chain"
)

//go:embed migrations/*.sql
var migrations embed.FS

// Migrations are the audit schema migrations; `ferry migrate` applies them.
var Migrations = pgstore.Register("audit", migrations, "migrations")

//go:embed migrations_indexes/*.sql
var indexMigrations embed.FS

// IndexMigrations change only the audit tables' indexes (which index
// serves which query is in the files); a component of its own, so its
// numbering never collides with Migrations'. Declared after Migrations,
// in this file, so it registers after them and `ferry migrate` applies
// it to the tables they create (components apply in registration order).
var IndexMigrations = pgstore.Register("audit-indexes", indexMigrations, "migrations_indexes")

// Migrate applies the audit migrations.
func Migrate(ctx context.Context, pool *pgxpool.Pool) error {
	if err := Migrations.Apply(ctx, pool); err != nil {
		return err
	}
	return IndexMigrations.Apply(ctx, pool)
}

// Store reads and writes the audit tables.
type Store struct {
	pool *pgxpool.Pool
	log  *slog.Logger
	now  func() time.Time
}

// New returns a store over pool.
func New(pool *pgxpool.Pool, log *slog.Logger, now func() time.Time) *Store {
	return &Store{pool: pool, log: log, now: now}
}

// Apply appends one row per new lifecycle event of recs, inside tx, in
// named steps: decode the records (each once), lock the heads of the
// chains they extend, chain the rows (seq, prev_hash, hash) and append
// them with one COPY, leaving out events an earlier batch recorded, then
// move the heads. Records that do not decode are logged and skipped;
// events already recorded (same ce_id) are skipped, so duplicate
// deliveries never make a second row.
func (s *Store) Apply(ctx context.Context, tx pgx.Tx, recs []*kgo.Record) error {
	rows := s.decodeRows(ctx, recs)
	if len(rows) == 0 {
		return nil
	}
	// Lock the heads of the chains this batch extends (creating new ones),
	// in chain order so concurrent batches cannot deadlock.
	heads, err := lockHeads(ctx, tx, rows)
	if err != nil {
		return err
	}
	if err := appendNew(ctx, tx, rows, heads, s.now().UTC()); err != nil {
		return err
	}
	return advanceHeads(ctx, tx, heads)
}

// decodeRows turns the records the audit log keeps into rows to chain,
// each event once even when the batch holds it twice. It decodes with
// projection.Decode (shared with the other projections of a shared reader:
// read, never changed). A row's data is the record's value as received:
// the json column keeps that text byte for byte, so the hash covers
// exactly what verification reads back.
func (s *Store) decodeRows(ctx context.Context, recs []*kgo.Record) []*chain.Row {
	rows := make([]*chain.Row, 0, len(recs))
	backing := make([]chain.Row, 0, len(recs)) // the rows, in one allocation; never grown, so the pointers hold
	seen := make(map[string]bool, len(recs))
	chains := chainIDs{}
	for _, r := range recs {
		ev, err := projection.Decode(ctx, r)
		if err != nil {
			s.log.Warn("audit: skipping undecodable record", "topic", r.Topic, "partition", r.Partition, "offset", r.Offset, "err", err)
			continue
		}
		ref, typ, ok := subjectOf(ev.Data)
		if !ok || seen[ev.ID] {
			continue
		}
		seen[ev.ID] = true
		backing = append(backing, chain.Row{
			ChainID:  chains.of(ref.TenantID, r.Topic, r.Partition),
			EventID:  ev.ID,
			TenantID: ref.TenantID,
			JobID:    ref.JobID,
			Type:     typ,
			Attempt:  ref.Attempt,
			Occurred: ev.Time.UTC().Truncate(time.Microsecond),
			Actor:    actorOf(ev),
			TraceID:  telemetry.TraceIDOf(ev.TraceParent),
			Data:     r.Value,
		})
		rows = append(rows, &backing[len(backing)-1])
	}
	return rows
}

// chainIDs are a batch's chain names (chain.ID), each made once: a batch
// holds a few chains (a tenant's partitions of each lifecycle topic) and
// hundreds of rows.
type chainIDs map[chainKey]string

type chainKey struct {
	tenant, topic string
	partition     int32
}

func (c chainIDs) of(tenant, topic string, partition int32) string {
	k := chainKey{tenant, topic, partition}
	id, ok := c[k]
	if !ok {
		id = chain.ID(tenant, topic, partition)
		c[k] = id
	}
	return id
}

// appendNew chains and appends the rows whose event no earlier batch
// recorded. Such a copy is rare (a producer's retry of an event already
// stored), and the unique index on (tenant_id, occurred_at, event_id)
// refuses it anyway (a copy carries the same three), so the batch is first
// appended whole under a savepoint; only when the index refuses a row are
// the batch's events looked up, and the rest chained again from the locked
// heads and appended. That spares every batch a lookup of each event.
func appendNew(ctx context.Context, tx pgx.Tx, rows []*chain.Row, heads map[string]chain.Position, recorded time.Time) error {
	locked := maps.Clone(heads)
	sp, err := tx.Begin(ctx)
	if err != nil {
		return fmt.Errorf("audit: savepoint: %w", err)
	}
	err = copyRows(ctx, sp, rows, chainRows(rows, heads), recorded)
	if err == nil {
		return sp.Commit(ctx)
	}
	if rbErr := sp.Rollback(ctx); rbErr != nil || !isUniqueViolation(err) {
		return errors.Join(err, rbErr)
	}
	maps.Copy(heads, locked)
	if rows, err = dropRecorded(ctx, tx, rows); err != nil || len(rows) == 0 {
		return err
	}
	return copyRows(ctx, tx, rows, chainRows(rows, heads), recorded)
}

// isUniqueViolation reports whether err is Postgres refusing a second row
// under a unique index (SQLSTATE 23505, unique_violation).
func isUniqueViolation(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "23505"
}

// chainRows gives each row the next seq of its chain and the previous
// row's hash, and returns each row's hash; heads end at each chain's last
// row.
func chainRows(rows []*chain.Row, heads map[string]chain.Position) [][]byte {
	hashes := make([][]byte, len(rows))
	for i, p := range rows {
		background.Step()
		h := heads[p.ChainID]
		p.Seq, p.PrevHash = h.Seq+1, h.Hash
		hashes[i] = chain.Hash(*p)
		heads[p.ChainID] = chain.Position{Seq: p.Seq, Hash: hashes[i]}
	}
	return hashes
}

// auditColumns are the columns copyRows fills, in its order.
var auditColumns = []string{"event_id", "tenant_id", "job_id", "type", "attempt", "occurred_at", "recorded_at",
	"actor", "trace_id", "data", "chain_id", "seq", "prev_hash", "hash"}

// copyRows appends the chained rows with COPY: rows are only ever
// appended, and COPY inserts a batch with one statement and no per-row
// parsing of parameters, each value encoded by its column's type
// (pgstore.CopyWriter). data goes to a json column, which checks that it
// is JSON and stores the text as given (jsonb would parse it into a tree
// and render it anew).
func copyRows(ctx context.Context, tx pgx.Tx, rows []*chain.Row, hashes [][]byte, recorded time.Time) error {
	w := pgstore.NewCopyWriter()
	for i, p := range rows {
		w.Row(len(auditColumns))
		w.Text(p.EventID)
		w.Text(p.TenantID)
		w.Text(p.JobID)
		w.Text(p.Type)
		w.Int4(p.Attempt)
		w.Timestamptz(p.Occurred)
		w.Timestamptz(recorded)
		w.Text(p.Actor)
		w.Text(p.TraceID)
		w.Bytes(p.Data)
		w.Text(p.ChainID)
		w.Int8(p.Seq)
		w.Bytes(p.PrevHash)
		w.Bytes(hashes[i])
	}
	n, err := w.Copy(ctx, tx, pgx.Identifier{"audit_events"}, auditColumns)
	if err != nil {
		return fmt.Errorf("audit: copy rows: %w", err)
	}
	if int(n) != len(rows) {
		return fmt.Errorf("audit: copy rows: %d of %d copied", n, len(rows))
	}
	return nil
}

// advanceHeads stores each chain's new head; a head only moves forward.
func advanceHeads(ctx context.Context, tx pgx.Tx, heads map[string]chain.Position) error {
	hc := make([]string, 0, len(heads))
	hs := make([]int64, 0, len(heads))
	hh := make([][]byte, 0, len(heads))
	for id, pos := range heads {
		hc, hs, hh = append(hc, id), append(hs, pos.Seq), append(hh, pos.Hash)
	}
	if _, err := tx.Exec(ctx, `
		UPDATE audit_chain_heads h SET seq = x.s, hash = x.h, updated_at = now()
		FROM unnest($1::text[], $2::bigint[], $3::bytea[]) AS x(c, s, h)
		WHERE h.chain_id = x.c AND h.seq < x.s`, hc, hs, hh); err != nil {
		return fmt.Errorf("audit: update chain heads: %w", err)
	}
	return nil
}

// actorOf is who caused the event: the API key of Enqueued/Cancelled when
// set, otherwise the emitting service.
func actorOf(ev schema.Event) string {
	switch d := ev.Data.(type) {
	case schema.Enqueued:
		if d.Actor != "" {
			return d.Actor
		}
	case schema.Cancelled:
		if d.Actor != "" {
			return d.Actor
		}
	case schema.Audited:
		if a := d.AuditActor(); a != "" {
			return a
		}
	}
	return ev.Source
}

// subjectOf is what the audit log records of a record: the job (tenant,
// job id, attempt) and the type; false for records it does not keep.
func subjectOf(d schema.Data) (schema.JobRef, string, bool) {
	switch d := d.(type) {
	case schema.Lifecycle:
		return d.Ref(), string(d.EventType()), true
	case schema.Audited:
		return schema.JobRef{TenantID: d.Tenant()}, d.AuditType(), true
	}
	return schema.JobRef{}, "", false
}

func lockHeads(ctx context.Context, tx pgx.Tx, rows []*chain.Row) (map[string]chain.Position, error) {
	tenantOf := map[string]string{}
	for _, p := range rows {
		tenantOf[p.ChainID] = p.TenantID
	}
	ids := make([]string, 0, len(tenantOf))
	tenants := make([]string, 0, len(tenantOf))
	for id, t := range tenantOf {
		ids, tenants = append(ids, id), append(tenants, t)
	}
	if _, err := tx.Exec(ctx, `
		INSERT INTO audit_chain_heads (chain_id, tenant_id, seq, hash)
		SELECT c, t, 0, $3 FROM unnest($1::text[], $2::text[]) AS x(c, t) ORDER BY c
		ON CONFLICT (chain_id) DO NOTHING`, ids, tenants, chain.Genesis); err != nil {
		return nil, fmt.Errorf("audit: create chain heads: %w", err)
	}
	res, err := tx.Query(ctx, `SELECT chain_id, seq, hash FROM audit_chain_heads
		WHERE chain_id = ANY($1) ORDER BY chain_id FOR UPDATE`, ids)
	if err != nil {
		return nil, fmt.Errorf("audit: lock chain heads: %w", err)
	}
	heads := map[string]chain.Position{}
	var id string
	var pos chain.Position
	_, err = pgx.ForEachRow(res, []any{&id, &pos.Seq, &pos.Hash}, func() error {
		heads[id] = chain.Position{Seq: pos.Seq, Hash: append([]byte(nil), pos.Hash...)}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("audit: lock chain heads: %w", err)
	}
	return heads, nil
}

// dropRecorded drops the rows whose event is already recorded. A second
// copy of an event (a producer's retry) carries the same tenant and
// ce_time, so each lookup is one probe of the unique index on (tenant_id,
// occurred_at, event_id) in the partition of its time (a lateral subquery
// per event: the planner cannot turn it into a scan of the partition, as
// it could a join with the key arrays), not a search of every month
// retention keeps.
func dropRecorded(ctx context.Context, tx pgx.Tx, rows []*chain.Row) ([]*chain.Row, error) {
	tenants, times, ids := make([]string, len(rows)), make([]time.Time, len(rows)), make([]string, len(rows))
	for i, p := range rows {
		tenants[i], times[i], ids[i] = p.TenantID, p.Occurred, p.EventID
	}
	res, err := tx.Query(ctx, `SELECT a.event_id FROM unnest($1::text[], $2::timestamptz[], $3::text[]) AS k(t, o, e)
		CROSS JOIN LATERAL (SELECT event_id FROM audit_events
			WHERE tenant_id = k.t AND occurred_at = k.o AND event_id = k.e LIMIT 1) a`, tenants, times, ids)
	if err != nil {
		return nil, fmt.Errorf("audit: find recorded events: %w", err)
	}
	recorded := map[string]bool{}
	var id string
	if _, err := pgx.ForEachRow(res, []any{&id}, func() error { recorded[id] = true; return nil }); err != nil {
		return nil, fmt.Errorf("audit: find recorded events: %w", err)
	}
	if len(recorded) == 0 {
		return rows, nil
	}
	out := rows[:0]
	for _, p := range rows {
		if !recorded[p.EventID] {
			out = append(out, p)
		}
	}
	return out, nil
}
