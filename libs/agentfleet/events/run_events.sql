-- The statements that append run events (kb.agent_run_events), loaded by
-- agentfleet.events.store, and the read of a run's events.
--
-- Seqs come from the run row's last_event_seq: the UPDATE of the CTE "numbered" takes the row
-- lock, which orders concurrent appenders to one run until commit, and in read committed it
-- re-reads the row as the previous holder committed it, so one statement both allocates the
-- seqs and inserts the events (no max(seq) read, whose snapshot would predate the lock). A run
-- that does not qualify (absent, another project, lease lost) writes nothing.
--
-- Every statement takes the events as four parallel arrays (event_types, event_agents,
-- event_internal, event_payloads), built by store.event_columns. append_events, which runs in
-- its caller's transaction, NOTIFYs ('<run_id>:<last seq>', once per statement) at commit;
-- the executor's start and step writes, which commit on their own, NOTIFY after they commit
-- through agentfleet.events.notifier (why: there).

-- fragment: insert_events
-- The events' insert, numbered from "numbered", the run row after its last_event_seq was
-- raised by the number of events. A TOOL_REQUEST or TOOL_RESPONSE whose call row the
-- statement writes ("calls_written") is stored without the arguments or result that row
-- holds; kb.agent_run_events_shown, which every read goes through, takes them from it. A
-- RUN_FINISHED whose run is {} (the executor's record_finish) stores instead the run row the
-- statement wrote, "numbered" (fragment run_row).
ev AS (
    INSERT INTO kb.agent_run_events (
        run_id, seq, root_run_id, type, agent_name, is_internal, payload)
    SELECT r.id, r.last_event_seq - cardinality(:event_types::text[]) + e.ord,
           :root_run_id::uuid, e.type, e.agent_name, e.is_internal,
           CASE WHEN e.type IN ('tool_request', 'tool_response')
                     AND e.payload ->> 'tool_call_id' IN (SELECT id FROM calls_written)
                THEN e.payload - CASE e.type WHEN 'tool_request' THEN 'arguments' ELSE 'result' END
                WHEN e.type = 'run_finished' AND e.payload -> 'run' = '{}'::jsonb
                THEN
-- include: run_row
                ELSE e.payload END
    FROM numbered r
    CROSS JOIN unnest(:event_types::text[], :event_agents::text[], :event_internal::boolean[],
                      :event_payloads::jsonb[])
         WITH ORDINALITY AS e(type, agent_name, is_internal, payload, ord)
    RETURNING run_id, root_run_id, seq, type, agent_name, is_internal, payload, created_at
)

-- fragment: run_row
-- The payload of a RUN_QUEUED or RUN_FINISHED written in the statement that writes its run:
-- the run row "r" as to_jsonb gives it, as "run_row", without the columns no AgentRun shows
-- and, at the top level only, without the values it shows as absent (nulls; zeros, false, ''
-- and {} but where AgentRun tells them from null): bytes stored for nothing. The snapshot (AgentRun
-- JSON) is built from the row, so in Python it would need the row first, and the event a
-- second round trip; readers (agentfleet.events.persisted_from_row) make this the snapshot.
-- "r" carries timeout_s, the timeout in seconds, for the interval's text.
jsonb_build_object('run_row', (
    SELECT jsonb_object_agg(j.key, j.value)
    FROM jsonb_each(to_jsonb(r) - '{timeout,request_fingerprint,trace_parent,last_event_seq,
                                    queue_shard,lease_owner,lease_expires_at,stream_deltas,
                                    waited_ms,waiting_since}'::text[]) AS j
    WHERE j.value <> 'null'::jsonb
      AND (j.value NOT IN ('0', 'false', '""', '{}')
           OR j.key IN ('max_steps', 'max_tokens', 'max_tree_cost_nanos', 'duration_ms',
                        'output', 'trigger_origin', 'quota_wait'))))

-- fragment: no_calls_written
-- For a statement that writes no call rows: its events are stored whole.
calls_written (id) AS (SELECT NULL::text WHERE false),

-- name: append_events
-- Appends events to a run of the project; no row when the run is not in the project. NOTIFYs
-- (at commit) unless notify is false: the caller sends it once committed.
WITH numbered AS (
    UPDATE kb.agent_runs SET last_event_seq = last_event_seq + cardinality(:event_types::text[])
    WHERE id = :run_id::uuid AND project_id = :project_id
    RETURNING id, last_event_seq
),
-- include: no_calls_written
-- include: insert_events
SELECT ev.*,
       (SELECT pg_notify(:channel, max(run_id::text) || ':' || max(seq)) FROM ev
        HAVING count(*) > 0 AND :notify::boolean) AS notified
FROM ev

-- name: read_events
-- A run's events after a seq, in seq order; empty for a run of another project.
SELECT e.run_id, e.root_run_id, e.seq, e.type, e.agent_name, e.is_internal, e.payload,
       e.created_at
FROM kb.agent_run_events_shown e
JOIN kb.agent_runs r ON r.id = e.run_id
WHERE e.run_id = :run_id::uuid AND r.project_id = :project_id AND e.seq > :after_seq
  AND (:include_internal OR NOT e.is_internal)
ORDER BY e.seq
LIMIT :row_limit

-- The step's two hot writes (DESIGN §4) are one statement each, so each is one round trip and
-- its own transaction: the run row's UPDATE checks the lease (the reply) or the project (the
-- results) and numbers the events; every other write selects from that row, so a lost lease
-- or a foreign project writes nothing and returns no row. Each returns one row per event (the
-- run and the seq: the writer needs no more, and decoding the payloads back cost it CPU), or
-- one row of nulls when there is none.

