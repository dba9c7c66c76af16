-- A task graph's status (TaskGraphStatus) is derived from its tasks: ListTaskGraphs with a
-- status filter read every graph of the project and all their task counts to fill one page.
-- The derived status is now kept per graph in kb.task_graph_states, in the transaction that
-- changes what it is derived from, so a filtered page is an index range of the page's size.
--
-- The rule exists once, as kb.task_graph_status(); the dispatcher reads the kept value for
-- every view (GetTaskGraph, ListTaskGraphs, WatchTaskGraph) and no longer derives it itself.

-- The status of the task graph (project, graph) whose own status column is own_status:
--   CANCELLED  the graph was cancelled (CancelTaskGraph);
--   ACTIVE     a task is in progress, or pending with every blocker completed (available);
--   COMPLETED  it has tasks and every one is completed;
--   FAILED     none of the above and a task failed;
--   PAUSED     none of the above and a task is paused;
--   ACTIVE     otherwise (no tasks yet; only tasks that wait on cancelled ones).
-- Each test is an EXISTS that stops at its first row: a running graph is ACTIVE on its first
-- in-progress task, whatever its size.
CREATE FUNCTION kb.task_graph_status(project text, graph uuid, own_status text) RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT CASE
        WHEN own_status = 'cancelled' THEN 'cancelled'
        WHEN EXISTS (
            SELECT 1 FROM kb.graph_objects t
            WHERE t.project_id = project AND t.type = 'SpecTask'
              AND t.properties ->> 'graph_id' = graph::text AND t.status = 'in_progress')
          OR EXISTS (
            SELECT 1 FROM kb.graph_objects t
            WHERE t.project_id = project AND t.type = 'SpecTask'
              AND t.properties ->> 'graph_id' = graph::text AND t.status = 'pending'
              AND NOT EXISTS (
                  SELECT 1 FROM kb.graph_relationships r JOIN kb.graph_objects b ON b.id = r.src_id
                  WHERE r.project_id = t.project_id AND r.dst_id = t.id AND r.type = 'blocks'
                    AND b.status IS DISTINCT FROM 'completed'))
          THEN 'active'
        WHEN NOT EXISTS (
            SELECT 1 FROM kb.graph_objects t
            WHERE t.project_id = project AND t.type = 'SpecTask'
              AND t.properties ->> 'graph_id' = graph::text
              AND t.status IS DISTINCT FROM 'completed')
          THEN CASE WHEN EXISTS (
                   SELECT 1 FROM kb.graph_objects t
                   WHERE t.project_id = project AND t.type = 'SpecTask'
                     AND t.properties ->> 'graph_id' = graph::text)
               THEN 'completed' ELSE 'active' END
        WHEN EXISTS (
            SELECT 1 FROM kb.graph_objects t
            WHERE t.project_id = project AND t.type = 'SpecTask'
              AND t.properties ->> 'graph_id' = graph::text AND t.status = 'failed')
          THEN 'failed'
        WHEN EXISTS (
            SELECT 1 FROM kb.graph_objects t
            WHERE t.project_id = project AND t.type = 'SpecTask'
              AND t.properties ->> 'graph_id' = graph::text AND t.status = 'paused')
          THEN 'paused'
        ELSE 'active' END
$$;

-- One row per TaskGraph object, removed with it. created_at is the graph's (the listing's
-- keyset), project_id and created_at are copied so that a page is one index range.
CREATE TABLE kb.task_graph_states (
    graph_id    uuid PRIMARY KEY REFERENCES kb.graph_objects (id) ON DELETE CASCADE,
    project_id  text NOT NULL,
    created_at  timestamptz NOT NULL,
    status      text NOT NULL
        CHECK (status IN ('active', 'completed', 'failed', 'paused', 'cancelled'))
);

-- ListTaskGraphs: a project's graphs of one status, newest first, keyset (created_at, id).
CREATE INDEX task_graph_states_page_idx
    ON kb.task_graph_states (project_id, status, created_at, graph_id);

