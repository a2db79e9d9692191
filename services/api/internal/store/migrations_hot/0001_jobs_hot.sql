-- Status updates without index writes. An UPDATE is HOT (heap-only: no
-- index entry is written) when it changes no indexed column and the new
-- row version fits in the row's page. A job's row is updated on nearly
-- every lifecycle event and each such update changes its status, so no
-- index may cover status, finished_at or any other column the status
-- projection keeps moving; every remaining index is on columns that are
-- fixed once the job's enqueued event is projected.
--
-- Dropped:
--   jobs_id        the projector now loads a batch's rows by (tenant_id, id)
--                  through the primary key;
--   jobs_status    listing by status walks jobs_list (newest first) and
--                  filters: the list API answers a page, not a count;
--   jobs_finished  retention finds candidates through jobs_created instead
--                  (a job finishes after it is created, so every job that
--                  finished before the cutoff was created before it).
DROP INDEX IF EXISTS jobs_id;
DROP INDEX IF EXISTS jobs_status;
DROP INDEX IF EXISTS jobs_finished;
CREATE INDEX IF NOT EXISTS jobs_created ON jobs (created_at);
-- Room in every page for the next versions of its rows, so an update finds
-- space beside the row. A batch often updates every row of a page at once
-- (jobs are projected in the order they were submitted), and a row grows
-- over its life (started_at, worker, progress, finished_at are filled in),
-- so a page must hold each row's next version, up to half again its size,
-- beside the current one until the page is pruned (the space of versions
-- no transaction sees any more is reclaimed when the page is next read).
-- The price is a table about 2.5 times larger; retention bounds it.
-- Applies to pages filled from now on.
ALTER TABLE jobs SET (fillfactor = 40);
