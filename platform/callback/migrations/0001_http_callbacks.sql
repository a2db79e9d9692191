-- The dispatch of each attempt of an async http job that may report through
-- the callback API (POST /v1/jobs/{id}/callback/...). A worker writes the
-- row before it sends the request that carries the dispatch's callback
-- token; the api accepts a report only from the dispatch the row names,
-- while it is held and no later attempt has a row, and a complete or fail
-- moves it to its final state in the same statement that checks it, so a
-- second outcome, a late report of an older attempt or dispatch, or a report
-- after the worker settled the attempt itself (the receiver did not answer
-- 202) changes nothing. The recorded outcome answers repeats of it.
CREATE TABLE IF NOT EXISTS http_callbacks (
    job_id       text        NOT NULL,
    attempt      integer     NOT NULL,
    tenant_id    text        NOT NULL,
    dispatch_id  text        NOT NULL,
    -- held, completed, failed, or settled (the worker reported the attempt).
    state        text        NOT NULL,
    updated_at   timestamptz NOT NULL,
    PRIMARY KEY (job_id, attempt)
);
CREATE INDEX IF NOT EXISTS http_callbacks_updated ON http_callbacks (updated_at);
