-- Unique jobs: the unique key a job was submitted with (key, the state it
-- holds in, and when it stops holding whatever the state). The api reads
-- them when Redis has no claim for a key, so a Redis loss does not let a
-- second job in while the first holds the key. The partial index holds
-- only jobs that have a key.
ALTER TABLE jobs ADD COLUMN IF NOT EXISTS unique_key text;
ALTER TABLE jobs ADD COLUMN IF NOT EXISTS unique_while text NOT NULL DEFAULT '';
ALTER TABLE jobs ADD COLUMN IF NOT EXISTS unique_until timestamptz;
CREATE INDEX IF NOT EXISTS jobs_unique_key ON jobs (tenant_id, unique_key) WHERE unique_key IS NOT NULL;
