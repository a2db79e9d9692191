-- data becomes json: Postgres checks that the text is JSON and keeps it
-- byte for byte, so the projection hashes the event data as received and
-- appends it with one COPY. As jsonb it was parsed twice per row (once to
-- learn the text jsonb renders, which the hash had to cover, once more by
-- the COPY) and rendered once, and some data could not be stored at all (a
-- \u0000 in a string, a number beyond numeric), which then had to be kept
-- as a JSON string.
--
-- Rows stored before keep their hashes: casting jsonb to json renders the
-- very text data::text gave for the jsonb, which is what their hashes
-- cover. The change rewrites every partition (and rebuilds its indexes)
-- in this transaction; audit appends wait meanwhile (the projection then
-- catches up from Kafka; nothing is lost), and so do reads.
ALTER TABLE audit_events ALTER COLUMN data TYPE json USING data::json;

-- Only the jsonb path used it.
DROP FUNCTION IF EXISTS audit_try_jsonb(text);
