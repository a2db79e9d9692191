-- One index fewer per audited event (three per job). The duplicate filter
-- and its backstop move from UNIQUE (event_id, occurred_at) to the index
-- that orders a tenant's events, made unique: a second copy of an event
-- carries the same tenant, ce_time and ce_id, so (tenant_id, occurred_at,
-- event_id) finds it and refuses it as well, and that index is written for
-- every row anyway. A unique index of a partitioned table must hold the
-- partition key (occurred_at); this one does.
--
-- The indexes that remain each serve a query:
--   audit_events_tenant_time  (tenant_id, occurred_at, event_id), unique:
--                             the duplicate filter and its backstop, and a
--                             tenant's events in time order (GET
--                             /v1/audit/events, export);
--   audit_events_tenant_job   one job's events: the job filter;
--   audit_events_chain        the verification walk and the cut that
--                             retention records before a drop.
--
-- Building the unique index reads every partition while audit appends wait
-- (they run in the projection, which catches up from Kafka afterwards;
-- reads go on meanwhile).
-- `ferry migrate up` used to apply these migrations before the table's own
-- on a new database, so 0001's drop of audit_events_event found nothing
-- and the index was created after it: dropped here for good.
DROP INDEX IF EXISTS audit_events_event;
DROP INDEX IF EXISTS audit_events_tenant_time;
CREATE UNIQUE INDEX audit_events_tenant_time ON audit_events (tenant_id, occurred_at, event_id);
ALTER TABLE audit_events DROP CONSTRAINT IF EXISTS audit_events_event_id_occurred_at_key;
