"""Everything a run records while it executes, one transaction per moment (DESIGN §4):

- start: the system and user messages (a thread's earlier turns between), the trace id,
  STATUS_CHANGED and RUN_STARTED;
- a model reply: the model message, the run's counters, every tool call row ``started``,
  MODEL_TEXT and one TOOL_REQUEST per call -- all before any tool runs;
- the tool results: every call row finished, the tool message, one TOOL_RESPONSE per call;
- the end: the conditional status change, STATUS_CHANGED and RUN_FINISHED.

The start and a step's two writes (the reply, the results) are one statement each
(``events/run_events.sql``): one round trip and one implicit transaction. Events are
appended in the same transaction as the rows they describe. Messages hold the exact
``types.Content`` JSON, so :func:`~services.executor.run_path.recovery.load_conversation` rebuilds
the conversation exactly.

Every write rides out a PostgreSQL restart or failover: it is retried on a new connection
(:mod:`write_guards`), and a retry first checks whether the cut attempt had committed, so
nothing is written twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from operator import attrgetter
from typing import Any, ParamSpec, TypeVar

import asyncpg
from google.genai import types

from agentfleet import events
from agentfleet.errors import Aborted, NotFound
from agentfleet.llm import ModelReply
from agentfleet.observability import metrics
from services.executor.calls import CallResult, PlannedCall, tool_requests, tool_responses
from services.executor.runs import RunRecord, RunStatus
from services.executor.store.group_commit import GroupCommit
from services.executor.store.run_writes import RunWriter

_STARTED_CALLS = {
    "call_ids": attrgetter("tool_call_id"),
    "call_names": attrgetter("tool_name"),
    "call_sources": attrgetter("source"),
    "call_inputs": attrgetter("arguments"),
}
"""The call rows a model reply starts: statement parameter <- :class:`PlannedCall` field."""
_FINISHED_CALLS = {
    "call_ids": attrgetter("planned.tool_call_id"),
    "call_statuses": attrgetter("status"),
    "call_outputs": attrgetter("response"),
    "call_errors": attrgetter("error"),
    "call_durations": attrgetter("duration_ms"),
}
"""The call rows the results finish: statement parameter <- :class:`CallResult` field."""


def _call_columns(
    items: Sequence[object], columns: Mapping[str, Callable[[object], Any]]
) -> dict[str, list[Any]]:
    """A step statement's call-row parameters: one array per column, a row per item."""
    return {name: list(map(get, items)) for name, get in columns.items()}


class LeaseLost(Aborted):
    """The worker no longer holds the run's lease: another worker owns it now."""


T = TypeVar("T")
P = ParamSpec("P")


async def complete_then_cancel(write: Coroutine[Any, Any, T] | Awaitable[T]) -> T:
    """Lets a bookkeeping write finish even if the run is cancelled meanwhile, then lets
    the cancellation through: the rows and the in-memory state never disagree."""
    task = asyncio.ensure_future(write)
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        # The write is short and bounded by the database; the caller is cancelled right
        # after it. A caller may be cancelled again while it waits (a cancel NOTIFY, then
        # the heartbeat that sees the same request): every later cancellation is held too,
        # or the run would end while the rows it just wrote are unknown to it.
        while not task.done():
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait([task])
        raise


def _shielded(record: Callable[P, Coroutine[Any, Any, T]]) -> Callable[P, Awaitable[T]]:
    """A recorder write runs to its end through a cancellation of its caller
    (:func:`complete_then_cancel`), so no caller has to shield it."""

    @functools.wraps(record)
    async def shielded(*args: P.args, **kwargs: P.kwargs) -> T:
        return await complete_then_cancel(record(*args, **kwargs))

    return shielded


