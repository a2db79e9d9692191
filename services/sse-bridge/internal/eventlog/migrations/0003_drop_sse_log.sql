-- The sse-bridge's event log moved out of Postgres into each process's
-- memory, fed from Kafka: nothing of it is stored here any more. The
-- projection offsets of its former consumer group go too, so nothing
-- reports a lag for a group that no longer reads.
DROP TABLE IF EXISTS sse_held;
DROP TABLE IF EXISTS sse_events;
DROP TABLE IF EXISTS sse_jobs;
DROP TABLE IF EXISTS sse_state;
DO $$
BEGIN
    IF to_regclass('ferry_offsets') IS NOT NULL THEN
        DELETE FROM ferry_offsets WHERE consumer_group = 'ferry-sse-log';
    END IF;
END $$;
