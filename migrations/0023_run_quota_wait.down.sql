ALTER TABLE kb.agent_runs DROP COLUMN quota_wait, DROP COLUMN quota_wait_since;
