-- A call's result (started -> completed) could never be a HOT update: the deadline sweep's
-- partial index named status in its predicate, so every result wrote a new entry in each of
-- the table's indexes. Its predicate now names only columns a result leaves alone
-- (approval_deadline is set when a call is held, decided_at when it is decided), and each
-- page keeps room for the result beside the row it updates.
DROP INDEX kb.agent_run_tool_calls_awaiting_idx;
CREATE INDEX agent_run_tool_calls_awaiting_idx ON kb.agent_run_tool_calls (approval_deadline)
    WHERE approval_deadline IS NOT NULL AND decided_at IS NULL;
ALTER TABLE kb.agent_run_tool_calls SET (fillfactor = 80);
