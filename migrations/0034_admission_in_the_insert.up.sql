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
-- Without may_wait the exact path raises AFQ02 instead and the caller retries the run alone
-- (holding nothing), with may_wait.
--
-- kb.admit_queued_run stays for executors of the previous version during a rolling upgrade:
-- both count a run exactly once.
CREATE FUNCTION kb.admit_new_run(project text, own smallint, cap integer, may_wait boolean)
RETURNS smallint
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
        IF now_queued + 1 <= kb.run_queue_quota(own, cap) THEN
            RETURN own;
        END IF;
        RAISE EXCEPTION USING ERRCODE = 'AFQ01';
    EXCEPTION WHEN SQLSTATE 'AFQ01' THEN
        NULL;  -- the shard is full: count the whole project
    END;
    IF NOT may_wait THEN
        RAISE EXCEPTION 'the shard is full: admit this run alone' USING ERRCODE = 'AFQ02';
    END IF;
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
