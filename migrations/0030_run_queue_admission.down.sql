DROP FUNCTION kb.admit_queued_run(text, uuid, smallint, integer);
DROP TRIGGER agent_runs_queue_delete ON kb.agent_runs;
DROP TRIGGER agent_runs_queue_status ON kb.agent_runs;
DROP TRIGGER agent_runs_queue_insert ON kb.agent_runs;
DROP FUNCTION kb.note_run_queue_delta();
DROP FUNCTION kb.run_queue_quota(integer, integer);
DROP TABLE kb.run_queue_deltas;
DROP TABLE kb.run_queue_counts;
ALTER TABLE kb.agent_runs DROP COLUMN queue_shard;
