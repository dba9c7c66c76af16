"""Everything a run records while it executes, one transaction per moment (DESIGN §4):

- start: the system and user messages, STATUS_CHANGED and RUN_STARTED;
- a model reply: the model message, the run's counters, every tool call row ``started``,
  MODEL_TEXT and one TOOL_REQUEST per call -- all before any tool runs;
- the tool results: every call row finished, the tool message, one TOOL_RESPONSE per call;
- the end: the conditional status change, STATUS_CHANGED and RUN_FINISHED.

A step's two writes (the reply, the results) are one statement each: one round trip and
one implicit transaction. Events are appended in the same transaction as the rows they
describe and published to the in-process :class:`~agentfleet.events.EventHub` only after
it commits. Messages hold the exact ``types.Content`` JSON, so :func:`load_conversation`
rebuilds the conversation exactly.

Every write rides out a PostgreSQL restart or failover: it is retried on a new connection
(:mod:`write_guards`), and a retry first checks whether the cut attempt had committed, so
nothing is written twice.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import asyncpg
from google.genai import types

from agentfleet import events
from agentfleet.errors import Aborted, NotFound
from agentfleet.llm import ModelReply, content_from_json, content_to_json
from services.executor.queue import RunQueue
from services.executor.runs import RunRecord, RunStatus
from services.executor.write_guards import (
    events_appended,
    events_with_message,
    finished_with,
    message_written,
    write_once,
)

_WHAT = "recording a run"
"""What the executor was doing, in the warning of a database outage."""


class LeaseLost(Aborted):
    """The worker no longer holds the run's lease: another worker owns it now."""


@dataclass(frozen=True, kw_only=True, slots=True)
class PlannedCall:
    """A function call of a model reply, as the executor will handle it."""

    tool_call_id: str
    tool_name: str
    arguments: dict[str, Any]
    source: str
    """builtin, mcp:<server> or executor (also for calls the executor refuses itself)."""
    call: types.FunctionCall
    refusal: str | None = None
    """Why the call is answered with an error instead of being run (unknown tool, bad call)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class CallResult:
    """The outcome of one planned call."""

    planned: PlannedCall
    status: events.ToolCallStatusName
    response: dict[str, Any]
    """What the model gets as the FunctionResponse.response."""
    error: str = ""
    duration_ms: int = 0

    def function_response(self) -> types.Part:
        # model_construct skips a validation that could change nothing: the id comes from
        # a validated FunctionCall, the name is a str and the response a str-keyed dict
        # (validated as dict[str, Any], its values are kept as they are). It runs for every
        # call of every step.
        return types.Part.model_construct(
            function_response=types.FunctionResponse.model_construct(
                id=self.planned.call.id, name=self.planned.tool_name, response=self.response
            )
        )


_INSERT_MESSAGE = """
INSERT INTO kb.agent_run_messages (run_id, seq, step_number, role, agent_name, content, tokens)
VALUES ($1::uuid, $2, $3, $4, $5, $6::jsonb, $7)
RETURNING id
"""

# The step's two hot writes are one statement each (DESIGN §4), so each is one round trip
# and its own transaction: the run row's UPDATE checks the lease (the reply) or the project
# (the results), takes the row lock that orders the run's event appenders and numbers the
# events from last_event_seq (see events.INSERT_EVENTS_CTE); every other write selects
# from that row, so a lost lease or a foreign project writes nothing and returns no row.
# The last SELECT returns one row per event, or one row of nulls when there is none.
# $1 run, $2 project, $3 root run, $4..$7 the events, $8 the NOTIFY channel, $9 message
# seq, $10 step, $11 agent name, $12 message content, $13 message tokens; then per query.

_STEP_RESULT = f"""
SELECT ev.*, CASE WHEN ev.seq IS NOT NULL THEN {events.NOTIFY_LAST_EVENT} END AS notified
FROM numbered LEFT JOIN ev ON true
"""

# $14 steps to count (0 or 1), $15 prompt tokens, $16 lease owner, $17..$20 the call rows.
_RECORD_REPLY = (
    """
