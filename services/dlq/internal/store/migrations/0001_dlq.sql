-- The DLQ projection of the dlq service: one row per dead-lettered job,
-- projected from ferry.jobs.dlq (see internal/store). spec and history are
-- json (not jsonb) so the submission keeps its key order and numbers as sent.
CREATE TABLE dlq_entries (
    tenant_id      text        NOT NULL,
    job_id         text        NOT NULL,
    -- attempt is the attempt the dlq event was for; a later attempt's
    -- event replaces an earlier one, repeats are ignored.
    attempt        int         NOT NULL,
    type           text        NOT NULL,
    queue          text        NOT NULL,
    spec           json        NOT NULL,
    history        json        NOT NULL,
    error_class    text        NOT NULL,
    error_message  text        NOT NULL,
    created_at     timestamptz NOT NULL,
    dead_at        timestamptz NOT NULL,
    redriven_from  text        NOT NULL DEFAULT '',
    event_id       text        NOT NULL,
    suppressed_at  timestamptz,
    suppressed_by  text        NOT NULL DEFAULT '',
    projected_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, job_id)
);

-- Listing: newest first, cursor (dead_at, job_id), with optional filters.
CREATE INDEX dlq_entries_list  ON dlq_entries (tenant_id, dead_at DESC, job_id DESC);
CREATE INDEX dlq_entries_type  ON dlq_entries (tenant_id, type, dead_at DESC, job_id DESC);
CREATE INDEX dlq_entries_queue ON dlq_entries (tenant_id, queue, dead_at DESC, job_id DESC);
CREATE INDEX dlq_entries_class ON dlq_entries (tenant_id, error_class, dead_at DESC, job_id DESC);
-- Retention.
CREATE INDEX dlq_entries_dead_at ON dlq_entries (dead_at);

-- Re-drives: at most one per entry. A claim ('pending') reserves the new
-- job id before the enqueued event is produced; 'done' once produced (or
-- once the enqueued event is seen on the log); 'released' when producing
-- failed, keeping the reserved job id for the next attempt.
CREATE TABLE dlq_redrives (
    tenant_id     text        NOT NULL,
    dead_job_id   text        NOT NULL,
    job_id        text        NOT NULL,
    state         text        NOT NULL CHECK (state IN ('pending', 'released', 'done')),
    actor         text        NOT NULL DEFAULT '',
    spec          json        NOT NULL,
    claimed_at    timestamptz,
    redriven_at   timestamptz,
    confirmed_at  timestamptz,
    PRIMARY KEY (tenant_id, dead_job_id)
);

-- Tombstones of purged entries, so a late duplicate of their dlq event
-- does not bring them back. Kept for the retention period.
CREATE TABLE dlq_purged (
    tenant_id  text        NOT NULL,
    job_id     text        NOT NULL,
    purged_at  timestamptz NOT NULL,
    PRIMARY KEY (tenant_id, job_id)
);
CREATE INDEX dlq_purged_at ON dlq_purged (purged_at);

-- Error text search (q=) uses ILIKE; a trigram index makes it fast where
-- the pg_trgm extension may be created. Without it the search still works.
DO $$
BEGIN
    CREATE EXTENSION IF NOT EXISTS pg_trgm;
EXCEPTION WHEN OTHERS THEN
    RAISE NOTICE 'pg_trgm is not available; DLQ error search will not be indexed';
END $$;

DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'pg_trgm') THEN
        EXECUTE 'CREATE INDEX dlq_entries_error_trgm ON dlq_entries USING gin (error_message gin_trgm_ops)';
    END IF;
END $$;
