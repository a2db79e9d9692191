-- Sessions of the web console (services/api/console): an API key or the
-- admin key exchanged for a cookie. Only the SHA-256 of the session token
-- is stored. A tenant session lives while its key is valid (the key's row
-- is read at every lookup); an admin session records the hash of the admin
-- key it was opened with, so changing FERRY_ADMIN_KEY ends it.
CREATE TABLE IF NOT EXISTS console_sessions (
    token_hash      bytea       PRIMARY KEY,
    key_id          text        NOT NULL,
    tenant_id       text        NOT NULL DEFAULT '',
    admin_key_hash  bytea,
    created_at      timestamptz NOT NULL DEFAULT now(),
    expires_at      timestamptz NOT NULL
);
CREATE INDEX IF NOT EXISTS console_sessions_expires ON console_sessions (expires_at);