WITH numbered AS (
    UPDATE kb.agent_runs
    SET step_count = step_count + $14::integer, total_steps = total_steps + $14::integer,
        tokens_in = tokens_in + $15::bigint, tokens_out = tokens_out + $13::integer,
        tokens_total_tree = tokens_total_tree + $15::bigint + $13::integer,
        last_event_seq = last_event_seq + cardinality($4::text[])
    WHERE project_id = $2 AND id = $1::uuid AND lease_owner = $16 AND status = 'running'
    RETURNING id, last_event_seq
), msg AS (
    INSERT INTO kb.agent_run_messages (
        run_id, seq, step_number, role, agent_name, content, tokens)
    SELECT id, $9::integer, $10::integer, 'model', $11, $12::jsonb, $13::integer FROM numbered
    RETURNING id
), calls AS (
    INSERT INTO kb.agent_run_tool_calls (
        run_id, message_id, tool_call_id, step_number, tool_name, source, input)
    SELECT $1::uuid, msg.id, c.id, $10::integer, c.name, c.source, c.input
    FROM msg, unnest($17::text[], $18::text[], $19::text[], $20::jsonb[])
         AS c(id, name, source, input)
),"""
    + events.INSERT_EVENTS_CTE
    + _STEP_RESULT
)

# $14..$18 the finished call rows. Only ``started`` rows finish: a call is answered once.
_RECORD_RESULTS = (
    """
