"""The trigger consumer: every executor claims outbox events and starts the runs they
trigger, each event exactly once across replicas and crashes.

One event is one transaction: claim the row (``FOR UPDATE SKIP LOCKED``), find the
project's agents whose trigger names it, check the caps, queue their runs (request_id
``trigger:<event>:<agent>``), record a firing per agent (fired, or skipped and why), mark
the row consumed, commit. A consumer killed anywhere before the commit leaves nothing
behind and releases the row with its connection; the next claim starts over. A row is
never consumed twice: the claim skips locked rows and reads only unconsumed ones, and
``(outbox_id, agent_name)`` is unique in ``kb.trigger_firings`` besides.
"""

from __future__ import annotations

import asyncio
import datetime as dt
from dataclasses import dataclass
from typing import Any

import asyncpg
import structlog

from agentfleet.errors import NotFound, ResourceExhausted
from agentfleet.graph import GraphRepository
from agentfleet.observability import metrics
from agentfleet.observability.telemetry import trace_id_of
from agentfleet.postgres.db import Listener, lock_key
from agentfleet.reconnect import is_disconnect
from agentfleet.settings.trigger_limits import TriggerLimits
from services.executor.queue import RunQueue
from services.executor.run_requests import TRIGGER_REQUEST_PREFIX
from services.executor.runs import StartRunParams
from services.executor.triggers import store
from services.executor.triggers.grammar import DOCUMENT_INGESTED, render_input
from services.executor.triggers.store import ListeningAgent, OutboxEvent

__all__ = ["Firing", "TriggerConsumer", "triggers_for"]

log = structlog.get_logger(__name__)

MAX_LISTENERS_READ = 500
"""Listeners of one event read at most (past the per-event cap each is a skipped firing,
agent_cap); a project with more definitions listening for one event leaves the rest
unrecorded."""

TRANSIENT_ERRORS = (
    asyncpg.exceptions.TransactionRollbackError,  # deadlock, serialization failure
    asyncpg.exceptions.QueryCanceledError,  # statement or lock timeout
    asyncpg.exceptions.LockNotAvailableError,
)
"""Failures of the moment, not of the event: it is retried, never recorded as failed."""

STARTED_BY = {
    "object_created": "trigger",
    "object_updated": "trigger",
    "event": "event",
    "schedule": "schedule",
}


@dataclass(frozen=True, kw_only=True, slots=True)
class Firing:
    """What one agent's trigger did with one event (before it is stored)."""

    agent: ListeningAgent
    outcome: store.Outcome
    reason: str | None = None
    run_id: str | None = None


def triggers_for(event: OutboxEvent) -> list[str]:
    """The trigger values that listen for ``event`` (schedules name their agent instead)."""
    if event.kind == "object_created":
        names = [f"on_object_created:{event.object_type}"]
        if event.object_type == "Document":
            names.append(DOCUMENT_INGESTED)
        return names
    if event.kind == "object_updated":
        return [f"on_object_updated:{event.object_type}"]
    if event.kind == "event":
        return [f"on_event:{event.event_name}"]
    return []


