package store

import (
	"context"
	"fmt"
	"time"
)

// DeleteFinished deletes up to limit finished jobs (succeeded, dead,
// cancelled) whose finished_at is before cutoff, each tenant's oldest
// created first, and returns how many it deleted. One call is one short
// statement: it steps through the tenants that have jobs (a probe of the
// primary key per tenant, each for the next tenant id) and reads each
// one's jobs created before cutoff through jobs_list, oldest first (a job
// that finished before cutoff was created before it; no index covers
// status or finished_at, so status updates stay HOT, nor created_at
// alone, so a job's insert writes one index entry fewer), until limit
// jobs are found. So the retention loop never holds locks for long and
// stops when a call deletes fewer than limit. Unfinished jobs created
// before cutoff are passed over by each call; they are few (long delays,
// long runs).
//
// A deleted job is gone for reads (404) and for the durable idempotency
// backstop: a key older than the retention (and past its Redis TTL) is
// free again. Events of a finished job cannot arrive after the retention
// as long as it exceeds the topics' retention.
func (s *Store) DeleteFinished(ctx context.Context, cutoff time.Time, limit int) (int64, error) {
	tag, err := s.pool.Exec(ctx, `DELETE FROM jobs WHERE (tenant_id, id) IN (`+finishedBefore+`)`, cutoff, limit)
	if err != nil {
		return 0, fmt.Errorf("store: delete finished jobs: %w", err)
	}
	return tag.RowsAffected(), nil
}

// finishedBefore selects up to $2 (tenant_id, id) of jobs finished before
// $1 for DeleteFinished: the tenants one after another (a recursive step
// per tenant), each tenant's jobs oldest first.
const finishedBefore = `WITH RECURSIVE tenants(t) AS (
		SELECT min(tenant_id) FROM jobs
		UNION ALL
		SELECT (SELECT min(tenant_id) FROM jobs WHERE tenant_id > tenants.t) FROM tenants WHERE tenants.t IS NOT NULL)
	SELECT j.tenant_id, j.id FROM tenants CROSS JOIN LATERAL (
		SELECT tenant_id, id FROM jobs WHERE tenant_id = tenants.t AND created_at < $1
			AND status IN ('succeeded', 'dead', 'cancelled') AND finished_at < $1
		ORDER BY created_at, id LIMIT $2) j
	LIMIT $2`

// DeleteIdleQueues deletes up to limit tenant_queue_counts rows at zero
// (queues without unfinished jobs), so the table follows the live queues.
// A projection transaction that counts a job into such a queue meanwhile
// re-creates or keeps the row (the delete re-checks the row it waited for).
func (s *Store) DeleteIdleQueues(ctx context.Context, limit int) (int64, error) {
	tag, err := s.pool.Exec(ctx, `DELETE FROM tenant_queue_counts WHERE (tenant_id, queue) IN (
		SELECT tenant_id, queue FROM tenant_queue_counts WHERE pending = 0 AND running = 0 LIMIT $1)
		AND pending = 0 AND running = 0`, limit)
	if err != nil {
		return 0, fmt.Errorf("store: delete idle queues: %w", err)
	}
	return tag.RowsAffected(), nil
}
