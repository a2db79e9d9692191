-- One index entry fewer per job: retention finds its candidates through
-- jobs_list (tenant_id, created_at DESC, id DESC), a tenant at a time
-- (DeleteFinished), so jobs_created, which only retention read, is no
-- longer written for every job. Dropping an index takes no time.
DROP INDEX IF EXISTS jobs_created;
