ALTER TABLE kb.agent_runs DROP COLUMN output, DROP COLUMN stream_deltas;
ALTER TABLE kb.agent_definitions DROP COLUMN output_schema, DROP COLUMN streaming;
