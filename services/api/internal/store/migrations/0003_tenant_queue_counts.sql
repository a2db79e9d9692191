-- Per-tenant, per-queue counts of unfinished jobs, kept by the status
-- projection in the same transaction as the job rows (like
-- tenant_job_counts), so the api can bound a tenant's distinct live queues
-- (max_queues) with one indexed read instead of a scan of its jobs. A row
-- at zero is a queue the tenant no longer uses; the retention loop deletes
-- such rows.
CREATE TABLE tenant_queue_counts (
    tenant_id  text   NOT NULL,
    queue      text   NOT NULL,
    pending    bigint NOT NULL DEFAULT 0,
    running    bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant_id, queue)
);

INSERT INTO tenant_queue_counts (tenant_id, queue, pending, running)
SELECT tenant_id, queue,
       count(*) FILTER (WHERE status IN ('queued', 'scheduled')),
       count(*) FILTER (WHERE status = 'running')
FROM jobs WHERE status IN ('queued', 'scheduled', 'running')
GROUP BY tenant_id, queue
ON CONFLICT (tenant_id, queue) DO NOTHING;
