-- The run's last event seq, so an appender allocates the next gapless seqs by updating the
-- run row (its row lock orders concurrent appenders, and UPDATE re-reads the latest
-- committed value) in the same statement that inserts the events: one round trip instead
-- of an advisory lock, a max(seq) read and the insert (issue #4). Every event writer goes
-- through agentfleet.events.append_events or the executor's RunRecorder, which keep it.
ALTER TABLE kb.agent_runs ADD COLUMN last_event_seq integer NOT NULL DEFAULT 0;

UPDATE kb.agent_runs r
SET last_event_seq = e.last_seq
FROM (SELECT run_id, max(seq) AS last_seq FROM kb.agent_run_events GROUP BY run_id) e
WHERE r.id = e.run_id;