class TriggerConsumer:
    """Consumes ``kb.trigger_outbox``; one per executor process, run as a background loop."""

    def __init__(
        self,
        pool: asyncpg.Pool,
        listener: Listener,
        limits: TriggerLimits,
        *,
        max_queued_per_project: int,
        poll_s: float = 1.0,
    ) -> None:
        self._pool = pool
        self._listener = listener
        self._limits = limits
        self._max_queued = max_queued_per_project
        self._poll_s = poll_s
        self._wake = asyncio.Event()

    async def run(self, stop: asyncio.Event) -> None:
        """Consumes until ``stop``: on each NOTIFY of a new row, else every ``poll_s``."""
        await self._listener.subscribe(store.OUTBOX_CHANNEL, lambda _payload: self._wake.set())
        self._listener.add_reconnect_callback(self._wake.set)
        stop_waiter = asyncio.ensure_future(stop.wait())
        try:
            while not stop.is_set():
                self._wake.clear()
                try:
                    while not stop.is_set() and await self.consume_one():
                        pass
                except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
                    # An outage (or the pool closing at shutdown): try again at the next wake.
                    if not is_disconnect(exc) and not stop.is_set():
                        log.exception("trigger consumer failed; retrying")
                wake = asyncio.ensure_future(self._wake.wait())
                try:
                    await asyncio.wait(
                        [wake, stop_waiter], timeout=self._poll_s, return_when="FIRST_COMPLETED"
                    )
                finally:
                    wake.cancel()
        finally:
            stop_waiter.cancel()

    async def consume_one(self) -> bool:
        """Acts on the oldest unclaimed event; False when there was none."""
        async with self._pool.acquire() as conn, conn.transaction():
            event = await store.claim_next(conn)
            if event is None:
                return False
            try:
                async with conn.transaction():
                    fired = await self._fire(conn, event)
            except Exception as exc:
                if is_disconnect(exc) or isinstance(exc, TRANSIENT_ERRORS):
                    raise  # the event stays unconsumed; whichever consumer is up retries it
                # A row no rule foresaw (a bug, a hand-written row): recorded and consumed,
                # so it neither blocks the outbox nor disappears unseen.
                log.exception("trigger event failed", event_id=event.id)
                failed = _unexpected(event, exc)
                await _record(conn, event, failed, depth=1)
                fired = [failed]
            await store.mark_consumed(conn, event.id)
        for firing in fired:
            metrics.record_trigger_firing(
                kind=event.kind, outcome=firing.outcome, reason=_reason_kind(firing.reason)
            )
        return True

    async def _fire(self, conn: asyncpg.Connection, event: OutboxEvent) -> list[Firing]:
        if event.kind == "schedule":
            agents = await self._schedule_agents(conn, event)
        else:
            # A graph event names the listeners its write matched (their filters were
            # applied to the properties as written); still listening now is checked here.
            agents = await store.listening_agents(
                conn,
                event.project_id,
                triggers_for(event),
                MAX_LISTENERS_READ,
                names=event.agent_names if event.kind != "event" else None,
            )
        if not agents:
            return []
        values, gone = await self._values(conn, event)
        depth = 1
        if event.source_run_id is not None:
            depth += await store.chain_depth_of(conn, event.project_id, event.source_run_id)
        # The caps are counts checked before inserts: one project's firings are serialised
        # across replicas so two consumers never both pass the same cap.
        await lock_key(conn, f"agentfleet.triggers:{event.project_id}")
        out: list[Firing] = []
        cap = self._limits.max_agents_per_event
        for index, agent in enumerate(agents):
            if index >= cap:
                firing = _skipped(
                    agent,
                    f"agent_cap: only the first {cap} listeners of an event, by name, may "
                    "start (AGENTFLEET_TRIGGER_MAX_AGENTS_PER_EVENT)",
                )
            elif gone:
                firing = _skipped(agent, "object_gone: deleted before it fired")
            else:
                firing = await self._start(conn, event, agent, values, depth)
            await _record(conn, event, firing, depth=depth)
            out.append(firing)
        return out

    async def _schedule_agents(
        self, conn: asyncpg.Connection, event: OutboxEvent
    ) -> list[ListeningAgent]:
        """The schedule's agent; one with no definition (deleted since) is named so that
        its tick is still recorded, as skipped (agent_gone)."""
        payload = event.payload or {}
        name, schedule = str(payload.get("agent_name", "")), str(payload.get("schedule", ""))
        agent = await store.schedule_agent(conn, event.project_id, name, schedule)
        if agent is None:
            return [
                ListeningAgent(
                    id="",
                    name=name or "?",
                    trigger=f"schedule:{schedule}",
                    config={},
                    max_steps=None,
                    default_timeout_s=None,
                )
            ]
        return [agent]

    async def _values(
        self, conn: asyncpg.Connection, event: OutboxEvent
    ) -> tuple[dict[str, Any], bool]:
        """What the input template may name, and whether the event's object is gone."""
        if event.kind in ("object_created", "object_updated"):
            assert event.object_id is not None
            try:
                obj = await GraphRepository.bound(conn).get_object(
                    event.project_id, event.object_id
                )
            except NotFound:
                return {}, True
            return {"event": {"name": event.kind}, "object": obj.to_json()}, False
        if event.kind == "event":
            return {"event": {"name": event.event_name}, "payload": event.payload or {}}, False
        return {"event": {"name": "schedule"}, "payload": event.payload or {}}, False

    async def _start(
        self,
        conn: asyncpg.Connection,
        event: OutboxEvent,
        agent: ListeningAgent,
        values: dict[str, Any],
        depth: int,
    ) -> Firing:
        limits = self._limits
        if not agent.id:
            return _skipped(agent, "agent_gone: the schedule's agent has no definition")
        skip = (event.payload or {}).get("skip") if event.kind == "schedule" else None
        if isinstance(skip, str):
            return _skipped(agent, skip)
        if depth > limits.max_chain_depth:
            return _skipped(
                agent,
                f"chain_depth_cap: chain depth {depth} is past "
                f"AGENTFLEET_TRIGGER_MAX_CHAIN_DEPTH ({limits.max_chain_depth})",
            )
        since = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=1)
        if await store.fired_since(conn, event.project_id, since, limits.max_per_minute) >= (
            limits.max_per_minute
        ):
            return _skipped(
                agent,
                f"rate_cap: the project's triggers started {limits.max_per_minute} runs in the "
                "last minute (AGENTFLEET_TRIGGER_MAX_PER_MINUTE)",
            )
        if await store.queued_triggered(conn, event.project_id, limits.max_queued_per_project) >= (
            limits.max_queued_per_project
        ):
            return _skipped(
                agent,
                f"queued_cap: the project has {limits.max_queued_per_project} triggered runs "
                "queued (AGENTFLEET_TRIGGER_MAX_QUEUED_PER_PROJECT)",
            )
        template = agent.config.get("trigger_input")
        if event.kind == "schedule":
            template = (event.payload or {}).get("input")
        params = StartRunParams(
            project_id=event.project_id,
            agent_name=agent.name,
            agent_definition_id=agent.id,
            input=render_input(template if isinstance(template, str) else None, values),
            request_id=f"{TRIGGER_REQUEST_PREFIX}{event.id}:{agent.name}",
            started_by=STARTED_BY[event.kind],
            trigger_origin=_origin(event, agent),
            chain_depth=depth,
            # Below the span that wrote the event: the run is in the writer's trace.
            trace_id=trace_id_of(event.traceparent),
            trace_parent=event.traceparent,
        )
        try:
            # A savepoint: a refused insert must not abort the event's transaction.
            async with conn.transaction():
                await lock_key(conn, f"agentfleet.run-queue:{event.project_id}")
                run, created, _ = await RunQueue.enqueue_in(
                    conn, params, max_queued=self._max_queued
                )
        except ResourceExhausted as exc:
            return _skipped(agent, f"queue_full: {exc}")
        except NotFound:
            return _skipped(agent, "agent_gone: the definition was deleted before it fired")
        if not created:
            # An event is consumed once, so its key cannot have been used by this consumer:
            # the run under it is not this trigger's.
            return _skipped(agent, "request_id_taken: a run already holds this trigger's key")
        return Firing(agent=agent, outcome="fired", run_id=run.id)


