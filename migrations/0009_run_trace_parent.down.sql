ALTER TABLE kb.agent_runs DROP COLUMN trace_parent;
