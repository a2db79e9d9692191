-- Tenant limits live in tenants.settings (jsonb, see auth.Settings); weight
-- stays a column because the scheduler's fair share reads it on its own.
-- Listing keys of a tenant, newest first.
CREATE INDEX IF NOT EXISTS api_keys_tenant_created ON api_keys (tenant_id, created_at DESC, id DESC);
