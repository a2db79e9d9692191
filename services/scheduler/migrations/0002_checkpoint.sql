-- The scheduler's checkpoint: an increasing number stamped first in Redis
-- (P checkpoint) and then here. Redis's copy can only be behind this one if
-- Redis went back in time (restored from an older RDB/AOF, or a failover
-- that lost writes); the scheduler then rebuilds Redis from the log.
CREATE TABLE IF NOT EXISTS scheduler_checkpoint (
    id         int         PRIMARY KEY DEFAULT 1 CHECK (id = 1),
    seq        bigint      NOT NULL,
    stamped_at timestamptz NOT NULL DEFAULT now()
);
