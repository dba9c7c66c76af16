CREATE INDEX agent_runs_queued_idx
    ON kb.agent_runs (created_at, id) WHERE status = 'queued';
DROP INDEX kb.agent_runs_queued_project_idx;
