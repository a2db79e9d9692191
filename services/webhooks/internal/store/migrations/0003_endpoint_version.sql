-- A counter bumped in the same transaction as every change to which
-- endpoints receive what. The fan-out reads it in each of its transactions
-- and reloads its in-memory endpoints when it moved, so an event produced
-- after an endpoint was registered (or deleted, disabled, re-enabled) is
-- matched against it on every replica — not only after a periodic refresh.
CREATE TABLE webhook_endpoint_version (
    one     boolean PRIMARY KEY DEFAULT true CHECK (one),
    version bigint NOT NULL
);
INSERT INTO webhook_endpoint_version (version) VALUES (1);

CREATE FUNCTION webhook_endpoint_version_bump() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE webhook_endpoint_version SET version = version + 1;
    RETURN NULL;
END $$;

CREATE TRIGGER webhook_endpoint_version_insert AFTER INSERT ON webhook_endpoints
    FOR EACH ROW EXECUTE FUNCTION webhook_endpoint_version_bump();
-- Health bookkeeping (failing_since, consecutive_failures) and secrets do
-- not change matching; only these columns do.
CREATE TRIGGER webhook_endpoint_version_update AFTER UPDATE ON webhook_endpoints
    FOR EACH ROW WHEN (OLD.deleted_at IS DISTINCT FROM NEW.deleted_at
        OR OLD.disabled_at IS DISTINCT FROM NEW.disabled_at
        OR OLD.event_types IS DISTINCT FROM NEW.event_types
        OR OLD.filter_queue IS DISTINCT FROM NEW.filter_queue
        OR OLD.filter_type IS DISTINCT FROM NEW.filter_type
        OR OLD.tenant_id IS DISTINCT FROM NEW.tenant_id)
    EXECUTE FUNCTION webhook_endpoint_version_bump();
CREATE TRIGGER webhook_endpoint_version_delete AFTER DELETE ON webhook_endpoints
    FOR EACH ROW EXECUTE FUNCTION webhook_endpoint_version_bump();
