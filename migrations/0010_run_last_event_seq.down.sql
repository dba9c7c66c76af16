ALTER TABLE kb.agent_runs DROP COLUMN last_event_seq;