class RunRecorder:
    """Writes one execution of one run. Not shared between runs or tasks."""

    def __init__(
        self,
        pool: asyncpg.Pool,
        run: RunRecord,
        *,
        owner: str,
        next_message_seq: int = 0,
        notifier: events.RunEventNotifier | None = None,
        group: GroupCommit | None = None,
    ) -> None:
        """``notifier``: the process's (:class:`~agentfleet.events.RunEventNotifier`), and
        ``group`` its :class:`GroupCommit`; None: one of this recorder's own, on ``pool``."""
        self._pool = pool
        self.run = run
        self._owner = owner
        self._writes = RunWriter(
            pool,
            run,
            next_message_seq=next_message_seq,
            notifier=notifier or events.RunEventNotifier(pool),
            group=group or GroupCommit(pool),
        )
        self.started = False
        """True once record_start committed."""
        self.open_calls: list[PlannedCall] = []
        """Calls recorded ``started`` whose results are not recorded yet; whoever ends the
        run answers them, so every TOOL_REQUEST gets exactly one TOOL_RESPONSE."""

    def continue_at(self, *, next_message_seq: int, open_calls: Sequence[PlannedCall]) -> None:
        """Positions a recorder on a run that already has messages (recovered or resumed):
        new messages continue the seq series; ``open_calls`` still need their answers."""
        self._writes.next_seq = next_message_seq
        self.open_calls = list(open_calls)
        self.started = True

    @_shielded
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
        messages: list[tuple[str, types.Content]] = []
        if system_prompt:
            messages.append(("system", types.Content(parts=[types.Part(text=system_prompt)])))
        messages += [*history, ("user", user_input)]
        stored = await self._writes.start(opening, messages=messages, trace_id=trace_id)
        if stored is None:
            raise NotFound(f"run {run.id} not found in project {run.project_id!r}")
        self.started = True
        if trace_id is not None and run.trace_id is None:
            run.trace_id = trace_id

    @_shielded
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
        # The reply's thoughts (Gemini's thought summaries) are stored as events too, before
        # the text, as the model gave them (seed 004: thinking is persisted and shown).
        thought = "".join(p.text for p in reply.content.parts or () if p.thought and p.text)
        if thought:
            batch.append(
                events.ModelText(agent_name=run.agent_name, text=thought, step=step, thought=True)
            )
        if reply.text:
            batch.append(events.ModelText(agent_name=run.agent_name, text=reply.text, step=step))
        batch.extend(tool_requests(calls, agent_name=run.agent_name, step=step))
        batch.extend(extra_events)
        if reply.fallback_reason is not None:
            batch.append(
                events.Safety(
                    agent_name=run.agent_name,
                    kind="model_fallback",
                    message=f"answered by fallback model {reply.model}: {reply.fallback_reason}",
                    details={"model": reply.model, "reason": reply.fallback_reason},
                    step=step,
                )
            )
        stored = await self._writes.step(
            "record_model_reply",
            batch,
            step=step,
            content=reply.content,
            tokens=usage.output_tokens,
            rows={
                "message_role": "model",
                "count_steps": increment,
                "prompt_tokens": usage.prompt_tokens,
                "model_name": reply.model,
                "cost_nanos": reply.cost_nanos,
                "lease_owner": self._owner,
                **_call_columns(calls, _STARTED_CALLS),
            },
        )
        if stored is None:
            raise LeaseLost(f"run {run.id}: lease lost by worker {self._owner}")
        self.open_calls = list(calls)
        run.step_count += increment
        run.total_steps += increment
        run.tokens_in += usage.prompt_tokens
        run.tokens_out += usage.output_tokens
        run.cost_nanos += reply.cost_nanos
        run.cost_total_tree_nanos += reply.cost_nanos
        metrics.record_model_cost(
            project=run.project_id, model=reply.model, cost_nanos=reply.cost_nanos
        )

    @_shielded
    async def record_cut_call(self) -> None:
        """A model call the run's deadline cut off counts as a step (step_count and the
        global cap's total_steps): it was sent and may be billed, and a run whose every call
        hangs must still reach its step cap rather than be resumed forever. One statement,
        only while this worker holds the run."""
        counted = await self._pool.fetchval(
            "UPDATE kb.agent_runs SET step_count = step_count + 1, total_steps = total_steps + 1"
            " WHERE project_id = $1 AND id = $2::uuid AND lease_owner = $3"
            " AND status = 'running' RETURNING total_steps",
            self.run.project_id,
            self.run.id,
            self._owner,
        )
        if counted is not None:
            self.run.step_count += 1
            self.run.total_steps = counted

    @_shielded
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
        batch = tool_responses(
            (r for r in results if r.planned.tool_call_id not in answered_before),
            agent_name=run.agent_name,
            step=step,
        )
        stored = await self._writes.step(
            "record_tool_results",
            batch,
            step=step,
            content=content,
            tokens=0,
            rows={
                "message_role": "tool",
                "model_name": "",
                "cost_nanos": 0,
                **_call_columns(results, _FINISHED_CALLS),
            },
        )
        if stored is None:
            raise NotFound(f"run {run.id} not found in project {run.project_id!r}")
        answered = {r.planned.tool_call_id for r in results}
        self.open_calls = [c for c in self.open_calls if c.tool_call_id not in answered]
        return content

    @_shielded
    async def record_note(
        self,
        *,
        step: int,
        batch: Sequence[events.RunEvent],
        user_message: types.Content | None = None,
    ) -> None:
        """Events (RUN_STARTED of a continued run, SAFETY) and optionally a user message the
        executor adds to the conversation (a soft-stop request, a structured-output request),
        in one commit; that message is the executor's own, so it is stored internal."""
        first_seq = self._writes.next_seq

        async def write() -> list[events.PersistedEvent]:
            self._writes.next_seq = first_seq
            async with self._pool.acquire() as conn, conn.transaction():
                if user_message is not None:
                    await self._writes.insert_message(
                        conn, step, "user", user_message, is_internal=True
                    )
                return await self._writes.append(conn, batch)

        if user_message is not None:
            await self._writes.with_messages(write, first_seq=first_seq, messages=1)
        else:
            await self._writes.events_once(write, batch)
        self.started = True

    @_shielded
    async def record_quota_wait(
        self, event: events.ModelQuotaWait, *, quota_wait: dict[str, Any] | None
    ) -> bool:
        """A model call's wait for its model's quota started (``quota_wait``: what it waits
        for, shown as the run's waiting_for) or ended (None), with ``event``, while this
        worker holds the run. False when it no longer does (nothing written)."""
        return await self._writes.quota_wait(
            [event], quota_wait=quota_wait, lease_owner=self._owner
        )

    @_shielded
    async def record_finish(
        self,
        *,
        status: RunStatus,
        reason: str,
        summary: str | None = None,
        error_message: str | None = None,
        output: dict[str, Any] | None = None,
        extra_events: Sequence[events.RunEvent] = (),
    ) -> RunRecord | None:
        """Ends the execution if the run is still ``running``: the status with completed_at
        and duration, STATUS_CHANGED and RUN_FINISHED. None when it had already moved on.
        ``output``: the structured final answer (definitions with an output_schema);
        ``extra_events`` (a flow's SAFETY) come before STATUS_CHANGED, in the same commit."""
        run = self.run
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
            *extra_events,
            events.StatusChanged(
                agent_name=run.agent_name, from_status="running", to_status=status, reason=reason
            ),
            # The statement stores the row it wrote as the run (runs.RECORD_FINISH).
            events.RunFinished(agent_name=run.agent_name, run={}),
        ]
        finished = await self._writes.finish(
            batch, status=status, summary=summary, error_message=error_message, output=output
        )
        if finished is None:
            return None
        self.run = finished
        return finished
