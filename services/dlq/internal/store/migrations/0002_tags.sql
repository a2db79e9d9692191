-- The job's tags, copied out of spec so the list can filter on them (tag=)
-- with an index: spec is json (kept as submitted), which has no operators
-- to index. Rows projected before this migration get them from spec.
ALTER TABLE dlq_entries ADD COLUMN tags text[] NOT NULL DEFAULT '{}';
UPDATE dlq_entries SET tags = ARRAY(SELECT json_array_elements_text(spec->'tags'))
    WHERE json_typeof(spec->'tags') = 'array';
CREATE INDEX dlq_entries_tags ON dlq_entries USING gin (tags);
