-- Agents that react (issue 32): an outbox of graph and external events, the firings of
-- triggers, schedules, and what started each run.

-- Every event that may start runs, written in the transaction of what caused it. Graph
-- events come from the trigger on kb.graph_objects below (so plain SQL by any service is
-- covered too), external events from TriggerService.EmitEvent, schedule ticks from the
-- executors' schedule loop. An executor consumes each row once: FOR UPDATE SKIP LOCKED,
-- its runs queued and consumed_at set in one transaction.
CREATE TABLE kb.trigger_outbox (
    id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    project_id     text NOT NULL CHECK (project_id <> ''),
    kind           text NOT NULL
                   CHECK (kind IN ('object_created', 'object_updated', 'event', 'schedule')),
    object_id      uuid,
    object_type    text,
    event_name     text,
    -- Idempotency key of EmitEvent, unique per project.
    request_id     text CHECK (request_id <> ''),
    request_fingerprint text,
    -- An external event's JSON payload (data for the run's input, never a definition).
    payload        jsonb,
    schedule_id    uuid,
    tick_at        timestamptz,
    -- The run whose tool call made the graph write (SET LOCAL agentfleet.source_run_id),
    -- so a triggered run's own writes extend its chain.
    source_run_id  uuid,
    -- A graph event's listeners whose trigger_filter its properties matched at the write
    -- (the consumer reads the object later, when it may have changed again).
    agent_names    text[],
    created_at     timestamptz NOT NULL DEFAULT now(),
    consumed_at    timestamptz,
    CONSTRAINT trigger_outbox_kind_fields CHECK (
        (kind IN ('object_created', 'object_updated')
            AND object_id IS NOT NULL AND object_type IS NOT NULL)
        OR (kind = 'event' AND event_name IS NOT NULL)
        OR (kind = 'schedule' AND schedule_id IS NOT NULL AND tick_at IS NOT NULL))
);

-- The consumers' claim: only unconsumed rows, oldest first; partial, so it stays small.
CREATE INDEX trigger_outbox_pending_idx
    ON kb.trigger_outbox (id) WHERE consumed_at IS NULL;
CREATE UNIQUE INDEX trigger_outbox_request_id_uidx
    ON kb.trigger_outbox (project_id, request_id) WHERE request_id IS NOT NULL;
-- One row per schedule tick, whatever the number of replicas that saw it due.
CREATE UNIQUE INDEX trigger_outbox_schedule_tick_uidx
    ON kb.trigger_outbox (schedule_id, tick_at) WHERE schedule_id IS NOT NULL;

