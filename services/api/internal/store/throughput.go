package store

import (
	"context"
	"embed"
	"fmt"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ferryhq/ferry/events/schema"
	"github.com/ferryhq/ferry/platform/pgstore"
)

//go:embed throughput/*.sql
var throughputMigrations embed.FS

// ThroughputMigrations create tenant_throughput, a component of its own so
// its versions never collide with the jobs table's.
var ThroughputMigrations = pgstore.Register("api_throughput", throughputMigrations, "throughput")

// minuteKey is one tenant's minute of finished jobs.
type minuteKey struct {
	tenant string
	minute time.Time
}

// Outcomes are the jobs of one tenant that finished in one minute.
type Outcomes struct {
	Minute    time.Time `json:"minute"`
	Succeeded int64     `json:"succeeded"`
	// Failed counts jobs dead-lettered (every attempt failed, or a
	// permanent failure).
	Failed    int64 `json:"failed"`
	Cancelled int64 `json:"cancelled"`
}

// addOutcome counts a job that reached a terminal status in this batch.
func addOutcome(m map[minuteKey]*Outcomes, tenant string, st schema.Status, finished *time.Time, now time.Time) {
	at := now
	if finished != nil {
		at = *finished
	}
	k := minuteKey{tenant, at.UTC().Truncate(time.Minute)}
	o := m[k]
	if o == nil {
		o = &Outcomes{Minute: k.minute}
		m[k] = o
	}
	switch st {
	case schema.StatusSucceeded:
		o.Succeeded++
	case schema.StatusDead:
		o.Failed++
	case schema.StatusCancelled:
		o.Cancelled++
	}
}

// terminal reports whether st ends a job.
func terminal(st schema.Status) bool {
	return st == schema.StatusSucceeded || st == schema.StatusDead || st == schema.StatusCancelled
}

// applyThroughput adds the batch's outcomes, in a fixed order so two
// projection transactions never deadlock.
func applyThroughput(ctx context.Context, tx pgx.Tx, m map[minuteKey]*Outcomes) error {
	if len(m) == 0 {
		return nil
	}
	keys := make([]minuteKey, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(a, b int) bool {
		if keys[a].tenant != keys[b].tenant {
			return keys[a].tenant < keys[b].tenant
		}
		return keys[a].minute.Before(keys[b].minute)
	})
	tenants, minutes := make([]string, len(keys)), make([]time.Time, len(keys))
	ok, failed, cancelled := make([]int64, len(keys)), make([]int64, len(keys)), make([]int64, len(keys))
	for i, k := range keys {
		o := m[k]
		tenants[i], minutes[i], ok[i], failed[i], cancelled[i] = k.tenant, k.minute, o.Succeeded, o.Failed, o.Cancelled
	}
	_, err := tx.Exec(ctx, `INSERT INTO tenant_throughput AS t (tenant_id, minute, succeeded, failed, cancelled)
		SELECT * FROM unnest($1::text[], $2::timestamptz[], $3::bigint[], $4::bigint[], $5::bigint[]) ORDER BY 1, 2
		ON CONFLICT (tenant_id, minute) DO UPDATE SET
			succeeded = t.succeeded + EXCLUDED.succeeded,
			failed = t.failed + EXCLUDED.failed,
			cancelled = t.cancelled + EXCLUDED.cancelled`, tenants, minutes, ok, failed, cancelled)
	if err != nil {
		return fmt.Errorf("store: tenant throughput: %w", err)
	}
	return nil
}

// Throughput returns tenant's outcomes per minute from since (truncated to
// the minute) to now, oldest first, one entry per minute (zero where
// nothing finished).
func (s *Store) Throughput(ctx context.Context, tenant string, since, now time.Time) ([]Outcomes, error) {
	since = since.UTC().Truncate(time.Minute)
	rows, err := s.pool.Query(ctx, `SELECT minute, succeeded, failed, cancelled FROM tenant_throughput
		WHERE tenant_id = $1 AND minute >= $2 ORDER BY minute`, tenant, since)
	if err != nil {
		return nil, fmt.Errorf("store: read throughput: %w", err)
	}
	got, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Outcomes, error) {
		var o Outcomes
		err := r.Scan(&o.Minute, &o.Succeeded, &o.Failed, &o.Cancelled)
		o.Minute = o.Minute.UTC()
		return o, err
	})
	if err != nil {
		return nil, fmt.Errorf("store: read throughput: %w", err)
	}
	byMinute := make(map[time.Time]Outcomes, len(got))
	for _, o := range got {
		byMinute[o.Minute] = o
	}
	var out []Outcomes
	for m := since; !m.After(now); m = m.Add(time.Minute) {
		o, ok := byMinute[m]
		if !ok {
			o = Outcomes{Minute: m}
		}
		out = append(out, o)
	}
	return out, nil
}

// DeleteThroughputBefore deletes minutes older than cutoff.
func (s *Store) DeleteThroughputBefore(ctx context.Context, cutoff time.Time) error {
	if _, err := s.pool.Exec(ctx, `DELETE FROM tenant_throughput WHERE minute < $1`, cutoff); err != nil {
		return fmt.Errorf("store: delete old throughput: %w", err)
	}
	return nil
}
