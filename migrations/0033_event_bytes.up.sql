-- A step stored its tool call's arguments and result three times: in the call row, in the
-- conversation (the model message and the tool message, which rebuild the conversation), and
-- in its TOOL_REQUEST and TOOL_RESPONSE events. The step statements now store those events
-- without the arguments or result whose call row they write in the same statement, and every
-- read of events goes through kb.agent_run_events_shown, which takes them from that row: one
-- copy fewer per step (docs/DESIGN.md, Events). An event stored whole (every other writer:
-- approvals, recovery, a held call's answer) is shown as stored.
CREATE VIEW kb.agent_run_events_shown AS
SELECT e.run_id, e.seq, e.root_run_id, e.type, e.agent_name, e.is_internal,
       CASE
           WHEN e.type = 'tool_request' AND NOT e.payload ? 'arguments' THEN
               -- The model's arguments, also after an approver replaced the row's input.
               e.payload || jsonb_build_object('arguments', (
                   SELECT coalesce(c.original_input, c.input) FROM kb.agent_run_tool_calls c
                   WHERE c.run_id = e.run_id AND c.tool_call_id = e.payload ->> 'tool_call_id'))
           WHEN e.type = 'tool_response' AND NOT e.payload ? 'result' THEN
               e.payload || jsonb_build_object('result', (
                   SELECT c.output FROM kb.agent_run_tool_calls c
                   WHERE c.run_id = e.run_id AND c.tool_call_id = e.payload ->> 'tool_call_id'))
           ELSE e.payload
       END AS payload,
       e.created_at
FROM kb.agent_run_events e;

-- Nothing reads events by tree: every read is by run, along the primary key (a tree's
-- watcher follows each run of it). The index cost 250 bytes per step (bench/scale_out.py).
DROP INDEX kb.agent_run_events_root_idx;
