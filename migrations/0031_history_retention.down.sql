DROP INDEX kb.agent_runs_prune_idx;
DROP TABLE kb.project_retention;
