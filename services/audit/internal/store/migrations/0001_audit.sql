-- The audit projection: one append-only, hash-chained row per lifecycle event.
--
-- audit_events is partitioned by month of occurred_at (the event's ce_time);
-- the service creates partitions ahead and drops whole partitions older than
-- FERRY_AUDIT_RETENTION. Rows are never updated or deleted: the triggers
-- below reject UPDATE, DELETE and TRUNCATE for every role; dropping a
-- partition (retention) is the one deliberate way rows leave.
CREATE TABLE audit_events (
    event_id    text        NOT NULL,               -- ce_id
    tenant_id   text        NOT NULL,
    job_id      text        NOT NULL,
    type        text        NOT NULL,               -- short name: enqueued, started, …
    attempt     int         NOT NULL,
    occurred_at timestamptz NOT NULL,               -- ce_time (microseconds)
    recorded_at timestamptz NOT NULL DEFAULT now(),
    actor       text        NOT NULL,               -- API key id, or the emitting service (ce_source)
    trace_id    text        NOT NULL DEFAULT '',    -- from traceparent
    data        jsonb       NOT NULL,
    -- Hash chain: one chain per (tenant, topic, partition).
    chain_id    text        NOT NULL,
    seq         bigint      NOT NULL,
    prev_hash   bytea       NOT NULL,
    hash        bytea       NOT NULL,
    -- A backstop: duplicates are filtered before insert (ce_id across all
    -- partitions); a unique index must include the partition key.
    UNIQUE (event_id, occurred_at)
) PARTITION BY RANGE (occurred_at);

CREATE INDEX audit_events_event ON audit_events (event_id);
CREATE INDEX audit_events_tenant_time ON audit_events (tenant_id, occurred_at, event_id);
CREATE INDEX audit_events_tenant_job ON audit_events (tenant_id, job_id, occurred_at, event_id);
CREATE INDEX audit_events_chain ON audit_events (chain_id, seq, event_id);

-- Rows whose occurred_at falls outside every monthly partition.
CREATE TABLE audit_events_default PARTITION OF audit_events DEFAULT;

-- The head (last seq and hash) of every chain, updated in the transaction
-- that appends to the chain.
CREATE TABLE audit_chain_heads (
    chain_id   text        PRIMARY KEY,
    tenant_id  text        NOT NULL,
    seq        bigint      NOT NULL,
    hash       bytea       NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX audit_chain_heads_tenant ON audit_chain_heads (tenant_id, chain_id);

-- What retention dropped from each chain: verification starts after the
-- highest cut of a chain, expecting prev_hash = last_hash.
CREATE TABLE audit_chain_cuts (
    chain_id     text        NOT NULL,
    tenant_id    text        NOT NULL,
    partition    text        NOT NULL,
    last_seq     bigint      NOT NULL,
    last_hash    bytea       NOT NULL,
    rows_dropped bigint      NOT NULL,
    cut_at       timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (chain_id, partition)
);

CREATE FUNCTION audit_reject_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'audit_events is append-only: % is not allowed', TG_OP
        USING ERRCODE = 'insufficient_privilege',
              HINT = 'rows leave only when retention drops a whole monthly partition';
END $$;

CREATE TRIGGER audit_events_no_update_delete
    BEFORE UPDATE OR DELETE ON audit_events
    FOR EACH ROW EXECUTE FUNCTION audit_reject_change();
CREATE TRIGGER audit_events_no_truncate
    BEFORE TRUNCATE ON audit_events
    FOR EACH STATEMENT EXECUTE FUNCTION audit_reject_change();
-- Statement triggers are not inherited: each partition gets its own
-- TRUNCATE guard when it is created.
CREATE TRIGGER audit_events_no_truncate
    BEFORE TRUNCATE ON audit_events_default
    FOR EACH STATEMENT EXECUTE FUNCTION audit_reject_change();

-- Cuts and heads are history too: cuts are append-only, heads only move forward.
CREATE TRIGGER audit_chain_cuts_no_update_delete
    BEFORE UPDATE OR DELETE OR TRUNCATE ON audit_chain_cuts
    FOR EACH STATEMENT EXECUTE FUNCTION audit_reject_change();

CREATE FUNCTION audit_head_forward() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.seq < OLD.seq OR NEW.chain_id <> OLD.chain_id OR NEW.tenant_id <> OLD.tenant_id THEN
        RAISE EXCEPTION 'audit chain heads only move forward' USING ERRCODE = 'insufficient_privilege';
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER audit_chain_heads_forward
    BEFORE UPDATE ON audit_chain_heads
    FOR EACH ROW EXECUTE FUNCTION audit_head_forward();
CREATE TRIGGER audit_chain_heads_no_delete
    BEFORE DELETE OR TRUNCATE ON audit_chain_heads
    FOR EACH STATEMENT EXECUTE FUNCTION audit_reject_change();

-- Parses a JSON text as jsonb, or NULL when Postgres cannot store it (a
-- \u0000 in a string, a number beyond numeric's range); the row then keeps
-- the original text as a JSON string.
CREATE FUNCTION audit_try_jsonb(t text) RETURNS jsonb LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    RETURN t::jsonb;
EXCEPTION WHEN others THEN
    RETURN NULL;
END $$;
