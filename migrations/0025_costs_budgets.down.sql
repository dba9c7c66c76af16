DROP TABLE kb.project_usage;
DROP TABLE kb.project_budgets;
ALTER TABLE kb.agent_run_messages DROP COLUMN cost_nanos, DROP COLUMN model_name;
ALTER TABLE kb.agent_runs DROP COLUMN max_tree_cost_nanos, DROP COLUMN cost_total_tree_nanos,
    DROP COLUMN cost_nanos;
