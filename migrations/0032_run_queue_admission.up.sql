-- TriggerRun/StartRun of one project took turns on an advisory lock held from before the
-- queued-runs count (up to AGENTFLEET_MAX_QUEUED_PER_PROJECT index entries read) through
-- the insert, its event and the commit: 64-89 runs/s accepted per project (issue #36).
--
-- The cap is now admitted on a per-project counter. Every change to the number of a
-- project's queued capped runs (caps.capped: depth 0 or a task's run) is written by a
-- trigger as a +1/-1 row of kb.run_queue_deltas, an append without locks, so a claim, a
-- cancel or a requeue never waits on an enqueue (nor enqueues on them). An enqueue inserts
-- its run first, then calls kb.admit_queued_run() as its last statement: it locks the
-- project's kb.run_queue_counts row, folds the deltas committed so far into it (its own +1
-- included) and returns the count; past the cap the caller rolls back. The lock is held
-- for that one statement and the commit, not the whole transaction.
--
-- Exact: admissions of a project are serialised on the counter row, and the fold reads
-- deltas in a snapshot taken after the lock, so every admitted run committed before is in
-- the count; a dequeue not yet committed still counts as queued (refusing early, never
-- admitting past the cap), as with the count it replaces.

CREATE TABLE kb.run_queue_counts (
    project_id text PRIMARY KEY,
    queued integer NOT NULL DEFAULT 0
);

CREATE TABLE kb.run_queue_deltas (
    project_id text NOT NULL,
    delta smallint NOT NULL
);
CREATE INDEX run_queue_deltas_project_idx ON kb.run_queue_deltas (project_id);

INSERT INTO kb.run_queue_counts (project_id, queued)
SELECT project_id, count(*) FROM kb.agent_runs
WHERE status = 'queued' AND (depth = 0 OR task_id IS NOT NULL)
GROUP BY project_id;

CREATE FUNCTION kb.note_run_queue_delta() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        INSERT INTO kb.run_queue_deltas VALUES (OLD.project_id, -1);
    ELSIF TG_OP = 'INSERT' OR NEW.status = 'queued' THEN
        INSERT INTO kb.run_queue_deltas VALUES (NEW.project_id, 1);
    ELSE
        INSERT INTO kb.run_queue_deltas VALUES (NEW.project_id, -1);
    END IF;
    RETURN NULL;
END
$$;

-- The WHEN clauses are evaluated without calling the function: a step's UPDATE of its run
-- (status unchanged) costs nothing here.
CREATE TRIGGER agent_runs_queue_insert AFTER INSERT ON kb.agent_runs
FOR EACH ROW WHEN (NEW.status = 'queued' AND (NEW.depth = 0 OR NEW.task_id IS NOT NULL))
EXECUTE FUNCTION kb.note_run_queue_delta();

CREATE TRIGGER agent_runs_queue_status AFTER UPDATE OF status ON kb.agent_runs
FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status
                   AND (OLD.status = 'queued' OR NEW.status = 'queued')
                   AND (NEW.depth = 0 OR NEW.task_id IS NOT NULL))
EXECUTE FUNCTION kb.note_run_queue_delta();

CREATE TRIGGER agent_runs_queue_delete AFTER DELETE ON kb.agent_runs
FOR EACH ROW WHEN (OLD.status = 'queued' AND (OLD.depth = 0 OR OLD.task_id IS NOT NULL))
EXECUTE FUNCTION kb.note_run_queue_delta();

-- The project's queued capped runs once every delta committed before this call (and the
-- caller's own) is folded in, with the project's counter row locked until the caller's
-- transaction ends. Each statement of a VOLATILE plpgsql function takes its own snapshot
-- (read committed), so the fold sees what committed while this call waited for the lock.
CREATE FUNCTION kb.admit_queued_run(project text) RETURNS integer
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    folded integer;
    now_queued integer;
BEGIN
    INSERT INTO kb.run_queue_counts AS c (project_id) VALUES (project)
    ON CONFLICT (project_id) DO UPDATE SET queued = c.queued;
    WITH gone AS (DELETE FROM kb.run_queue_deltas WHERE project_id = project RETURNING delta)
    SELECT coalesce(sum(delta), 0) INTO folded FROM gone;
    UPDATE kb.run_queue_counts SET queued = queued + folded
    WHERE project_id = project
    RETURNING queued INTO now_queued;
    RETURN now_queued;
END
$$;
