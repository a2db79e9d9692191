-- Retention of finished jobs: the housekeeping loop deletes succeeded, dead
-- and cancelled rows whose finished_at is older than FERRY_JOB_RETENTION,
-- oldest first, in bounded batches. This partial index holds only finished
-- rows, ordered by that time, so each batch is an index range scan however
-- large the table.
CREATE INDEX IF NOT EXISTS jobs_finished ON jobs (finished_at, tenant_id, id)
    WHERE status IN ('succeeded', 'dead', 'cancelled');
