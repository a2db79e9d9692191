-- Cron schedules of the api service: each row creates jobs from its
-- template at its fire times. The firing loop of every api replica claims
-- due rows with FOR UPDATE SKIP LOCKED, creates their jobs and advances
-- them in the same transaction.
CREATE TABLE schedules (
    tenant_id      text        NOT NULL,
    id             text        NOT NULL,
    name           text        NOT NULL,
    cron           text        NOT NULL,
    timezone       text        NOT NULL,
    -- the job submission (POST /v1/jobs body) each fire creates
    template       jsonb       NOT NULL,
    overlap        text        NOT NULL,
    catchup        text        NOT NULL,
    catchup_limit  int         NOT NULL,
    paused         boolean     NOT NULL DEFAULT false,
    -- the next fire time not yet handled (NULL: the expression has none)
    next_fire_at   timestamptz,
    -- queue_one: the fire waiting for the previous run to finish
    queued_fire_at timestamptz,
    -- when a firing loop must look at the row next; NULL while paused
    due_at         timestamptz,
    last_fire_at   timestamptz,
    last_job_id    text        NOT NULL DEFAULT '',
    last_error     text        NOT NULL DEFAULT '',
    fired          bigint      NOT NULL DEFAULT 0,
    skipped        bigint      NOT NULL DEFAULT 0,
    created_at     timestamptz NOT NULL DEFAULT now(),
    updated_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, id)
);

CREATE UNIQUE INDEX schedules_name ON schedules (tenant_id, name);
-- The firing loops' claim: due rows, earliest first.
CREATE INDEX schedules_due ON schedules (due_at) WHERE due_at IS NOT NULL;

