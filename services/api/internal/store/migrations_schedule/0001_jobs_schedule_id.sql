-- The schedule that created a job (empty for jobs submitted directly),
-- copied from its enqueued event. A component of its own ("api-schedule")
-- so its numbering never collides with the jobs table's other migrations.
ALTER TABLE jobs ADD COLUMN IF NOT EXISTS schedule_id text NOT NULL DEFAULT '';
