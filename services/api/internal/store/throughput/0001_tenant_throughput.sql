-- Jobs finished per tenant and minute, by outcome, kept by the status
-- projection in the transaction that records the outcome (so exactly once).
-- The console's overview reads the last hour of it: at most 60 rows per
-- tenant, never a count over the jobs table. Rows older than a day are
-- deleted by the api's retention loop.
CREATE TABLE IF NOT EXISTS tenant_throughput (
    tenant_id  text        NOT NULL,
    minute     timestamptz NOT NULL,
    succeeded  bigint      NOT NULL DEFAULT 0,
    failed     bigint      NOT NULL DEFAULT 0,
    cancelled  bigint      NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant_id, minute)
);
CREATE INDEX IF NOT EXISTS tenant_throughput_minute ON tenant_throughput (minute);
