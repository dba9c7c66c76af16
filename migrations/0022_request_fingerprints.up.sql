-- AIP-155 request_id reuse: beside each stored request_id, the sha256 (hex) of what that
-- request asked (agentfleet.request_ids.request_fingerprint). A repeat with the same id
-- replays the first answer only when its fingerprint is the same; another request under the
-- id is refused. Rows stored before this migration keep NULL, and NULL is treated as the
-- same request (their replay stays what it was). Nullable columns without a default: no
-- table rewrite. CreateTaskGraph and AddTasks keep theirs in the properties of the graph
-- object and of the addition marker that hold their request_id.
ALTER TABLE kb.agent_runs
    ADD COLUMN request_fingerprint text CHECK (request_fingerprint ~ '^[0-9a-f]{64}$');
ALTER TABLE kb.agent_run_resume_requests
    ADD COLUMN request_fingerprint text CHECK (request_fingerprint ~ '^[0-9a-f]{64}$');
ALTER TABLE kb.product_install_requests
    ADD COLUMN request_fingerprint text CHECK (request_fingerprint ~ '^[0-9a-f]{64}$');
