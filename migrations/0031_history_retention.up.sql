-- History retention (issue #36): finished run trees older than a project's retention are
-- deleted by the executor's prune job (services.executor.retention) in small batches.
--
-- keep_days per project overrides the deployment's AGENTFLEET_HISTORY_RETENTION_DAYS;
-- 0 keeps the project's history forever.
CREATE TABLE kb.project_retention (
    project_id text PRIMARY KEY,
    keep_days integer NOT NULL CHECK (keep_days BETWEEN 0 AND 36500),
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- The prune's walk: a project's finished top-level runs, oldest end first, so a batch is
-- the head of one index range rather than a scan of the project's history.
CREATE INDEX agent_runs_prune_idx
    ON kb.agent_runs (project_id, completed_at, id)
    WHERE depth = 0 AND completed_at IS NOT NULL;
