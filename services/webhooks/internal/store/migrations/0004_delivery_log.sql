-- The delivery log keeps what was sent and what came back, per attempt.
-- The request body is the delivery's body (stored once, shared by every
-- attempt); an attempt adds only its request headers (the signature
-- redacted) and the response: headers (secret-looking ones redacted) and at
-- most 4 KiB of body (deliver.maxLoggedBody), as valid UTF-8 text. Values
-- over 2 KB are compressed by Postgres (TOAST).
ALTER TABLE webhook_attempts
    ADD COLUMN request_headers    jsonb,
    ADD COLUMN response_headers   jsonb,
    ADD COLUMN response_body      text,
    ADD COLUMN response_truncated boolean NOT NULL DEFAULT false,
    -- The API key id that asked for this attempt as a replay; NULL for the
    -- attempts of the retry schedule.
    ADD COLUMN replayed_by        text;

-- Set while a replay of the delivery is pending: the attempt that sends it
-- is recorded as a replay by this key id.
ALTER TABLE webhook_deliveries ADD COLUMN replay_by text;

-- The webhook deliveries a job caused (GET /v1/webhooks/deliveries?job_id=).
CREATE INDEX webhook_deliveries_job ON webhook_deliveries (tenant_id, job_id, seq DESC);
