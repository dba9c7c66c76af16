"""Remote children: a run whose work is a task on a project's remote A2A agent.

spawn_agents starts one like any child (a ``queued`` run, claimed by any executor); its row
carries ``remote_agent`` (name, card_url). :class:`RunRouter` hands such a run to
:class:`RemoteChildRunner` instead of the agent loop, which

1. reads the registered agent and fills its headers from the project's secrets;
2. fetches the Agent Card and sends the run's input as one ``message/stream`` (the SDK's
   client; every connect through the MCP egress guard, :mod:`services.executor.a2a_client`);
3. records the remote side as the child's own events: RUN_STARTED (model ``a2a:<card
   name>``), each change of the task's state as REMOTE_STATUS (with or without text; at most
   :data:`MAX_STATUS_EVENTS`), each status or artifact text as MODEL_TEXT (at most
   :data:`MAX_PROGRESS_EVENTS`, each cut to :data:`MAX_EVENT_CHARS`), and the task's id,
   context id and endpoint on the row (``remote_agent``), as they become known;
4. ends the run as the remote task ends: completed with the answer (artifacts' text, else the
   last message) as summary and the first JSON data part as output; failed (remote failed or
   rejected, asked for auth, unreachable, refused by the guard) with the reason;
   cancelled as the remote cancelled it;
5. pauses the run when the remote task asks for input (``input-required``), the question as
   its summary and ``awaiting_seq`` on the row: the seq the answer's message will have. The
   answer is a resume's input -- the parent's ``spawn_agents`` with ``resume_run_id`` and a
   prompt, or a user's ResumeRun -- and the resumed execution sends it as the next message
   of the same remote task (its task and context id), then follows the task as before. At
   most :data:`MAX_INPUT_ROUNDS` answers per child: a further question fails it.

A cancel (CancelRun, a cancelled parent) is sent on as ``tasks/cancel`` before the run is
recorded cancelled -- a paused child's too: the queue hands it back to ``running`` with its
cancel request (:meth:`RunQueue.request_cancel`), and the execution that claims it connects
only to cancel the remote task. At the run's timeout (the spawn's ``timeout_s``, else the
agent's) the remote task is cancelled the same way and the run fails with a SAFETY
``timeout``. The timeout bounds each execution, as for local runs: the time a child waits
paused for an answer does not count, and a resumed child has its timeout afresh.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

import asyncpg
import structlog
from a2a.types import a2a_pb2 as a2a
from google.genai import types
from opentelemetry import trace

from agentfleet import events
from agentfleet.egress import EgressPolicy
from agentfleet.errors import AgentFleetError
from agentfleet.observability.telemetry import current_trace_id
from agentfleet.secrets.values import ProjectSecrets
from services.executor.a2a_client import (
    CANCEL_TIMEOUT_S,
    RemoteAgentError,
    cancel_task,
    endpoint_of,
    open_client,
    remote_error,
)
from services.executor.loop_state import run_span_context
from services.executor.registry.remote_agents import DEFAULT_TIMEOUT_S, RemoteAgentRepository
from services.executor.remote_task import ENDS, MAX_ANSWER_CHARS, RemoteTask, state_name
from services.executor.run_path.loop import RunControl
from services.executor.runs import RunRecord, RunStatus
from services.executor.store import messages, runs
from services.executor.store.group_commit import GroupCommit
from services.executor.store.persistence import RunRecorder, complete_then_cancel
from services.executor.worker import RunExecutor

log = structlog.get_logger(__name__)
_tracer = trace.get_tracer(__name__)

MAX_PROGRESS_EVENTS = 200
"""MODEL_TEXT events one remote task may add to its run (a peer chooses how many it sends)."""
MAX_STATUS_EVENTS = 100
"""REMOTE_STATUS events one execution may add (a peer may flip between states forever)."""
MAX_EVENT_CHARS = 8000
MAX_INPUT_ROUNDS = 10
"""Answers one remote child may be given; the remote task asking again after that fails it
(each answer is a resume, and a peer decides how often it asks)."""


class _RemoteTimeout(Exception):
    pass


class _CancelRequested(Exception):
    """The run was handed over to cancel its remote task (a cancelled paused child)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(kw_only=True, slots=True)
