DROP INDEX kb.agent_run_tool_calls_awaiting_idx;
-- Calls still held become refused: the older schema has no held state.
UPDATE kb.agent_run_tool_calls SET status = 'refused'
WHERE status IN ('awaiting_approval', 'approved', 'rejected');
ALTER TABLE kb.agent_run_tool_calls
    DROP COLUMN approval_deadline,
    DROP COLUMN approval_on_deadline,
    DROP COLUMN decided_at,
    DROP COLUMN decided_by,
    DROP COLUMN decision_reason,
    DROP COLUMN decision_request_id,
    DROP COLUMN decision_digest,
    DROP COLUMN original_input,
    DROP COLUMN tool_parameters;
ALTER TABLE kb.agent_run_tool_calls DROP CONSTRAINT agent_run_tool_calls_status_check;
ALTER TABLE kb.agent_run_tool_calls ADD CONSTRAINT agent_run_tool_calls_status_check
    CHECK (status IN ('started', 'completed', 'failed', 'refused', 'interrupted'));

DROP INDEX kb.agent_runs_thread_active_idx;
DROP INDEX kb.agent_runs_thread_idx;
-- Waiting runs go back to the queue; they would have to be decided again.
UPDATE kb.agent_runs SET status = 'queued' WHERE status = 'waiting';
ALTER TABLE kb.agent_runs
    DROP CONSTRAINT agent_runs_waiting_unleased,
    DROP COLUMN thread_id,
    DROP COLUMN waiting_since,
    DROP COLUMN waited_ms;
ALTER TABLE kb.agent_runs DROP CONSTRAINT agent_runs_status_check;
ALTER TABLE kb.agent_runs ADD CONSTRAINT agent_runs_status_check
    CHECK (status IN ('queued', 'running', 'completed', 'failed', 'cancelled', 'paused'));
