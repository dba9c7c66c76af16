ALTER TABLE kb.agent_run_tool_calls RESET (fillfactor);
DROP INDEX kb.agent_run_tool_calls_awaiting_idx;
CREATE INDEX agent_run_tool_calls_awaiting_idx
    ON kb.agent_run_tool_calls (approval_deadline) WHERE status = 'awaiting_approval';
