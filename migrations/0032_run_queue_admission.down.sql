DROP FUNCTION kb.admit_queued_run(text);
DROP TRIGGER agent_runs_queue_delete ON kb.agent_runs;
DROP TRIGGER agent_runs_queue_status ON kb.agent_runs;
DROP TRIGGER agent_runs_queue_insert ON kb.agent_runs;
DROP FUNCTION kb.note_run_queue_delta();
DROP TABLE kb.run_queue_deltas;
DROP TABLE kb.run_queue_counts;
