-- Back to 0027's outbox trigger, which writes no traceparent.
CREATE OR REPLACE FUNCTION kb.graph_objects_to_outbox() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    kind text := CASE TG_OP WHEN 'INSERT' THEN 'object_created' ELSE 'object_updated' END;
    names text[];
    agents text[];
    source text := nullif(current_setting('agentfleet.source_run_id', true), '');
BEGIN
    -- The dispatcher's types change at every task step and cannot be triggered on
    -- (agentfleet.graph.reserved): their writes skip even the probe.
    IF NEW.type IN ('SpecTask', 'TaskGraph', 'Session', 'TaskGraphAddition', 'SessionMessage', 'Discussion', 'DiscussionEntry') THEN
        RETURN NULL;
    END IF;
    IF TG_OP = 'UPDATE' AND NEW.properties IS NOT DISTINCT FROM OLD.properties THEN
        RETURN NULL;
    END IF;
    IF TG_OP = 'INSERT' THEN
        names := ARRAY['on_object_created:' || NEW.type];
        IF NEW.type = 'Document' THEN
            names := names || 'on_document_ingested'::text;
        END IF;
    ELSE
        names := ARRAY['on_object_updated:' || NEW.type];
    END IF;
    SELECT array_agg(d.name ORDER BY d.name) INTO agents
    FROM kb.agent_definitions d
    WHERE d.project_id = NEW.project_id AND d.trigger = ANY (names)
      AND (jsonb_typeof(d.config -> 'trigger_filter') IS DISTINCT FROM 'object'
           OR NEW.properties @> (d.config -> 'trigger_filter'));
    IF agents IS NULL THEN
        RETURN NULL;
    END IF;
    INSERT INTO kb.trigger_outbox (project_id, kind, object_id, object_type, source_run_id,
                                   agent_names)
    VALUES (NEW.project_id, kind, NEW.id, NEW.type,
            CASE WHEN source ~ '^[0-9a-f-]{36}$' THEN source::uuid END, agents);
    PERFORM pg_notify('agentfleet_trigger_outbox', NEW.project_id);
    RETURN NULL;
END
$$;

DROP INDEX IF EXISTS kb.trigger_outbox_consumed_idx;
ALTER TABLE kb.trigger_outbox DROP COLUMN IF EXISTS traceparent;
