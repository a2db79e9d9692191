-- Kafka offsets of exactly-once projections, written in the same transaction
-- as the projected rows.
CREATE TABLE IF NOT EXISTS ferry_offsets (
    consumer_group text        NOT NULL,
    topic          text        NOT NULL,
    partition      int         NOT NULL,
    next_offset    bigint      NOT NULL,
    updated_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer_group, topic, partition)
);
