-- An enqueue's admission to its project's queued-runs cap moves into the insert statement
-- (issue #36), so that concurrent enqueues are one statement each and commit together
-- (services/executor/store/group_commit.py) instead of a transaction each.
--
-- kb.admit_queued_run (migration 0030) runs after the insert and counts the run's own +1
-- delta, written by the insert's trigger at the end of the insert statement: the two could
-- not be one statement. kb.admit_new_run runs before the insert, in the same statement (its
-- result is the row's queue_shard), and counts the run it admits as the +1 its trigger is
-- about to write. Everything else is as in 0030: the folds read deltas in snapshots taken
-- after their locks (each statement of this VOLATILE function takes its own), and the
-- counter(s) stay locked until the enqueue commits, so an admission after it counts its
-- delta. Two admissions in one transaction (a group) are exact too: the second's fold sees
-- the first's delta, its own transaction's.
--
-- `may_wait`: whether a full shard may lock every shard of the project (the exact path).
-- A group takes its shards' locks in (project, shard) order, so groups never wait on each
-- other in a cycle; locking every shard from 0 while the group holds a later one could.
-- Without may_wait (a group's write, and every first attempt of a write alone) the run's
-- shard is the only one tried, outside any subtransaction: a full shard raises AFQ02, which
-- fails the statement and so holds nothing, and the caller admits the run again alone with
-- may_wait. With may_wait (a caller inside a transaction of its own, which cannot go again)
-- the shard is tried in a subtransaction, rolled back to release its lock before the exact
-- path. A subtransaction that writes takes a transaction id of its own, so the common path
-- (a grouped enqueue with room) takes none.
--
-- kb.admit_queued_run stays for executors of the previous version during a rolling upgrade:
-- both count a run exactly once. Its exact path is repeated below rather than shared, so
-- that the function those executors call is the one they were tested with; the migration
-- that drops it, once no such executor runs, leaves one.

-- Locks the project's counter shard `which` (creating it) and folds its pending deltas in; its
-- count. Each statement takes its snapshot after the lock, so the fold sees every delta
-- committed before it.
CREATE FUNCTION kb.fold_queue_shard(project text, which smallint)
RETURNS integer
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    now_queued integer;
BEGIN
    INSERT INTO kb.run_queue_counts AS c (project_id, shard) VALUES (project, which)
    ON CONFLICT (project_id, shard) DO UPDATE SET queued = c.queued;
    WITH gone AS (
        DELETE FROM kb.run_queue_deltas d
        WHERE d.project_id = project AND d.shard = which RETURNING d.delta)
    UPDATE kb.run_queue_counts c
    SET queued = c.queued + (SELECT coalesce(sum(delta), 0) FROM gone)
    WHERE c.project_id = project AND c.shard = which
    RETURNING c.queued INTO now_queued;
    RETURN now_queued;
END
$$;

CREATE FUNCTION kb.admit_new_run(project text, own smallint, cap integer, may_wait boolean)
RETURNS smallint
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    total integer;
    room smallint;
BEGIN
    IF NOT may_wait THEN
        IF kb.fold_queue_shard(project, own) + 1 <= kb.run_queue_quota(own, cap) THEN
            RETURN own;
        END IF;
        RAISE EXCEPTION 'the shard is full: admit this run alone' USING ERRCODE = 'AFQ02';
    END IF;
    BEGIN
        IF kb.fold_queue_shard(project, own) + 1 <= kb.run_queue_quota(own, cap) THEN
            RETURN own;
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
    IF total + 1 > cap THEN
        RETURN NULL;
    END IF;
    -- Within the cap, so some shard is below its quota: the run counts there.
    SELECT shard INTO room FROM kb.run_queue_counts
    WHERE project_id = project AND queued < kb.run_queue_quota(shard, cap)
    ORDER BY (shard <> own), shard LIMIT 1;
    RETURN room;
END
$$;
