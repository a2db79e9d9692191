-- Endpoints a tenant registered. Secrets are AES-256-GCM sealed
-- (FERRY_SECRET_KEY), never stored in clear.
CREATE TABLE webhook_endpoints (
    id                     text PRIMARY KEY,
    tenant_id              text NOT NULL,
    url                    text NOT NULL,
    event_types            text[] NOT NULL DEFAULT '{}',
    filter_queue           text NOT NULL DEFAULT '',
    filter_type            text NOT NULL DEFAULT '',
    description            text NOT NULL DEFAULT '',
    secret_enc             bytea NOT NULL,
    prev_secret_enc        bytea,
    prev_secret_until      timestamptz,
    created_at             timestamptz NOT NULL DEFAULT now(),
    updated_at             timestamptz NOT NULL DEFAULT now(),
    deleted_at             timestamptz,
    disabled_at            timestamptz,
    disabled_reason        text NOT NULL DEFAULT '',
    -- First failure since the last success; NULL while healthy.
    failing_since          timestamptz,
    consecutive_failures   int NOT NULL DEFAULT 0
);
CREATE INDEX webhook_endpoints_tenant ON webhook_endpoints (tenant_id, id) WHERE deleted_at IS NULL;

-- The outbox: one row per (event, endpoint), inserted in the same
-- transaction as the consumer's Kafka offsets. id is the webhook-id, stable
-- across retries.
CREATE TABLE webhook_deliveries (
    id               text PRIMARY KEY,
    seq              bigserial NOT NULL,
    tenant_id        text NOT NULL,
    endpoint_id      text NOT NULL REFERENCES webhook_endpoints (id),
    event_id         text NOT NULL,
    event_type       text NOT NULL,
    job_id           text NOT NULL,
    body             bytea NOT NULL,
    -- pending | delivered | failed (attempts used up, or 410) | cancelled
    status           text NOT NULL DEFAULT 'pending',
    attempts         int NOT NULL DEFAULT 0,
    -- While pending: when the next attempt is due (a claim pushes it out by
    -- a lease, so a crashed sender's claim expires by itself).
    next_attempt_at  timestamptz,
    last_status_code int,
    last_latency_ms  int,
    last_error       text NOT NULL DEFAULT '',
    delivered_at     timestamptz,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (endpoint_id, next_attempt_at) WHERE status = 'pending';
CREATE INDEX webhook_deliveries_log ON webhook_deliveries (endpoint_id, seq DESC);

-- Every attempt, for the delivery log.
CREATE TABLE webhook_attempts (
    delivery_id  text NOT NULL REFERENCES webhook_deliveries (id) ON DELETE CASCADE,
    attempt      int NOT NULL,
    at           timestamptz NOT NULL DEFAULT now(),
    status_code  int,
    latency_ms   int NOT NULL,
    error        text NOT NULL DEFAULT '',
    PRIMARY KEY (delivery_id, attempt)
);

-- Queue and type of jobs, from enqueued and dlq events, kept only for
-- tenants with an endpoint that filters on them (other events do not carry
-- them).
CREATE TABLE webhook_jobs (
    job_id     text PRIMARY KEY,
    tenant_id  text NOT NULL,
    queue      text NOT NULL,
    type       text NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);
