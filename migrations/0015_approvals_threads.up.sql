-- Human approval of tool calls and threads (issue #19).

-- A run may wait for a person: WAITING holds no worker slot and no lease.
ALTER TABLE kb.agent_runs DROP CONSTRAINT agent_runs_status_check;
ALTER TABLE kb.agent_runs ADD CONSTRAINT agent_runs_status_check
    CHECK (status IN ('queued', 'running', 'waiting', 'completed', 'failed', 'cancelled',
                      'paused'));
ALTER TABLE kb.agent_runs
    -- A run in a thread starts from the thread's previous completed run's conversation.
    ADD COLUMN thread_id text CHECK (thread_id <> ''),
    -- When the run went WAITING (NULL when not waiting), and the time it spent waiting so
    -- far: the run's timeout counts it only when the definition says so.
    ADD COLUMN waiting_since timestamptz,
    ADD COLUMN waited_ms bigint NOT NULL DEFAULT 0 CHECK (waited_ms >= 0),
    ADD CONSTRAINT agent_runs_waiting_unleased
        CHECK (status <> 'waiting' OR (lease_owner IS NULL AND waiting_since IS NOT NULL));

-- ListRuns(thread_id), the thread's previous completed run, and the claim's "does this
-- thread have an older queued or an executing run" probe.
CREATE INDEX agent_runs_thread_idx
    ON kb.agent_runs (project_id, thread_id, created_at, id) WHERE thread_id IS NOT NULL;
CREATE INDEX agent_runs_thread_active_idx
    ON kb.agent_runs (project_id, thread_id, status)
    WHERE thread_id IS NOT NULL AND status IN ('queued', 'running', 'waiting');

-- awaiting_approval -> approved (then started -> completed|failed) or rejected (final,
-- never executed).
ALTER TABLE kb.agent_run_tool_calls DROP CONSTRAINT agent_run_tool_calls_status_check;
ALTER TABLE kb.agent_run_tool_calls ADD CONSTRAINT agent_run_tool_calls_status_check
    CHECK (status IN ('started', 'completed', 'failed', 'refused', 'interrupted',
                      'awaiting_approval', 'approved', 'rejected'));
ALTER TABLE kb.agent_run_tool_calls
    -- Past this time an undecided call is decided by the policy (reject or fail the run).
    ADD COLUMN approval_deadline timestamptz,
    -- 'reject' or 'fail': what the deadline does.
    ADD COLUMN approval_on_deadline text CHECK (approval_on_deadline IN ('reject', 'fail')),
    ADD COLUMN decided_at timestamptz,
    -- Who decided: the token id, or 'deadline'.
    ADD COLUMN decided_by text,
    ADD COLUMN decision_reason text,
    -- DecideToolCall's idempotency key and a digest of what it asked, so a replay with
    -- the same key and other arguments is refused.
    ADD COLUMN decision_request_id text,
    ADD COLUMN decision_digest text,
    -- The arguments the model gave, when a person approved edited ones (input holds those).
    ADD COLUMN original_input jsonb,
    -- The parameter schema the model saw for the tool: edited arguments must fit it.
    ADD COLUMN tool_parameters jsonb;

-- The deadline sweep and the "what waits" listing.
CREATE INDEX agent_run_tool_calls_awaiting_idx
    ON kb.agent_run_tool_calls (approval_deadline) WHERE status = 'awaiting_approval';