class RemoteChildRunner:
    """Executes remote children (see the module docstring)."""

    pool: asyncpg.Pool
    owner: str
    remote_agents: RemoteAgentRepository
    secrets: Callable[[str], Awaitable[ProjectSecrets]]
    """The project's secrets by value, for the headers' references only."""
    egress: EgressPolicy
    notifier: events.RunEventNotifier | None = None
    group_commit: GroupCommit | None = None

    async def execute(self, run: RunRecord, control: RunControl) -> RunRecord | None:
        """Runs the remote task of ``run`` to its end; the final row (None: left running)."""
        recorder = RunRecorder(
            self.pool, run, owner=self.owner, notifier=self.notifier, group=self.group_commit
        )
        task = RemoteTask()
        timeout_s = run.timeout.total_seconds() if run.timeout else DEFAULT_TIMEOUT_S
        with (
            structlog.contextvars.bound_contextvars(run_id=run.id, project_id=run.project_id),
            _tracer.start_as_current_span(
                f"invoke_agent {run.agent_name}",
                context=run_span_context(run),
                kind=trace.SpanKind.CLIENT,
                attributes={
                    "gen_ai.operation.name": "invoke_agent",
                    "gen_ai.agent.name": run.agent_name,
                    "agentfleet.run_id": run.id,
                    "agentfleet.remote_agent.card_url": (run.remote_agent or {}).get(
                        "card_url", ""
                    ),
                },
            ),
        ):
            try:
                try:
                    async with asyncio.timeout(timeout_s):
                        await self._drive(run, recorder, task, control)
                except TimeoutError:
                    raise _RemoteTimeout from None
            except asyncio.CancelledError:
                current = asyncio.current_task()
                if control.cancel_reason is None or current is None:
                    raise  # shutdown: the run stays running for another executor
                current.uncancel()
                return await complete_then_cancel(
                    self._end(recorder, task, "cancelled", control.cancel_reason, cancel=True)
                )
            except _RemoteTimeout:
                message = f"the remote agent did not finish within {timeout_s:g} s"
                safety = events.Safety(
                    agent_name=run.agent_name,
                    kind="timeout",
                    message=message,
                    details={"timeout_s": timeout_s},
                )
                return await complete_then_cancel(
                    self._end(recorder, task, "failed", message, cancel=True, extra=[safety])
                )
            except _CancelRequested as exc:
                return await complete_then_cancel(
                    self._end(recorder, task, "cancelled", exc.reason, cancel=True)
                )
            except Exception as exc:
                error = exc if isinstance(exc, AgentFleetError) else None
                message = (
                    (error.message or str(error))
                    if error
                    else remote_error(exc, "calling the remote agent").message
                )
                log.warning("remote_child_failed", error=message)
                if run.cancel_requested_at is not None:
                    # Handed over to be cancelled: it ends so, whatever stood in the way.
                    why = str((run.remote_agent or {}).get("cancel_reason") or "cancelled")
                    return await complete_then_cancel(
                        self._end(recorder, task, "cancelled", f"{why} ({message})")
                    )
                return await complete_then_cancel(self._end(recorder, task, "failed", message))
            finally:
                if task.client is not None:
                    with contextlib.suppress(Exception):
                        await task.client.close()
            assert task.end is not None
            return await complete_then_cancel(self._end(recorder, task, task.end, task.end_reason))

    async def _drive(
        self, run: RunRecord, recorder: RunRecorder, task: RemoteTask, control: RunControl
    ) -> None:
        remote = run.remote_agent or {}
        known_task = str(remote.get("task_id") or "")
        if known_task:
            task.task_id, task.context_id = known_task, str(remote.get("context_id") or "")
        card = await self._connect(run, task)
        await self._set_remote(run, {"url": endpoint_of(card), "card_name": card.name})
        next_seq = (
            0 if control.never_started else (await messages.next_position(self.pool, run.id))[0]
        )
        if next_seq == 0:
            await recorder.record_start(
                system_prompt="",
                user_input=types.Content(role="user", parts=[types.Part(text=run.input)]),
                model_name=f"a2a:{card.name}"[:200],
                tool_names=(),
                trace_id=current_trace_id(),
            )
        else:
            # Another execution had started it (a crash, a lost lease, a pause for input):
            # continue its record.
            recorder.continue_at(next_message_seq=next_seq, open_calls=[])
            await recorder.record_note(
                step=0,
                batch=[
                    events.RunStarted(
                        agent_name=run.agent_name,
                        model_name=f"a2a:{card.name}"[:200],
                        recovered=not control.resumed,
                        resumed=control.resumed,
                        worker=self.owner,
                    )
                ],
            )
        assert task.client is not None
        if run.cancel_requested_at is not None and known_task:
            raise _CancelRequested(str(remote.get("cancel_reason") or "cancelled"))
        awaiting = str(remote.get("awaiting_seq") or "")
        answer = (
            await messages.user_text_at(self.pool, run.project_id, run.id, int(awaiting))
            if awaiting.isdigit()
            else None
        )
        if known_task and answer is not None:
            # Resumed with the answer to the remote task's question: its next message.
            # Forgotten before it is sent: an execution cut in between asks the question
            # again rather than sending one answer twice, or to a later question.
            await self._set_remote(run, {"awaiting_seq": ""})
            stream = task.client.send_message(
                a2a.SendMessageRequest(
                    message=a2a.Message(
                        message_id=f"{run.id}:{awaiting}",
                        task_id=task.task_id,
                        context_id=task.context_id,
                        role=a2a.ROLE_USER,
                        parts=[a2a.Part(text=answer)],
                    )
                )
            )
        elif known_task:
            # The remote task exists already: follow it instead of sending the message again.
            current = await task.client.get_task(a2a.GetTaskRequest(id=known_task))
            await self._take(run, recorder, task, a2a.StreamResponse(task=current))
            if task.end is not None:
                return
            stream = task.client.subscribe(a2a.SubscribeToTaskRequest(id=known_task))
        else:
            stream = task.client.send_message(
                a2a.SendMessageRequest(
                    message=a2a.Message(
                        # The run's id: a message sent again by a recovered run is the same.
                        message_id=run.id,
                        role=a2a.ROLE_USER,
                        parts=[a2a.Part(text=run.input)],
                    )
                )
            )
        async for response in stream:
            await self._take(run, recorder, task, response)
            if task.end is not None:
                return
        if task.end is None:
            if task.answer or task.last_text:
                task.end, task.end_reason = "completed", "the remote agent answered"
            else:
                raise RemoteAgentError("the remote agent ended its stream without an answer")

    async def _connect(self, run: RunRecord, task: RemoteTask) -> a2a.AgentCard:
        """Opens ``task.client`` on the run's registered remote agent; its card."""
        name = str((run.remote_agent or {}).get("name", ""))
        agent = await self.remote_agents.find(run.project_id, name)
        if agent is None:
            raise RemoteAgentError(
                f"remote agent {name!r} is no longer registered in project {run.project_id!r}"
            )
        task.client, card = await open_client(
            agent, await self.secrets(run.project_id), self.egress
        )
        return card

    async def _take(
        self, run: RunRecord, recorder: RunRecorder, task: RemoteTask, response: a2a.StreamResponse
    ) -> None:
        heard = task.take(response)
        if heard.new_ids:
            await self._set_remote(
                run, {"task_id": task.task_id[:200], "context_id": task.context_id[:200]}
            )
        batch: list[events.RunEvent] = []
        if heard.new_state and task.statuses < MAX_STATUS_EVENTS:
            task.statuses += 1
            batch.append(
                events.RemoteStatus(
                    agent_name=run.agent_name,
                    state=heard.new_state[:40],
                    task_id=task.task_id[:200],
                    step=task.progress,
                )
            )
        if heard.texts:
            task.last_text = heard.texts[-1]
        for text in heard.texts:
            if task.progress >= MAX_PROGRESS_EVENTS:
                break
            task.progress += 1
            batch.append(
                events.ModelText(
                    agent_name=run.agent_name, text=text[:MAX_EVENT_CHARS], step=task.progress
                )
            )
        if batch:
            await recorder.record_note(step=task.progress, batch=batch)
        end = ENDS.get(heard.state) if heard.state is not None else None
        if end is None:
            return
        said = task.last_text[:MAX_EVENT_CHARS]
        task.end = end
        if end == "paused":
            task.end_reason = "the remote agent asks for input" + (f": {said}" if said else "")
            if not task.task_id:
                task.end = "failed"
                task.end_reason += " (but names no task to answer on)"
            elif run.resume_count >= MAX_INPUT_ROUNDS:
                task.end = "failed"
                task.end_reason = (
                    f"the remote agent asked for input again after {MAX_INPUT_ROUNDS} answers"
                    + (f": {said}" if said else "")
                )
            return
        name = state_name(heard.state or 0)
        task.end_reason = f"the remote task ended {name}" + (f": {said}" if said else "")

    async def _set_remote(self, run: RunRecord, fields: dict[str, str]) -> None:
        await runs.set_remote_task(self.pool, run.project_id, run.id, fields, owner=self.owner)

    async def _end(
        self,
        recorder: RunRecorder,
        task: RemoteTask,
        status: RunStatus,
        reason: str,
        *,
        cancel: bool = False,
        extra: Sequence[events.RunEvent] = (),
    ) -> RunRecord | None:
        if cancel:
            await self._cancel_remote(recorder.run, task)
        answer = "\n\n".join(task.answer) or task.last_text
        if status == "paused":
            # The parent reads the question as the paused child's summary.
            answer = reason
            position, _ = await messages.next_position(self.pool, recorder.run.id)
            await self._set_remote(recorder.run, {"awaiting_seq": str(position)})
        return await recorder.record_finish(
            status=status,
            reason=reason[:2000],
            summary=answer[:MAX_ANSWER_CHARS] or None,
            error_message=reason[:2000] if status == "failed" else None,
            output=task.output if status == "completed" else None,
            extra_events=extra,
        )

    async def _cancel_remote(self, run: RunRecord, task: RemoteTask) -> None:
        """``tasks/cancel`` of the remote task; connecting first when the execution was cut
        before it had (a cancel handed over from a paused child). A failure is logged only."""
        if not task.task_id:
            return
        if task.client is None:
            try:
                async with asyncio.timeout(CANCEL_TIMEOUT_S):
                    await self._connect(run, task)
            except Exception as exc:
                log.warning("remote_cancel_failed", task_id=task.task_id, error=str(exc)[:500])
                return
        assert task.client is not None
        failed = await cancel_task(task.client, task.task_id)
        if failed:
            log.warning("remote_cancel_failed", task_id=task.task_id, error=failed)


@dataclass(kw_only=True, slots=True)
class RunRouter:
    """The worker's executor: remote children to :class:`RemoteChildRunner`, the rest to
    the agent loop."""

    local: RunExecutor
    remote: RemoteChildRunner

    async def execute(self, run: RunRecord, control: RunControl) -> RunRecord | None:
        if run.remote_agent is not None:
            return await self.remote.execute(run, control)
        return await self.local.execute(run, control)
