-- Records a consumer could not apply (poison), parked with their error until
-- an operator retries or discards them. Rows are never deleted: a discarded
-- or resolved record stays listable.
CREATE TABLE IF NOT EXISTS ferry_quarantine (
    id             bigserial   PRIMARY KEY,
    consumer_group text        NOT NULL,
    topic          text        NOT NULL,
    partition      int         NOT NULL,
    "offset"       bigint      NOT NULL,
    key            bytea,
    value          bytea,
    -- [{"key": {"encoding", "data"}, "value": {"encoding", "data"}}]: text
    -- when valid UTF-8 without NUL, else base64, so any header is storable.
    headers        jsonb       NOT NULL DEFAULT '[]',
    record_time    timestamptz,
    error          text        NOT NULL,
    first_seen     timestamptz NOT NULL DEFAULT now(),
    last_seen      timestamptz NOT NULL DEFAULT now(),
    tries          int         NOT NULL,
    status         text        NOT NULL DEFAULT 'parked'
                   CHECK (status IN ('parked', 'retry', 'resolved', 'discarded')),
    retry_requested_at timestamptz,
    resolved_at    timestamptz,
    discarded_at   timestamptz,
    discarded_by   text,
    discard_reason text,
    UNIQUE (consumer_group, topic, partition, "offset")
);
CREATE INDEX IF NOT EXISTS ferry_quarantine_group_status ON ferry_quarantine (consumer_group, status, id);
CREATE INDEX IF NOT EXISTS ferry_quarantine_status ON ferry_quarantine (status, id);
