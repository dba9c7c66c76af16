ALTER TABLE kb.agent_runs DROP COLUMN remote_agent;
DROP TABLE kb.remote_agents;