-- fragment: insert_step_message
-- The step's message (the model's reply or the tool results), on the run row "numbered".
msg AS (
    INSERT INTO kb.agent_run_messages (
        run_id, seq, step_number, role, agent_name, content, tokens, model_name, cost_nanos)
    SELECT id, :message_seq::integer, :step::integer, :message_role::text, :agent_name,
           :content::jsonb, :tokens::integer, nullif(:model_name::text, ''),
           :cost_nanos::bigint
    FROM numbered
    RETURNING id
)

-- name: record_start
-- A run's opening (one round trip): its first messages numbered from message_seq (a system
-- prompt, a thread's earlier turns, the user input, as role/content pairs), its trace when it
-- has none yet, and the events STATUS_CHANGED and RUN_STARTED.
WITH numbered AS (
    UPDATE kb.agent_runs
    SET trace_id = coalesce(trace_id, :trace_id::text),
        last_event_seq = last_event_seq + cardinality(:event_types::text[])
    WHERE project_id = :project_id AND id = :run_id::uuid
    RETURNING id, last_event_seq
), opening AS (
    INSERT INTO kb.agent_run_messages (
        run_id, seq, step_number, role, agent_name, content, tokens)
    SELECT numbered.id, :message_seq::integer + m.ord::integer - 1, 0, m.role, :agent_name,
           m.content, 0
    FROM numbered, unnest(:message_roles::text[], :message_contents::jsonb[])
         WITH ORDINALITY AS m(role, content, ord)
),
-- include: no_calls_written
-- include: insert_events
SELECT numbered.id AS written_run_id, ev.seq FROM numbered LEFT JOIN ev ON true

