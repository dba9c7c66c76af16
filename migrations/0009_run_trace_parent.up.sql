-- The W3C traceparent of the span that spawned a child run (the parent's spawn_agents or
-- flow span), so the child's run span descends from it on whichever executor runs it and
-- the whole run tree is one trace (DESIGN §10). Null for top-level runs.
ALTER TABLE kb.agent_runs
    ADD COLUMN trace_parent text CHECK (trace_parent ~ '^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$');
