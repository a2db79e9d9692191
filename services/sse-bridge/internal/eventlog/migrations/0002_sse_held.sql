-- Events waiting for their predecessor (eventlog.awaits): a job's events
-- travel on different topics, so the projection may consume a completed
-- before its started. Such an event waits here, written in the projection's
-- transaction, until its predecessor is logged or the hold passes; then it
-- is moved into sse_events. n keeps the order events were held in.
CREATE TABLE IF NOT EXISTS sse_held (
    n           bigserial   NOT NULL,
    ce_id       text        PRIMARY KEY,
    tenant      text        NOT NULL,
    job_id      text        NOT NULL,
    attempt     int         NOT NULL,
    event       text        NOT NULL,
    data        json        NOT NULL,
    occurred_at timestamptz NOT NULL,
    held_at     timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS sse_held_job ON sse_held (job_id);
CREATE INDEX IF NOT EXISTS sse_held_at ON sse_held (held_at);
