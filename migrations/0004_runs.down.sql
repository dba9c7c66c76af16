DROP TABLE kb.agent_run_events;
DROP TABLE kb.agent_run_tool_calls;
DROP TABLE kb.agent_run_messages;
DROP TABLE kb.agent_runs;
DROP FUNCTION kb.agent_runs_default_root();
