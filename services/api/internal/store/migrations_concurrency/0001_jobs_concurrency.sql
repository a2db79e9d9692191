-- Concurrency keys: the key and limit a job was submitted with
-- (docs/flow-control.md), so GET /v1/jobs/{id} and the job lists show them.
-- An empty key is a job without one.
ALTER TABLE jobs ADD COLUMN IF NOT EXISTS concurrency_key text NOT NULL DEFAULT '';
ALTER TABLE jobs ADD COLUMN IF NOT EXISTS concurrency_limit integer NOT NULL DEFAULT 0;