WITH numbered AS (
    UPDATE kb.agent_runs SET last_event_seq = last_event_seq + cardinality($4::text[])
    WHERE project_id = $2 AND id = $1::uuid
    RETURNING id, last_event_seq
), finished AS (
    UPDATE kb.agent_run_tool_calls t
    SET status = c.status, output = c.output, error = nullif(c.error, ''),
        duration_ms = c.duration_ms, completed_at = now()
    FROM numbered,
         unnest($14::text[], $15::text[], $16::jsonb[], $17::text[], $18::bigint[])
         AS c(id, status, output, error, duration_ms)
    WHERE t.run_id = numbered.id AND t.tool_call_id = c.id AND t.status = 'started'
), msg AS (
    INSERT INTO kb.agent_run_messages (
        run_id, seq, step_number, role, agent_name, content, tokens)
    SELECT id, $9::integer, $10::integer, 'tool', $11, $12::jsonb, $13::integer FROM numbered
),"""
    + events.INSERT_EVENTS_CTE
    + _STEP_RESULT
)


class RunRecorder:
    """Writes one execution of one run. Not shared between runs or tasks."""

    def __init__(
        self,
        pool: asyncpg.Pool,
        run: RunRecord,
        *,
        owner: str,
        hub: events.EventHub | None = None,
        next_message_seq: int = 0,
    ) -> None:
        self._pool = pool
        self.run = run
        self._owner = owner
        self._hub = hub
        self._next_seq = next_message_seq
        self.started = False
        """True once record_start committed."""
        self.open_calls: list[PlannedCall] = []
        """Calls recorded ``started`` whose results are not recorded yet; whoever ends the
        run answers them, so every TOOL_REQUEST gets exactly one TOOL_RESPONSE."""

    def continue_at(self, *, next_message_seq: int, open_calls: Sequence[PlannedCall]) -> None:
        """Positions a recorder on a run that already has messages (recovered or resumed):
        new messages continue the seq series; ``open_calls`` still need their answers."""
        self._next_seq = next_message_seq
        self.open_calls = list(open_calls)
        self.started = True

    async def record_start(
        self,
        *,
        system_prompt: str,
        user_input: types.Content,
        model_name: str,
        tool_names: Sequence[str],
        trace_id: str | None,
        history: Sequence[tuple[str, types.Content]] = (),
    ) -> None:
        """The opening messages and STATUS_CHANGED(queued -> running) + RUN_STARTED.
        ``history``: (role, content) of a thread's earlier turns, stored before the input."""
        run = self.run
        first_seq = self._next_seq
        opening: list[events.RunEvent] = [
            events.StatusChanged(
                agent_name=run.agent_name,
                from_status="queued",
                to_status="running",
                reason=f"claimed by worker {self._owner}",
            ),
            events.RunStarted(
                agent_name=run.agent_name,
                model_name=model_name,
                tool_names=tuple(tool_names),
                worker=self._owner,
            ),
        ]

        async def write() -> list[events.PersistedEvent]:
            self._next_seq = first_seq  # an attempt cut short numbered nothing
            async with self._pool.acquire() as conn, conn.transaction():
                await conn.execute(
                    "UPDATE kb.agent_runs SET trace_id = coalesce(trace_id, $3) "
                    "WHERE project_id = $1 AND id = $2::uuid",
                    run.project_id,
                    run.id,
                    trace_id,
                )
                if system_prompt:
                    system = types.Content(parts=[types.Part(text=system_prompt)])
                    await self._insert_message(conn, 0, "system", system)
                for role, content in history:
                    await self._insert_message(conn, 0, role, content)
                await self._insert_message(conn, 0, "user", user_input)
                return await self._append(conn, opening)

        stored = await self._write_with_messages(
            write, first_seq=first_seq, messages=(2 if system_prompt else 1) + len(history)
        )
        self._publish(stored)
        self.started = True
        if trace_id is not None and run.trace_id is None:
            run.trace_id = trace_id

    async def record_model_reply(
        self,
        *,
        step: int,
        reply: ModelReply,
        calls: Sequence[PlannedCall],
        count_step: bool = True,
        extra_events: Sequence[events.RunEvent] = (),
    ) -> None:
        """The reply, the step's counters and every call ``started``, before any tool runs.

        ``count_step`` False records the tokens only (the summary call after a soft stop is
        not a step); ``extra_events`` (SAFETY) follow the TOOL_REQUESTs in the same commit.
        """
        run = self.run
        increment = 1 if count_step else 0
        usage = reply.usage
        batch: list[events.RunEvent] = []
        if reply.text:
            batch.append(events.ModelText(agent_name=run.agent_name, text=reply.text, step=step))
        batch.extend(
            events.ToolRequest(
                agent_name=run.agent_name,
                tool_call_id=c.tool_call_id,
                tool_name=c.tool_name,
                arguments=c.arguments,
                step=step,
                source="" if c.refusal is not None else c.source,
            )
            for c in calls
        )
        batch.extend(extra_events)
        stored = await self._write_step(
            _RECORD_REPLY,
            batch,
            step=step,
            content=reply.content,
            tokens=usage.output_tokens,
            rows=(
                increment,
                usage.prompt_tokens,
                self._owner,
                [c.tool_call_id for c in calls],
                [c.tool_name for c in calls],
                [c.source for c in calls],
                [c.arguments for c in calls],
            ),
        )
        if stored is None:
            raise LeaseLost(f"run {run.id}: lease lost by worker {self._owner}")
        self._publish_rows(stored)
        self.open_calls = list(calls)
        run.step_count += increment
        run.total_steps += increment
        run.tokens_in += usage.prompt_tokens
        run.tokens_out += usage.output_tokens

    async def record_tool_results(
        self,
        *,
        step: int,
        results: Sequence[CallResult],
        answered_before: frozenset[str] = frozenset(),
    ) -> types.Content:
        """Finishes the call rows, appends the tool message and the TOOL_RESPONSEs; returns
        the tool message content (to append to the conversation). ``answered_before``: calls
        whose row and TOOL_RESPONSE were written earlier (a step held for approval); they
        are in the message only."""
        run = self.run
        # Validation would keep the Part instances as they are (pydantic does not revalidate
        # model instances): nothing to check in a content built here.
        content = types.Content.model_construct(
            role="user", parts=[r.function_response() for r in results]
        )
        batch = [
            events.ToolResponse(
                agent_name=run.agent_name,
                tool_call_id=r.planned.tool_call_id,
                tool_name=r.planned.tool_name,
                status=r.status,
                result=r.response,
                error=r.error,
                duration_ms=r.duration_ms,
                step=step,
            )
            for r in results
            if r.planned.tool_call_id not in answered_before
        ]
        stored = await self._write_step(
            _RECORD_RESULTS,
            batch,
            step=step,
            content=content,
            tokens=0,
            rows=(
                [r.planned.tool_call_id for r in results],
                [r.status for r in results],
                [r.response for r in results],
                [r.error for r in results],
                [r.duration_ms for r in results],
            ),
        )
        if stored is None:
            raise NotFound(f"run {run.id} not found in project {run.project_id!r}")
        self._publish_rows(stored)
        answered = {r.planned.tool_call_id for r in results}
        self.open_calls = [c for c in self.open_calls if c.tool_call_id not in answered]
        return content

    async def record_note(
        self,
        *,
        step: int,
        batch: Sequence[events.RunEvent],
        user_message: types.Content | None = None,
    ) -> None:
        """Events (RUN_STARTED of a continued run, SAFETY) and optionally a user message the
        executor adds to the conversation (a soft-stop request), in one commit."""
        first_seq = self._next_seq

        async def write() -> list[events.PersistedEvent]:
            self._next_seq = first_seq
            async with self._pool.acquire() as conn, conn.transaction():
                if user_message is not None:
                    await self._insert_message(conn, step, "user", user_message)
                return await self._append(conn, batch)

        if user_message is not None:
            stored = await self._write_with_messages(write, first_seq=first_seq, messages=1)
        else:

            async def committed() -> list[events.PersistedEvent] | None:
                rows = await events_appended(self._pool, run_id=self.run.id, batch=batch)
                return None if rows is None else [events.persisted_from_row(r) for r in rows]

            stored = await write_once(write, committed=committed, what=_WHAT, pool=self._pool)
        self._publish(stored)
        self.started = True

    async def record_finish(
        self,
        *,
        status: RunStatus,
        reason: str,
        summary: str | None = None,
        error_message: str | None = None,
        output: dict[str, Any] | None = None,
    ) -> RunRecord | None:
        """Ends the execution if the run is still ``running``: the status with completed_at
        and duration, STATUS_CHANGED and RUN_FINISHED. None when it had already moved on.
        ``output``: the structured final answer (definitions with an output_schema)."""
        run = self.run

        async def write() -> tuple[RunRecord | None, list[events.PersistedEvent]]:
            async with self._pool.acquire() as conn, conn.transaction():
                finished = await RunQueue.finish(
                    conn,
                    run,
                    status=status,
                    summary=summary,
                    error_message=error_message,
                    output=output,
                )
                if finished is None:
                    return None, []
                batch: list[events.RunEvent] = []
                if not self.started:
                    # Failed before record_start (definition or tools): still show the claim.
                    batch.append(
                        events.StatusChanged(
                            agent_name=run.agent_name,
                            from_status="queued",
                            to_status="running",
                            reason=f"claimed by worker {self._owner}",
                        )
                    )
                batch += [
                    events.StatusChanged(
                        agent_name=run.agent_name,
                        from_status="running",
                        to_status=status,
                        reason=reason,
                    ),
                    events.RunFinished(agent_name=run.agent_name, run=finished.snapshot()),
                ]
                return finished, await self._append(conn, batch)

        async def committed() -> tuple[RunRecord | None, list[events.PersistedEvent]] | None:
            found = await finished_with(self._pool, run, status)
            if found is None:
                return None
            return found[0], [events.persisted_from_row(r) for r in found[1]]

        finished, stored = await write_once(write, committed=committed, what=_WHAT, pool=self._pool)
        if finished is None:
            return None
        self._publish(stored)
        self.run = finished
        return finished

    async def _insert_message(
        self,
        conn: asyncpg.Connection,
        step: int,
        role: str,
        content: types.Content,
        *,
        tokens: int = 0,
    ) -> str:
        seq = self._next_seq
        message_id = await conn.fetchval(
            _INSERT_MESSAGE,
            self.run.id,
            seq,
            step,
            role,
            self.run.agent_name,
            content_to_json(content),
            tokens,
        )
        self._next_seq = seq + 1
        return str(message_id)

    async def _write_step(
        self,
        query: str,
        batch: Sequence[events.RunEvent],
        *,
        step: int,
        content: types.Content,
        tokens: int,
        rows: tuple[Any, ...],
    ) -> list[asyncpg.Record] | None:
        """Runs one of the step statements outside any transaction block: a single
        statement commits on its own, so this is one round trip. The rows of the stored
        events (one row of nulls when there is none), or None when the run row did not
        qualify (nothing was written)."""
        run = self.run
        seq = self._next_seq
        arguments = (
            run.id,
            run.project_id,
            run.root_run_id,
            [e.type for e in batch],
            [e.agent_name for e in batch],
            [e.is_internal for e in batch],
            [events.event_payload(e) for e in batch],
            events.CHANNEL,
            seq,
            step,
            run.agent_name,
            content_to_json(content),
            tokens,
            *rows,
        )
        # A cut attempt that had committed wrote the message at ``seq`` (a retried one
        # would fail on its unique seq anyway, writing nothing).
        earlier: list[list[asyncpg.Record]] = []

        async def committed() -> list[asyncpg.Record] | None:
            if not await message_written(self._pool, run_id=run.id, seq=seq):
                return None
            earlier.append(await events_with_message(self._pool, run_id=run.id, seq=seq))
            return earlier[0]

        stored_rows = await write_once(
            lambda: self._pool.fetch(query, *arguments),
            committed=committed,
            what=_WHAT,
            pool=self._pool,
        )
        if not stored_rows and not earlier:
            return None
        self._next_seq = seq + 1
        return stored_rows

    async def _write_with_messages(
        self,
        write: Callable[[], Awaitable[list[events.PersistedEvent]]],
        *,
        first_seq: int,
        messages: int,
    ) -> list[events.PersistedEvent]:
        """Runs a transaction that adds ``messages`` messages from ``first_seq`` (and
        events), through database outages, never twice."""

        async def committed() -> list[events.PersistedEvent] | None:
            if not await message_written(self._pool, run_id=self.run.id, seq=first_seq):
                return None
            self._next_seq = first_seq + messages
            rows = await events_with_message(self._pool, run_id=self.run.id, seq=first_seq)
            return [events.persisted_from_row(r) for r in rows]

        return await write_once(write, committed=committed, what=_WHAT, pool=self._pool)

    async def _append(
        self, conn: asyncpg.Connection, batch: Sequence[events.RunEvent]
    ) -> list[events.PersistedEvent]:
        if not batch:
            return []
        return await events.append_events(
            conn,
            project_id=self.run.project_id,
            run_id=self.run.id,
            root_run_id=self.run.root_run_id,
            events=batch,
        )

    def _publish(self, stored: Sequence[events.PersistedEvent]) -> None:
        """Hands committed events to in-process subscribers; call after the commit only."""
        if self._hub is not None and stored:
            self._hub.publish(stored)

    def _publish_rows(self, rows: Sequence[asyncpg.Record]) -> None:
        """:meth:`_publish` for a step statement's rows, rebuilt as stored (what a replay
        yields). A run nobody in this process subscribes to gets no rebuild: publishing
        would hand the events to no one, and a later subscriber reads them from the table."""
        if self._hub is None or not self._hub.subscriber_count(self.run.id):
            return
        self._publish(
            sorted(
                (events.persisted_from_row(r) for r in rows if r["seq"] is not None),
                key=lambda p: p.seq,
            )
        )


async def load_conversation(
    conn: asyncpg.Connection | asyncpg.Pool, *, project_id: str, run_id: str
) -> tuple[str | None, list[types.Content]]:
    """The run's system instruction and conversation, rebuilt from its messages."""
    rows = await conn.fetch(
        """
        SELECT m.role, m.content FROM kb.agent_run_messages m
        JOIN kb.agent_runs r ON r.id = m.run_id
        WHERE r.project_id = $1 AND m.run_id = $2::uuid
        ORDER BY m.seq
        """,
        project_id,
        run_id,
    )
    system: str | None = None
    contents: list[types.Content] = []
    for row in rows:
        content = content_from_json(row["content"])
        if row["role"] == "system":
            system = "".join(p.text or "" for p in content.parts or [])
        else:
            contents.append(content)
    return system, contents
