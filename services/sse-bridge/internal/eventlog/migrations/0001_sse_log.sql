-- The sse-bridge event log: a short-lived, resumable copy of every lifecycle
-- event (a cache for SSE replay, not the audit log; rows older than
-- FERRY_SSE_RETENTION are deleted). seq is the SSE id. Writers serialise on a
-- transaction advisory lock, so seq values commit in increasing order and a
-- reader of "seq > last" never skips a row that commits later.
CREATE TABLE IF NOT EXISTS sse_events (
    seq         bigserial   PRIMARY KEY,
    ce_id       text        NOT NULL UNIQUE,
    tenant      text        NOT NULL,
    job_id      text        NOT NULL,
    event       text        NOT NULL,
    data        json        NOT NULL,
    occurred_at timestamptz NOT NULL,
    logged_at   timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS sse_events_job ON sse_events (job_id, seq);
CREATE INDEX IF NOT EXISTS sse_events_tenant ON sse_events (tenant, seq);

-- Per-job attributes: queue, type and tags travel only in enqueued events;
-- keeping them here lets tenant-stream filters apply to every event of a
-- job, whatever order the topics deliver in. terminal_seq is the job's final
-- event; the log keeps nothing of a job after it.
CREATE TABLE IF NOT EXISTS sse_jobs (
    job_id       text        PRIMARY KEY,
    tenant       text        NOT NULL,
    queue        text        NOT NULL DEFAULT '',
    job_type     text        NOT NULL DEFAULT '',
    tags         text[]      NOT NULL DEFAULT '{}',
    terminal_seq bigint,
    last_at      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS sse_jobs_last_at ON sse_jobs (last_at);

-- pruned_through is the highest seq retention has deleted: a client resuming
-- from an older position may have missed events and is told to re-sync.
CREATE TABLE IF NOT EXISTS sse_state (
    id             int    PRIMARY KEY CHECK (id = 1),
    pruned_through bigint NOT NULL DEFAULT 0
);
INSERT INTO sse_state (id) VALUES (1) ON CONFLICT DO NOTHING;
