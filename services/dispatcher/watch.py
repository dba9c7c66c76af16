"""WatchTaskGraph: a snapshot of every task, then each change, until the graph is done.

Changes are found by re-reading the graph when ``NOTIFY agentfleet_task_changes`` (payload:
graph id) or ``agentfleet_tasks_added`` (payload: project id, sent by ``create_subtasks``)
arrives, or after a short poll, and comparing task versions with what was already sent.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator

import asyncpg

from agentfleet.db import Listener, Notification
from agentfleet.graph import TASKS_ADDED_CHANNEL, GraphObject, GraphRepository
from agentfleet.timestamps import timestamp_proto
from agentfleet.v1 import dispatcher_pb2
from services.dispatcher.graph_reads import GraphReader, GraphView
from services.dispatcher.models import (
    GRAPH_STATUS,
    TASK_STATUS,
    TERMINAL_GRAPH,
    session_to_proto,
    task_to_proto,
)
from services.dispatcher.store.common import CHANGES_CHANNEL

__all__ = ["GraphWatcher"]

POLL_S = 1.0
E = dispatcher_pb2


class GraphWatcher:
    """Streams task graph changes; one shared listener for every watch of the process."""

    def __init__(self, graphs: GraphReader, pool: asyncpg.Pool, listener: Listener) -> None:
        self._graphs = graphs
        self._pool = pool
        self._listener = listener

    async def watch(self, project_id: str, graph_id: str) -> AsyncIterator[E.TaskEvent]:
        signal = asyncio.Event()

        def on_note(note: Notification) -> None:
            if note.payload in (graph_id, project_id):
                signal.set()

        await self._listener.subscribe(CHANGES_CHANNEL, on_note)
        await self._listener.subscribe(TASKS_ADDED_CHANNEL, on_note)
        try:
            view = await self._graphs.load(project_id, graph_id)
            sent: dict[str, tuple[int, str]] = {}
            for task in view.tasks:
                sent[task.object.id] = (task.object.version, str(task.object.status))
                yield self._event(view, E.TASK_EVENT_TYPE_SNAPSHOT, task=task_to_proto(task))
            status = view.status
            while status not in TERMINAL_GRAPH:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(signal.wait(), timeout=POLL_S)
                signal.clear()
                view = await self._graphs.load(project_id, graph_id)
                changed = [
                    t
                    for t in view.tasks
                    if sent.get(t.object.id, (None, None))[0] != t.object.version
                ]
                sessions = await self._sessions(project_id, [t.object for t in changed])
                for task in changed:
                    before = sent.get(task.object.id)
                    sent[task.object.id] = (task.object.version, str(task.object.status))
                    if before is None:
                        yield self._event(
                            view, E.TASK_EVENT_TYPE_TASK_ADDED, task=task_to_proto(task)
                        )
                    elif before[1] != task.object.status:
                        session = sessions.get(str(task.object.properties.get("session_id")))
                        yield self._event(
                            view,
                            E.TASK_EVENT_TYPE_TASK_STATUS_CHANGED,
                            task=task_to_proto(task),
                            previous=TASK_STATUS.get(before[1], 0),
                            session=session_to_proto(session) if session else None,
                        )
                if view.status != status:
                    status = view.status
                    yield self._event(view, E.TASK_EVENT_TYPE_GRAPH_STATUS_CHANGED)
        finally:
            await self._listener.unsubscribe(CHANGES_CHANNEL, on_note)
            await self._listener.unsubscribe(TASKS_ADDED_CHANNEL, on_note)

    async def _sessions(self, project_id: str, tasks: list[GraphObject]) -> dict[str, GraphObject]:
        ids = [
            str(uuid.UUID(str(t.properties["session_id"])))
            for t in tasks
            if t.properties.get("session_id")
        ]
        if not ids:
            return {}
        return await GraphRepository(self._pool).get_objects(project_id, ids)

    @staticmethod
    def _event(
        view: GraphView,
        kind: int,
        *,
        task: E.Task | None = None,
        previous: int = 0,
        session: E.TaskSession | None = None,
    ) -> E.TaskEvent:
        event = E.TaskEvent(
            type=kind,  # type: ignore[arg-type]
            task_graph_id=view.object.id,
            previous_status=previous,  # type: ignore[arg-type]
            graph_status=GRAPH_STATUS[view.status],
            counts=view.counts.to_proto(),
        )
        if task is not None:
            event.task.CopyFrom(task)
        if session is not None:
            event.session.CopyFrom(session)
        stamp = timestamp_proto(view.update_time)
        if stamp is not None:
            event.create_time.CopyFrom(stamp)
        return event
