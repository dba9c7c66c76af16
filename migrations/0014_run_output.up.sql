-- Structured output and token streaming (issue #19).
-- A definition's JSON Schema of the final answer (NULL = free text) and its streaming switch.
ALTER TABLE kb.agent_definitions
    ADD COLUMN output_schema jsonb CHECK (output_schema IS NULL OR jsonb_typeof(output_schema) = 'object'),
    ADD COLUMN streaming boolean NOT NULL DEFAULT false;

-- The final answer as JSON, valid against the definition's output_schema (NULL = none).
ALTER TABLE kb.agent_runs
    ADD COLUMN output jsonb CHECK (output IS NULL OR jsonb_typeof(output) = 'object');
