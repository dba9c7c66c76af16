-- TriggerRun/StartRun of one project took turns on an advisory lock held from before the
-- queued-runs count (up to AGENTFLEET_MAX_QUEUED_PER_PROJECT index entries read) through
-- the insert, its event and the commit: 64-89 runs/s accepted per project (issue #36).
--
-- The cap is now admitted on per-project counters, split in up to 16 shards so that
-- concurrent enqueues of one project lock different rows. The cap is divided among the
-- shards (kb.run_queue_quota); every run records the shard it counts in (queue_shard).
-- Every change to the number of a project's queued capped runs (caps.capped: depth 0 or a
-- task's run) is written by a trigger as a +1/-1 row of kb.run_queue_deltas for the run's
-- shard, an append without locks, so a claim, a cancel or a requeue never waits on an
-- enqueue (nor enqueues on them).
--
-- An enqueue inserts its run in a random shard, then calls kb.admit_queued_run() as its
-- last statement: it locks that shard's counter, folds the shard's committed deltas into it
-- (its own +1 included) and admits the run when the shard is within its quota. Otherwise
-- (the shard full, or the cap near) it rolls that attempt back and locks every shard of the
-- project in order, folds them all, and admits the run only when the project's total is
-- within the cap, moving it to a shard with room. The lock(s) are held for that statement
-- and the commit, not the whole transaction.
--
-- Exact: every admitted run leaves its shard within its quota (checked under the shard's
-- lock), so the project's total never passes the sum of the quotas, the cap; a refusal
-- counts every shard under its lock. The folds read deltas in a snapshot taken after the
-- lock, so every run committed before is counted; a dequeue not yet committed still counts
-- as queued (refusing early, never admitting past the cap), as with the count it replaces.

ALTER TABLE kb.agent_runs ADD COLUMN queue_shard smallint NOT NULL DEFAULT 0
    CHECK (queue_shard BETWEEN 0 AND 15);

CREATE TABLE kb.run_queue_counts (
    project_id text NOT NULL,
    shard smallint NOT NULL CHECK (shard BETWEEN 0 AND 15),
    queued integer NOT NULL DEFAULT 0,
    PRIMARY KEY (project_id, shard)
);

CREATE TABLE kb.run_queue_deltas (
    project_id text NOT NULL,
    shard smallint NOT NULL,
    delta smallint NOT NULL
);
CREATE INDEX run_queue_deltas_project_idx ON kb.run_queue_deltas (project_id, shard);

-- Existing queued runs all count in shard 0 (over its quota if need be: an admission then
-- takes the exact path until the queue drains).
INSERT INTO kb.run_queue_counts (project_id, shard, queued)
SELECT project_id, 0, count(*) FROM kb.agent_runs
WHERE status = 'queued' AND (depth = 0 OR task_id IS NOT NULL)
GROUP BY project_id;

-- Shard s's share of a cap: the cap spread over least(16, cap) shards, the first ones one
-- more; 0 for the shards past those.
CREATE FUNCTION kb.run_queue_quota(s integer, cap integer) RETURNS integer
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN s >= least(16, cap) THEN 0
                ELSE cap / least(16, cap) + (s < cap % least(16, cap))::integer END
$$;

-- +1 when a run starts counting (queued and capped), -1 when it stops: its status changes,
-- or a queued task run under a parent loses its task_id (the task deleted, ON DELETE SET
-- NULL) and with it its place under the cap.
CREATE FUNCTION kb.note_run_queue_delta() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        INSERT INTO kb.run_queue_deltas VALUES (OLD.project_id, OLD.queue_shard, -1);
    ELSIF TG_OP = 'INSERT'
          OR (NEW.status = 'queued' AND (NEW.depth = 0 OR NEW.task_id IS NOT NULL)) THEN
        INSERT INTO kb.run_queue_deltas VALUES (NEW.project_id, NEW.queue_shard, 1);
    ELSE
        INSERT INTO kb.run_queue_deltas VALUES (NEW.project_id, NEW.queue_shard, -1);
    END IF;
    RETURN NULL;
END
$$;

-- The WHEN clauses are evaluated without calling the function: a step's UPDATE of its run
-- (status unchanged) costs nothing here.
CREATE TRIGGER agent_runs_queue_insert AFTER INSERT ON kb.agent_runs
FOR EACH ROW WHEN (NEW.status = 'queued' AND (NEW.depth = 0 OR NEW.task_id IS NOT NULL))
EXECUTE FUNCTION kb.note_run_queue_delta();

CREATE TRIGGER agent_runs_queue_status AFTER UPDATE OF status, task_id ON kb.agent_runs
FOR EACH ROW WHEN ((OLD.status = 'queued' AND (OLD.depth = 0 OR OLD.task_id IS NOT NULL))
                   IS DISTINCT FROM
                   (NEW.status = 'queued' AND (NEW.depth = 0 OR NEW.task_id IS NOT NULL)))
EXECUTE FUNCTION kb.note_run_queue_delta();

CREATE TRIGGER agent_runs_queue_delete AFTER DELETE ON kb.agent_runs
FOR EACH ROW WHEN (OLD.status = 'queued' AND (OLD.depth = 0 OR OLD.task_id IS NOT NULL))
EXECUTE FUNCTION kb.note_run_queue_delta();

-- Whether the caller's run (just inserted, counted in shard `own`) fits the project's cap,
-- with the counters it read locked until the caller's transaction ends. Each statement of
-- a VOLATILE plpgsql function takes its own snapshot (read committed), so a fold sees what
-- committed while the call waited for the lock. The first attempt runs in a subtransaction
-- (the BEGIN ... EXCEPTION block): rolled back, it releases its shard's lock, so the exact
-- path never holds a lock out of shard order (no deadlock between admissions).
CREATE FUNCTION kb.admit_queued_run(project text, run uuid, own smallint, cap integer)
RETURNS boolean
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    now_queued integer;
    total integer;
    room smallint;
BEGIN
    BEGIN
        INSERT INTO kb.run_queue_counts AS c (project_id, shard) VALUES (project, own)
        ON CONFLICT (project_id, shard) DO UPDATE SET queued = c.queued;
        WITH gone AS (
            DELETE FROM kb.run_queue_deltas d
            WHERE d.project_id = project AND d.shard = own RETURNING d.delta)
        UPDATE kb.run_queue_counts
        SET queued = queued + (SELECT coalesce(sum(delta), 0) FROM gone)
        WHERE project_id = project AND shard = own
        RETURNING queued INTO now_queued;
        IF now_queued <= kb.run_queue_quota(own, cap) THEN
            RETURN true;
        END IF;
        RAISE EXCEPTION USING ERRCODE = 'AFQ01';
    EXCEPTION WHEN SQLSTATE 'AFQ01' THEN
        NULL;  -- the shard is full: count the whole project
    END;
    INSERT INTO kb.run_queue_counts (project_id, shard)
    SELECT project, s FROM generate_series(0, 15) s
    ON CONFLICT (project_id, shard) DO NOTHING;
    PERFORM 1 FROM kb.run_queue_counts WHERE project_id = project ORDER BY shard FOR UPDATE;
    WITH gone AS (
        DELETE FROM kb.run_queue_deltas d WHERE d.project_id = project
        RETURNING d.shard, d.delta),
    sums AS (SELECT shard, sum(delta) AS delta FROM gone GROUP BY shard)
    UPDATE kb.run_queue_counts c SET queued = c.queued + sums.delta
    FROM sums WHERE c.project_id = project AND c.shard = sums.shard;
    SELECT sum(queued) INTO total FROM kb.run_queue_counts WHERE project_id = project;
    IF total > cap THEN
        RETURN false;
    END IF;
    SELECT queued INTO now_queued FROM kb.run_queue_counts
    WHERE project_id = project AND shard = own;
    IF now_queued <= kb.run_queue_quota(own, cap) THEN
        RETURN true;
    END IF;
    -- Within the cap, so some shard is below its quota: the run counts there instead.
    SELECT shard INTO room FROM kb.run_queue_counts
    WHERE project_id = project AND queued < kb.run_queue_quota(shard, cap)
    ORDER BY shard LIMIT 1;
    UPDATE kb.run_queue_counts SET queued = queued - 1 WHERE project_id = project AND shard = own;
    UPDATE kb.run_queue_counts SET queued = queued + 1 WHERE project_id = project AND shard = room;
    UPDATE kb.agent_runs SET queue_shard = room WHERE project_id = project AND id = run;
    RETURN true;
END
$$;
