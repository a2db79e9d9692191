-- Retention (Store.Expire): finished deliveries are deleted by when they
-- reached their final state, in chunks, so the delete needs an index over
-- exactly those rows. Pending deliveries are never in it.
CREATE INDEX webhook_deliveries_expiry ON webhook_deliveries (updated_at)
    WHERE status IN ('delivered', 'failed', 'cancelled');

-- The latest run_at seen for a job: a job scheduled far ahead keeps its
-- queue and type until it has run, however long ago it was submitted.
ALTER TABLE webhook_jobs ADD COLUMN run_at timestamptz;
-- GREATEST ignores NULLs: rows from before this migration expire by updated_at.
CREATE INDEX webhook_jobs_expiry ON webhook_jobs ((GREATEST(updated_at, run_at)));