async def _record(
    conn: asyncpg.Connection, event: OutboxEvent, firing: Firing, *, depth: int
) -> None:
    await store.insert_firing(
        conn,
        event,
        agent_name=firing.agent.name,
        trigger=firing.agent.trigger,
        outcome=firing.outcome,
        reason=firing.reason,
        run_id=firing.run_id,
        chain_depth=depth,
    )


def _unexpected(event: OutboxEvent, exc: Exception) -> Firing:
    everyone = ListeningAgent(
        id="", name="*", trigger="*", config={}, max_steps=None, default_timeout_s=None
    )
    return _skipped(everyone, f"error: {type(exc).__name__} while firing event {event.id}")


def _skipped(agent: ListeningAgent, reason: str) -> Firing:
    return Firing(agent=agent, outcome="skipped", reason=reason)


def _reason_kind(reason: str | None) -> str | None:
    """The fixed kind a skip reason starts with (a metric label never holds tenant text)."""
    return None if reason is None else reason.split(":", 1)[0]


def _origin(event: OutboxEvent, agent: ListeningAgent) -> dict[str, Any]:
    origin: dict[str, Any] = {"trigger": agent.trigger, "outbox_id": str(event.id)}
    for key in ("object_id", "object_type", "event_name", "request_id", "schedule_id"):
        value = getattr(event, key)
        if value is not None:
            origin[key] = value
    if event.tick_at is not None:
        origin["tick_at"] = event.tick_at.isoformat()
    if event.source_run_id is not None:
        origin["source_run_id"] = event.source_run_id
    return origin
