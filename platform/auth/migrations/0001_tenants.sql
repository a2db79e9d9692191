-- Tenants and their API keys. Written by the api service's admin routes;
-- every other service only reads them (a shared read-only table, see
-- docs/tenancy.md). Keys are stored as SHA-256 hashes, never in clear.
CREATE TABLE IF NOT EXISTS tenants (
    id            text        PRIMARY KEY,
    name          text        NOT NULL,
    weight        int         NOT NULL DEFAULT 1 CHECK (weight > 0),
    settings      jsonb       NOT NULL DEFAULT '{}',
    created_at    timestamptz NOT NULL DEFAULT now(),
    disabled_at   timestamptz
);

CREATE TABLE IF NOT EXISTS api_keys (
    id          text        PRIMARY KEY,
    tenant_id   text        NOT NULL REFERENCES tenants (id),
    key_hash    bytea       NOT NULL UNIQUE,
    prefix      text        NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    revoked_at  timestamptz
);
CREATE INDEX IF NOT EXISTS api_keys_tenant ON api_keys (tenant_id);