-- name: record_model_reply
-- The model message, the run's counters (count_steps 0 or 1), every tool call row started.
WITH numbered AS (
    UPDATE kb.agent_runs
    SET step_count = step_count + :count_steps::integer,
        total_steps = total_steps + :count_steps::integer,
        tokens_in = tokens_in + :prompt_tokens::bigint,
        tokens_out = tokens_out + :tokens::integer,
        tokens_total_tree = tokens_total_tree + :prompt_tokens::bigint + :tokens::integer,
        cost_nanos = cost_nanos + :cost_nanos::bigint,
        cost_total_tree_nanos = cost_total_tree_nanos + :cost_nanos::bigint,
        last_event_seq = last_event_seq + cardinality(:event_types::text[])
    WHERE project_id = :project_id AND id = :run_id::uuid AND lease_owner = :lease_owner
      AND status = 'running'
    RETURNING id, last_event_seq
),
-- The project's usage of this UTC day and month, which its budgets are checked against.
usage AS (
    INSERT INTO kb.project_usage AS u (project_id, period, period_start, tokens, cost_nanos)
    SELECT :project_id, p.period, p.period_start,
           :prompt_tokens::bigint + :tokens::integer, :cost_nanos::bigint
    FROM numbered,
         (VALUES ('day', (now() AT TIME ZONE 'UTC')::date),
                 ('month', date_trunc('month', now() AT TIME ZONE 'UTC')::date))
         AS p(period, period_start)
    ON CONFLICT (project_id, period, period_start) DO UPDATE
    SET tokens = u.tokens + excluded.tokens, cost_nanos = u.cost_nanos + excluded.cost_nanos
),
-- include: insert_step_message
, calls_written AS (
    INSERT INTO kb.agent_run_tool_calls (
        run_id, message_id, tool_call_id, step_number, tool_name, source, input)
    SELECT :run_id::uuid, msg.id, c.id, :step::integer, c.name, c.source, c.input
    FROM msg, unnest(:call_ids::text[], :call_names::text[], :call_sources::text[],
                     :call_inputs::jsonb[])
         AS c(id, name, source, input)
    RETURNING tool_call_id AS id
),
-- include: insert_events
SELECT numbered.id AS written_run_id, ev.seq FROM numbered LEFT JOIN ev ON true

-- name: record_tool_results
-- Every started call row finished (a call is answered once), the tool message.
WITH numbered AS (
    UPDATE kb.agent_runs SET last_event_seq = last_event_seq + cardinality(:event_types::text[])
    WHERE project_id = :project_id AND id = :run_id::uuid
    RETURNING id, last_event_seq
), calls_written AS (
    -- Only a started row takes its result (a held call's row was answered by its decision).
    UPDATE kb.agent_run_tool_calls t
    SET status = c.status, output = c.output, error = nullif(c.error, ''),
        duration_ms = c.duration_ms, completed_at = now()
    FROM numbered,
         unnest(:call_ids::text[], :call_statuses::text[], :call_outputs::jsonb[],
                :call_errors::text[], :call_durations::bigint[])
         AS c(id, status, output, error, duration_ms)
    WHERE t.run_id = numbered.id AND t.tool_call_id = c.id AND t.status = 'started'
    RETURNING t.tool_call_id AS id
),
-- include: insert_step_message
,
-- include: insert_events
SELECT numbered.id AS written_run_id, ev.seq FROM numbered LEFT JOIN ev ON true

-- name: record_quota_wait
-- A model call of the run started (quota_wait an object) or stopped (NULL) waiting for its
-- model's quota, while lease_owner holds the run: the run's waiting_for and the
-- MODEL_QUOTA_WAIT event, in one statement. No row when the lease is lost or the run is no
-- longer running (its end cleared the wait).
WITH numbered AS (
    UPDATE kb.agent_runs
    SET quota_wait = :quota_wait::jsonb,
        -- A new estimate of a wait in progress keeps the wait's start.
        quota_wait_since = CASE WHEN :quota_wait::jsonb IS NULL THEN NULL
                                ELSE coalesce(quota_wait_since, now()) END,
        last_event_seq = last_event_seq + cardinality(:event_types::text[])
    WHERE project_id = :project_id AND id = :run_id::uuid AND lease_owner = :lease_owner
      AND status = 'running'
    RETURNING id, last_event_seq
),
-- include: no_calls_written
-- include: insert_events
SELECT numbered.id AS written_run_id, ev.seq FROM numbered LEFT JOIN ev ON true