-- Schedules: cron in a time zone, for one agent of a project; made by CreateSchedule, or
-- kept by the trigger below for a definition's config.schedule (definition_id set).
CREATE TABLE kb.trigger_schedules (
    id            uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    project_id    text NOT NULL CHECK (project_id <> ''),
    name          text NOT NULL CHECK (name <> ''),
    agent_name    text NOT NULL CHECK (agent_name <> ''),
    cron          text NOT NULL CHECK (cron <> ''),
    time_zone     text NOT NULL DEFAULT 'UTC',
    input         text NOT NULL DEFAULT '',
    catch_up      text NOT NULL DEFAULT 'skip' CHECK (catch_up IN ('skip', 'one')),
    paused        boolean NOT NULL DEFAULT false,
    -- NULL: not computed yet (a definition's schedule, new or changed): the ticker sets it
    -- to the first tick after now, firing nothing for it.
    next_fire_at  timestamptz,
    definition_id uuid REFERENCES kb.agent_definitions (id) ON DELETE CASCADE,
    last_fire_at  timestamptz,
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT trigger_schedules_project_name_key UNIQUE (project_id, name)
);

-- The ticker's claim: schedules due (or not computed yet), across projects.
CREATE INDEX trigger_schedules_due_idx
    ON kb.trigger_schedules (next_fire_at) WHERE NOT paused;
CREATE UNIQUE INDEX trigger_schedules_definition_uidx
    ON kb.trigger_schedules (definition_id) WHERE definition_id IS NOT NULL;

-- What each trigger did with each event: fired (and the run) or skipped and why.
CREATE TABLE kb.trigger_firings (
    id           uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    project_id   text NOT NULL CHECK (project_id <> ''),
    outbox_id    bigint NOT NULL,
    agent_name   text NOT NULL CHECK (agent_name <> ''),
    trigger      text NOT NULL,
    outcome      text NOT NULL CHECK (outcome IN ('fired', 'skipped')),
    reason       text,
    run_id       uuid REFERENCES kb.agent_runs (id) ON DELETE SET NULL,
    object_id    uuid,
    event_name   text,
    schedule_id  uuid,
    chain_depth  integer NOT NULL DEFAULT 1 CHECK (chain_depth >= 1),
    created_at   timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT trigger_firings_reason CHECK ((outcome = 'skipped') = (reason IS NOT NULL))
);

-- Exactly once: an event fires each agent at most once, whatever a consumer retried.
CREATE UNIQUE INDEX trigger_firings_outbox_agent_uidx
    ON kb.trigger_firings (outbox_id, agent_name);
-- ListTriggerFirings pages, and the per-minute cap's count.
CREATE INDEX trigger_firings_project_created_idx
    ON kb.trigger_firings (project_id, created_at DESC, id DESC);
CREATE INDEX trigger_firings_run_idx
    ON kb.trigger_firings (run_id) WHERE run_id IS NOT NULL;

-- The graph trigger's lookup: does any agent of this project listen for this event?
CREATE INDEX agent_definitions_trigger_idx
    ON kb.agent_definitions (project_id, trigger) WHERE trigger IS NOT NULL;

-- What started a run, and how deep in a chain of triggered runs it is.
ALTER TABLE kb.agent_runs
    ADD COLUMN started_by text NOT NULL DEFAULT 'rpc'
        CHECK (started_by IN ('rpc', 'trigger', 'schedule', 'event', 'parent', 'task')),
    ADD COLUMN trigger_origin jsonb,
    ADD COLUMN chain_depth integer NOT NULL DEFAULT 0 CHECK (chain_depth >= 0);

UPDATE kb.agent_runs SET started_by = 'task' WHERE task_id IS NOT NULL;
UPDATE kb.agent_runs SET started_by = 'parent' WHERE parent_run_id IS NOT NULL AND task_id IS NULL;

-- ListRuns(started_by=...) pages, and the per-project cap on queued trigger runs.
CREATE INDEX agent_runs_project_started_by_created_idx
    ON kb.agent_runs (project_id, started_by, created_at DESC, id DESC);
CREATE INDEX agent_runs_queued_triggered_idx
    ON kb.agent_runs (project_id) WHERE status = 'queued' AND chain_depth > 0;

-- The outbox row of a graph write, only when some agent of the project listens for it and
-- its filter matches (one index probe per write; SpecTask churn writes nothing: the
-- dispatcher's types cannot be triggered on).
CREATE FUNCTION kb.graph_objects_to_outbox() RETURNS trigger
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

CREATE TRIGGER graph_objects_to_outbox
    AFTER INSERT OR UPDATE ON kb.graph_objects
    FOR EACH ROW EXECUTE FUNCTION kb.graph_objects_to_outbox();

-- A definition's config.schedule (checked by the registry at write time) is its schedule
-- row, named agent:<name> (a name CreateSchedule cannot give): kept in step by every write
-- of the definition, removed with the schedule or the definition (cascade). A changed cron
-- or zone is computed again by the ticker.
CREATE FUNCTION kb.agent_definitions_schedule() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    wanted jsonb := NEW.config -> 'schedule';
BEGIN
    IF jsonb_typeof(wanted) IS DISTINCT FROM 'object' THEN
        DELETE FROM kb.trigger_schedules WHERE definition_id = NEW.id;
        RETURN NULL;
    END IF;
    INSERT INTO kb.trigger_schedules AS s (project_id, name, agent_name, cron, time_zone,
                                           input, catch_up, next_fire_at, definition_id)
    VALUES (NEW.project_id, 'agent:' || NEW.name, NEW.name, wanted ->> 'cron',
            coalesce(wanted ->> 'time_zone', 'UTC'), coalesce(wanted ->> 'input', ''),
            coalesce(wanted ->> 'catch_up', 'skip'), NULL, NEW.id)
    ON CONFLICT (definition_id) WHERE definition_id IS NOT NULL DO UPDATE
    SET name = excluded.name, agent_name = excluded.agent_name, cron = excluded.cron,
        time_zone = excluded.time_zone, input = excluded.input, catch_up = excluded.catch_up,
        next_fire_at = CASE WHEN (s.cron, s.time_zone) IS NOT DISTINCT FROM
                                 (excluded.cron, excluded.time_zone)
                            THEN s.next_fire_at END,
        updated_at = now();
    RETURN NULL;
END
$$;

CREATE TRIGGER agent_definitions_schedule
    AFTER INSERT OR UPDATE OF config, name ON kb.agent_definitions
    FOR EACH ROW EXECUTE FUNCTION kb.agent_definitions_schedule();
