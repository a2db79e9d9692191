-- Paused queues, per tenant: the durable record of POST /v1/queues/{queue}/pause.
-- Redis holds the copy the dispatch script reads (tenant:<t>:paused); the
-- scheduler re-pushes these rows every few seconds, so a pause survives the
-- loss of Redis.
CREATE TABLE IF NOT EXISTS scheduler_queue_pauses (
    tenant_id  text        NOT NULL,
    queue      text        NOT NULL,
    paused_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, queue)
);