-- Keeping it. A status depends on the graph's own status, its tasks' statuses and, through
-- "available", the blocks edges into its pending tasks and their blockers' statuses. Every
-- row change that can move one of those names the graphs it touches (immediate row
-- triggers, below), and at commit those graphs are recomputed (a deferred trigger).
--
-- Why at commit, under a lock: two transactions that each complete one of a graph's last two
-- tasks would each see the other's task still in progress and both keep ACTIVE. So the
-- recomputation locks the graphs' rows first (in id order) and then reads with a fresh
-- snapshot (read committed: each statement of a volatile function takes one), after every
-- transaction that held those rows committed. Taking the locks only at commit means a
-- transaction never waits for a task row while holding one of them (no deadlock with the
-- claim, CancelTaskGraph or AddTasks, which lock graph and task rows mid-transaction), and
-- holds them only for the recomputation itself. (A TaskGraph deleted takes its row with it at
-- once, through the foreign key: graphs are deleted by single statements, not mid-work.)
--
-- The graphs touched are collected in a transaction-local setting (no table writes), as
-- space-separated ids; a savepoint rolled back takes its additions with it.

-- The graph a TaskGraph or SpecTask row belongs to (NULL for other rows and for a graph_id
-- that no graph's id::text equals: such a task counts for no graph).
CREATE FUNCTION kb.task_graph_of(o kb.graph_objects) RETURNS uuid
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE
        WHEN o.type = 'TaskGraph' THEN o.id
        WHEN o.type = 'SpecTask'
             AND o.properties ->> 'graph_id'
                 ~ '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$'
          THEN (o.properties ->> 'graph_id')::uuid
    END
$$;

CREATE FUNCTION kb.task_graph_states_touch() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    touched text := coalesce(current_setting('agentfleet.task_graphs_touched', true), '');
    graphs uuid[];
    graph uuid;
BEGIN
    IF TG_TABLE_NAME = 'graph_objects' THEN
        IF TG_OP IN ('INSERT', 'UPDATE') THEN
            graphs := ARRAY[kb.task_graph_of(NEW)];
        END IF;
        IF TG_OP IN ('UPDATE', 'DELETE') THEN
            graphs := graphs || kb.task_graph_of(OLD);
        END IF;
        -- A blocker that becomes completed, or stops being so, changes whether its
        -- dependents are available. (Inserted objects have no edges yet; a deleted one's
        -- edges are deleted with it, and the edge trigger sees them.)
        IF TG_OP = 'UPDATE' AND coalesce(OLD.status = 'completed', false)
                              <> coalesce(NEW.status = 'completed', false) THEN
            graphs := graphs || ARRAY(
                SELECT kb.task_graph_of(d)
                FROM kb.graph_relationships r JOIN kb.graph_objects d ON d.id = r.dst_id
                WHERE r.project_id = NEW.project_id AND r.src_id = NEW.id
                  AND r.type = 'blocks');
        END IF;
    ELSE
        IF TG_OP IN ('INSERT', 'UPDATE') AND NEW.type = 'blocks' THEN
            graphs := ARRAY(SELECT kb.task_graph_of(d) FROM kb.graph_objects d
                            WHERE d.id = NEW.dst_id);
        END IF;
        IF TG_OP IN ('UPDATE', 'DELETE') AND OLD.type = 'blocks' THEN
            graphs := graphs || ARRAY(SELECT kb.task_graph_of(d) FROM kb.graph_objects d
                                      WHERE d.id = OLD.dst_id);
        END IF;
    END IF;
    FOREACH graph IN ARRAY coalesce(graphs, '{}') LOOP
        IF graph IS NOT NULL AND strpos(touched, graph::text) = 0 THEN
            touched := touched || ' ' || graph::text;
        END IF;
    END LOOP;
    PERFORM set_config('agentfleet.task_graphs_touched', touched, true);
    RETURN NULL;
END
$$;

CREATE FUNCTION kb.task_graph_states_settle() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    graphs uuid[] := string_to_array(
        btrim(current_setting('agentfleet.task_graphs_touched', true)), ' ')::uuid[];
BEGIN
    -- The first deferred event of the transaction does the work for all of them.
    IF coalesce(cardinality(graphs), 0) = 0 THEN
        RETURN NULL;
    END IF;
    PERFORM set_config('agentfleet.task_graphs_touched', '', true);
    PERFORM 1 FROM kb.task_graph_states s
    WHERE s.graph_id = ANY (graphs) ORDER BY s.graph_id FOR UPDATE;
    INSERT INTO kb.task_graph_states AS s (graph_id, project_id, created_at, status)
    SELECT g.id, g.project_id, g.created_at, kb.task_graph_status(g.project_id, g.id, g.status)
    FROM kb.graph_objects g
    WHERE g.id = ANY (graphs) AND g.type = 'TaskGraph'
    ON CONFLICT (graph_id) DO UPDATE
    SET project_id = excluded.project_id, created_at = excluded.created_at,
        status = excluded.status
    WHERE (s.project_id, s.created_at, s.status)
          IS DISTINCT FROM (excluded.project_id, excluded.created_at, excluded.status);
    -- A graph whose object stopped being a TaskGraph (its type was changed) has no status.
    DELETE FROM kb.task_graph_states s
    WHERE s.graph_id = ANY (graphs)
      AND NOT EXISTS (SELECT 1 FROM kb.graph_objects g
                      WHERE g.id = s.graph_id AND g.type = 'TaskGraph');
    RETURN NULL;
END
$$;

-- Whether an update of a graph_objects row changes what a graph's status is derived from:
-- the status (a task's own, a blocker's, a graph's cancellation), the graph_id property, what
-- makes the row a task of a graph, or the graph's created_at (copied for the listing).
CREATE FUNCTION kb.task_graph_input_changed(o kb.graph_objects, n kb.graph_objects)
RETURNS boolean LANGUAGE sql IMMUTABLE AS $$
    SELECT o.status IS DISTINCT FROM n.status
        OR (o.properties ->> 'graph_id') IS DISTINCT FROM (n.properties ->> 'graph_id')
        OR (o.id, o.type, o.project_id, o.created_at)
           IS DISTINCT FROM (n.id, n.type, n.project_id, n.created_at)
$$;

-- Row changes that touch graphs: a TaskGraph or SpecTask inserted, a SpecTask deleted (a
-- TaskGraph's row goes with it), an update that changes an input, any edge change.
CREATE TRIGGER task_graph_states_insert
    AFTER INSERT ON kb.graph_objects
    FOR EACH ROW WHEN (NEW.type IN ('TaskGraph', 'SpecTask'))
    EXECUTE FUNCTION kb.task_graph_states_touch();
CREATE TRIGGER task_graph_states_update
    AFTER UPDATE ON kb.graph_objects
    FOR EACH ROW WHEN (kb.task_graph_input_changed(OLD, NEW))
    EXECUTE FUNCTION kb.task_graph_states_touch();
CREATE TRIGGER task_graph_states_delete
    AFTER DELETE ON kb.graph_objects
    FOR EACH ROW WHEN (OLD.type = 'SpecTask')
    EXECUTE FUNCTION kb.task_graph_states_touch();
CREATE TRIGGER task_graph_states_edges
    AFTER INSERT OR UPDATE OR DELETE ON kb.graph_relationships
    FOR EACH ROW EXECUTE FUNCTION kb.task_graph_states_touch();

-- The same events, deferred to commit (constraint triggers are per row: all but the first
-- find nothing left to do).
CREATE CONSTRAINT TRIGGER task_graph_states_settle_insert
    AFTER INSERT ON kb.graph_objects DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW WHEN (NEW.type IN ('TaskGraph', 'SpecTask'))
    EXECUTE FUNCTION kb.task_graph_states_settle();
CREATE CONSTRAINT TRIGGER task_graph_states_settle_update
    AFTER UPDATE ON kb.graph_objects DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW WHEN (kb.task_graph_input_changed(OLD, NEW))
    EXECUTE FUNCTION kb.task_graph_states_settle();
CREATE CONSTRAINT TRIGGER task_graph_states_settle_delete
    AFTER DELETE ON kb.graph_objects DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW WHEN (OLD.type = 'SpecTask')
    EXECUTE FUNCTION kb.task_graph_states_settle();
CREATE CONSTRAINT TRIGGER task_graph_states_settle_edges
    AFTER INSERT OR UPDATE OR DELETE ON kb.graph_relationships DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW EXECUTE FUNCTION kb.task_graph_states_settle();

-- The graphs that exist now (the triggers above hold off writers until this commits).
INSERT INTO kb.task_graph_states (graph_id, project_id, created_at, status)
SELECT g.id, g.project_id, g.created_at, kb.task_graph_status(g.project_id, g.id, g.status)
FROM kb.graph_objects g
WHERE g.type = 'TaskGraph';
