DROP INDEX kb.agent_runs_queued_project_idx;
CREATE INDEX agent_runs_queued_project_idx
    ON kb.agent_runs (project_id, depth, created_at, id) WHERE status = 'queued';
