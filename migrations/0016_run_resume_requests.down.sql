-- The older schema finds a resume's request_id in the STATUS_CHANGED reason, still written.
DROP TABLE kb.agent_run_resume_requests;
