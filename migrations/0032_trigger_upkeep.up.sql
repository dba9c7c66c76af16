-- Triggers' upkeep (issue 32): the writer's trace context on each outbox row, so the run a
-- write triggers joins the writer's trace; and the index the history service's prune of
-- consumed rows walks (services/history/trigger_prune.py).

-- W3C traceparent of the span that wrote the event: a graph write names it with
-- set_config('agentfleet.traceparent', ..., true) in its transaction, EmitEvent from its
-- RPC's span. Anything else (plain SQL that sets nothing, or sets something malformed) is
-- NULL: the value reaches the triggered run's trace_parent, so only the W3C form is kept.
ALTER TABLE kb.trigger_outbox
    ADD COLUMN traceparent text
        CHECK (traceparent ~ '^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$');

-- The prune's walk: consumed rows, oldest consumption first (the pending index covers the
-- others). Partial, as the pending one, so each row is in exactly one of the two.
CREATE INDEX trigger_outbox_consumed_idx
    ON kb.trigger_outbox (consumed_at, id) WHERE consumed_at IS NOT NULL;

CREATE OR REPLACE FUNCTION kb.graph_objects_to_outbox() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    kind text := CASE TG_OP WHEN 'INSERT' THEN 'object_created' ELSE 'object_updated' END;
    names text[];
    agents text[];
    source text := nullif(current_setting('agentfleet.source_run_id', true), '');
    parent text := nullif(current_setting('agentfleet.traceparent', true), '');
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
                                   agent_names, traceparent)
    VALUES (NEW.project_id, kind, NEW.id, NEW.type,
            CASE WHEN source ~ '^[0-9a-f-]{36}$' THEN source::uuid END, agents,
            CASE WHEN parent ~ '^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$'
                 THEN parent END);
    PERFORM pg_notify('agentfleet_trigger_outbox', NEW.project_id);
    RETURN NULL;
END
$$;
