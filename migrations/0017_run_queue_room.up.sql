-- The per-project cap on queued top-level runs, checked inside the run's INSERT: one round
-- trip fewer than taking the lock in a statement of its own, and the lock is no longer held
-- across that round trip.
--
-- The advisory lock serialises the count and the insert per project until the inserting
-- transaction ends (the key is the one executors took before this function, so old and new
-- executors serialise with each other during an upgrade). The count runs on a snapshot
-- taken after the lock: a VOLATILE function takes a fresh one for each of its queries, so it
-- sees every run a concurrent enqueue committed while this one waited.
CREATE FUNCTION kb.run_queue_has_room(project text, cap integer) RETURNS boolean
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended('agentfleet.run-queue:' || project, 0));
    RETURN (SELECT count(*) FROM (
                SELECT 1 FROM kb.agent_runs
                WHERE project_id = project AND status = 'queued' AND depth = 0
                LIMIT cap) queued) < cap;
END
$$;
