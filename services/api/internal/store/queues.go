package store

import (
	"context"
	"fmt"
	"sort"

	"github.com/jackc/pgx/v5"
)

// queueKey is one queue of one tenant.
type queueKey struct{ tenant, queue string }

// addQueueDelta counts a job of status st entering (n=+1) or leaving (n=-1)
// queue k. A row created before its enqueued event has no queue yet: it is
// not counted until it has one.
func addQueueDelta(m map[queueKey]*countDelta, k queueKey, st string, n int64) {
	if k.queue == "" || st == "" {
		return
	}
	d := m[k]
	if d == nil {
		d = &countDelta{}
		m[k] = d
	}
	d.add(st, n)
}

// applyQueueCounts adds the batch's per-queue deltas to tenant_queue_counts,
// in a fixed order so two projection transactions never deadlock.
func applyQueueCounts(ctx context.Context, tx pgx.Tx, deltas map[queueKey]*countDelta) error {
	var keys []queueKey
	for k, d := range deltas {
		if d.pending != 0 || d.running != 0 {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return nil
	}
	sort.Slice(keys, func(a, b int) bool {
		if keys[a].tenant != keys[b].tenant {
			return keys[a].tenant < keys[b].tenant
		}
		return keys[a].queue < keys[b].queue
	})
	tenants, queues := make([]string, len(keys)), make([]string, len(keys))
	pending, running := make([]int64, len(keys)), make([]int64, len(keys))
	for i, k := range keys {
		tenants[i], queues[i] = k.tenant, k.queue
		pending[i], running[i] = deltas[k].pending, deltas[k].running
	}
	_, err := tx.Exec(ctx, `INSERT INTO tenant_queue_counts AS c (tenant_id, queue, pending, running)
		SELECT t, q, p, r FROM unnest($1::text[], $2::text[], $3::bigint[], $4::bigint[]) AS d(t, q, p, r) ORDER BY t, q
		ON CONFLICT (tenant_id, queue) DO UPDATE SET
			pending = c.pending + EXCLUDED.pending,
			running = c.running + EXCLUDED.running`, tenants, queues, pending, running)
	if err != nil {
		return fmt.Errorf("store: tenant queue counts: %w", err)
	}
	return nil
}

// maxLiveQueues bounds the names TenantQueues reads: far above any sensible
// per-tenant limit, so a read stays small whatever happened before a limit
// was set.
const maxLiveQueues = 10_000

// TenantQueues returns the queues of tenant the projection counts, each
// with whether it has unfinished jobs (queued, scheduled or running). Rows
// at zero stay until the retention loop deletes them, so a queue whose jobs
// all finished reads as known and idle for a while.
func (s *Store) TenantQueues(ctx context.Context, tenant string) (map[string]bool, error) {
	rows, err := s.pool.Query(ctx, `SELECT queue, pending > 0 OR running > 0 FROM tenant_queue_counts
		WHERE tenant_id = $1 ORDER BY pending > 0 OR running > 0 DESC LIMIT $2`, tenant, maxLiveQueues)
	if err != nil {
		return nil, fmt.Errorf("store: tenant queues: %w", err)
	}
	out := map[string]bool{}
	var (
		name string
		live bool
	)
	_, err = pgx.ForEachRow(rows, []any{&name, &live}, func() error { out[name] = live; return nil })
	if err != nil {
		return nil, fmt.Errorf("store: tenant queues: %w", err)
	}
	return out, nil
}
