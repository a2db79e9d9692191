-- Per-tenant counts of unfinished jobs, kept by the status projection in the
-- same transaction as the job rows, so the api can enforce max_queued with
-- one indexed read (cached ~1s) instead of counting jobs.
CREATE TABLE tenant_job_counts (
    tenant_id  text   PRIMARY KEY,
    -- jobs waiting to run: status queued or scheduled (delayed, backing off)
    pending    bigint NOT NULL DEFAULT 0,
    -- jobs a worker holds: status running
    running    bigint NOT NULL DEFAULT 0
);

INSERT INTO tenant_job_counts (tenant_id, pending, running)
SELECT tenant_id,
       count(*) FILTER (WHERE status IN ('queued', 'scheduled')),
       count(*) FILTER (WHERE status = 'running')
FROM jobs GROUP BY tenant_id
ON CONFLICT (tenant_id) DO NOTHING;
