-- Each tenant's signing secret for the requests of its http jobs (Standard
-- Webhooks). Written by the api (POST /v1/http-signing/secret/rotate), read
-- by every worker at request time. Secrets are sealed with FERRY_SECRET_KEY
-- (AES-256-GCM, bound to the tenant), never stored in clear. A rotated-out
-- secret keeps signing until prev_until.
CREATE TABLE IF NOT EXISTS http_signing_secrets (
    tenant_id        text        PRIMARY KEY REFERENCES tenants (id),
    secret_enc       bytea       NOT NULL,
    prev_secret_enc  bytea,
    prev_until       timestamptz,
    created_at       timestamptz NOT NULL,
    rotated_at       timestamptz NOT NULL
);
