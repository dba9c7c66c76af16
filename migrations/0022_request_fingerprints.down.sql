-- The older schema replays a request_id whatever the repeat asks.
ALTER TABLE kb.product_install_requests DROP COLUMN request_fingerprint;
ALTER TABLE kb.agent_run_resume_requests DROP COLUMN request_fingerprint;
ALTER TABLE kb.agent_runs DROP COLUMN request_fingerprint;
