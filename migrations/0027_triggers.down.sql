DROP TRIGGER IF EXISTS agent_definitions_schedule ON kb.agent_definitions;
DROP FUNCTION IF EXISTS kb.agent_definitions_schedule();
DROP TRIGGER IF EXISTS graph_objects_to_outbox ON kb.graph_objects;
DROP FUNCTION IF EXISTS kb.graph_objects_to_outbox();
DROP INDEX IF EXISTS kb.agent_runs_queued_triggered_idx;
DROP INDEX IF EXISTS kb.agent_runs_project_started_by_created_idx;
ALTER TABLE kb.agent_runs
    DROP COLUMN IF EXISTS chain_depth,
    DROP COLUMN IF EXISTS trigger_origin,
    DROP COLUMN IF EXISTS started_by;
DROP INDEX IF EXISTS kb.agent_definitions_trigger_idx;
DROP TABLE IF EXISTS kb.trigger_firings;
DROP TABLE IF EXISTS kb.trigger_schedules;
DROP TABLE IF EXISTS kb.trigger_outbox;
