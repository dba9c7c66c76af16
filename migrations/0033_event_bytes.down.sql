-- Events written since the up migration lack the arguments and results of their call rows:
-- put them back before the view goes.
UPDATE kb.agent_run_events e SET payload = s.payload
FROM kb.agent_run_events_shown s
WHERE s.run_id = e.run_id AND s.seq = e.seq AND s.payload <> e.payload;
DROP VIEW kb.agent_run_events_shown;
CREATE INDEX agent_run_events_root_idx
    ON kb.agent_run_events (root_run_id, created_at, run_id, seq);
