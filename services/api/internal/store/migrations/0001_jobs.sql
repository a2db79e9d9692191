-- The status projection of the api service: one row per job, merged from
-- every lifecycle topic by internal/status (order-independent rules).
CREATE TABLE jobs (
    tenant_id          text        NOT NULL,
    id                 text        NOT NULL,
    type               text        NOT NULL DEFAULT '',
    queue              text        NOT NULL DEFAULT '',
    priority           int         NOT NULL DEFAULT 0,
    pool               text        NOT NULL DEFAULT '',
    status             text        NOT NULL,
    attempt            int         NOT NULL,
    max_attempts       int         NOT NULL DEFAULT 0,
    payload            jsonb,
    tags               text[]      NOT NULL DEFAULT '{}',
    created_at         timestamptz NOT NULL,
    scheduled_for      timestamptz,
    started_at         timestamptz,
    finished_at        timestamptz,
    worker_id          text        NOT NULL DEFAULT '',
    progress_percent   double precision,
    progress_message   text        NOT NULL DEFAULT '',
    progress_at        timestamptz,
    result             jsonb,
    last_error_class   text        NOT NULL DEFAULT '',
    last_error_message text        NOT NULL DEFAULT '',
    trace_id           text        NOT NULL DEFAULT '',
    redriven_from      text        NOT NULL DEFAULT '',
    idempotency_key    text,
    request_hash       text        NOT NULL DEFAULT '',
    -- Merge state (see internal/status): the position and the rank of the
    -- event each group of fields was taken from.
    pos_attempt        int         NOT NULL,
    pos_phase          int         NOT NULL,
    spec_attempt       int         NOT NULL DEFAULT 0,
    enq_attempt        int         NOT NULL DEFAULT 0,
    delayed            boolean     NOT NULL DEFAULT false,
    run_attempt        int         NOT NULL DEFAULT 0,
    progress_attempt   int         NOT NULL DEFAULT 0,
    error_rank         int         NOT NULL DEFAULT 0,
    -- version increases with every write; a writer that lost a race to
    -- insert the same job retries its batch.
    version            bigint      NOT NULL DEFAULT 1,
    updated_at         timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, id)
);

-- The projector loads a batch's jobs by id alone.
CREATE INDEX jobs_id ON jobs (id);
-- Listing: newest first, cursor (created_at, id), with optional filters.
CREATE INDEX jobs_list ON jobs (tenant_id, created_at DESC, id DESC);
CREATE INDEX jobs_status ON jobs (tenant_id, status, created_at DESC, id DESC);
CREATE INDEX jobs_type ON jobs (tenant_id, type, created_at DESC, id DESC);
CREATE INDEX jobs_queue ON jobs (tenant_id, queue, created_at DESC, id DESC);
CREATE INDEX jobs_tags ON jobs USING gin (tags);
-- Durable idempotency backstop.
CREATE UNIQUE INDEX jobs_idempotency ON jobs (tenant_id, idempotency_key) WHERE idempotency_key IS NOT NULL;
