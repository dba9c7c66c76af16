-- Structured output and token streaming (issue #19).
-- A definition's JSON Schema of the final answer (NULL = free text) and its streaming switch
-- (NULL = the default: stream the runs someone follows from their start, StartRun/ResumeRun).
ALTER TABLE kb.agent_definitions
    ADD COLUMN output_schema jsonb CHECK (output_schema IS NULL OR jsonb_typeof(output_schema) = 'object'),
    ADD COLUMN streaming boolean;

-- The final answer as JSON, valid against the definition's output_schema (NULL = none).
ALTER TABLE kb.agent_runs
    ADD COLUMN output jsonb CHECK (output IS NULL OR jsonb_typeof(output) = 'object'),
    -- Whether the run's model calls stream MODEL_TEXT_DELTA events, decided when it is queued
    -- (or resumed) from the definition's switch and whether the caller follows it.
    ADD COLUMN stream_deltas boolean NOT NULL DEFAULT false;
