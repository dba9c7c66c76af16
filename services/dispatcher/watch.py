"""WatchTaskGraph: a snapshot of every task, then each change, until the graph is done.

Every stream of a graph in this process shares one :class:`~services.dispatcher.graphs.graph_feed.
GraphFeed`: a change is read once for all of them, when ``NOTIFY agentfleet_task_changes``
names the graph (every writer of its tasks sends it, ``create_subtasks`` included) or at
the periodic recheck, which first compares the graph's stamp and reads in full only if it
differs. Events are what changed since the snapshot the stream last sent (task versions),
so any replica sends the same events in the same order.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import asyncpg

from agentfleet.postgres.db import Listener, Notification
from agentfleet.runs.shared_reads import joined_feed
from agentfleet.v1 import dispatcher_pb2
from services.dispatcher.graphs.graph_feed import GraphFeed, task_event
from services.dispatcher.graphs.graph_reads import GraphReader
from services.dispatcher.models import TASK_STATUS, TERMINAL_GRAPH, session_to_proto
from services.dispatcher.store.common import CHANGES_CHANNEL

__all__ = ["GraphWatcher"]

POLL_S = 1.0
"""The recheck when no notification came (one lost, or a write that sends none): a stamp
read per graph per process, not per stream."""
E = dispatcher_pb2


class GraphWatcher:
    """Streams task graph changes; one listener subscription and one feed per watched graph
    for every stream of the process. The owner calls :meth:`start` once the listener is."""

    def __init__(self, graphs: GraphReader, pool: asyncpg.Pool, listener: Listener) -> None:
        self._graphs = graphs
        self._pool = pool
        self._listener = listener
        self._feeds: dict[str, dict[str, GraphFeed]] = {}
        """graph_id -> project_id -> feed. A graph has one project; the key keeps a feed's
        reads scoped by the project its streams were checked against."""

    async def start(self) -> None:
        await self._listener.subscribe(CHANGES_CHANNEL, self._on_note)
        # Notifications sent while the listener was away are lost: every feed re-reads.
        self._listener.add_reconnect_callback(self._wake_all)

    def feed(self, project_id: str, graph_id: str) -> GraphFeed | None:
        """The graph's current feed, if it has streams here (for tests and diagnostics)."""
        return self._feeds.get(graph_id, {}).get(project_id)

    def _on_note(self, note: Notification) -> None:
        for feed in self._feeds.get(note.payload, {}).values():
            feed.notify()

    def _wake_all(self) -> None:
        for feeds in self._feeds.values():
            for feed in feeds.values():
                feed.notify()

    async def watch(self, project_id: str, graph_id: str) -> AsyncIterator[E.TaskEvent]:
        with self._joined(project_id, graph_id) as (feed, waiter):
            # A read that starts after joining: the snapshot is as fresh as the request.
            snapshot = await feed.current(feed.reads_started)
            for event in snapshot.opening():
                yield event
            seen, status = snapshot.seen, snapshot.view.status
            while status not in TERMINAL_GRAPH:
                need = await feed.woken(waiter, POLL_S)
                waiter.clear()  # a wake-up during the read below waits for the next one
                snapshot = await feed.current(need)
                if snapshot.seen.number == seen.number:
                    continue
                view = snapshot.view
                for change in await feed.changes(seen, snapshot):
                    task = change.task
                    if change.before is None:
                        yield task_event(
                            view, E.TASK_EVENT_TYPE_TASK_ADDED, task=snapshot.task_proto(task)
                        )
                    elif change.before[1] != task.object.status:
                        session = change.session
                        yield task_event(
                            view,
                            E.TASK_EVENT_TYPE_TASK_STATUS_CHANGED,
                            task=snapshot.task_proto(task),
                            previous=TASK_STATUS.get(change.before[1], 0),
                            session=session_to_proto(session) if session else None,
                        )
                seen = snapshot.seen
                if view.status != status:
                    status = view.status
                    yield task_event(view, E.TASK_EVENT_TYPE_GRAPH_STATUS_CHANGED)

    def _joined(
        self, project_id: str, graph_id: str
    ) -> contextlib.AbstractContextManager[tuple[GraphFeed, asyncio.Event]]:
        return joined_feed(
            self._feeds,
            graph_id,
            project_id,
            lambda: GraphFeed(
                reader=self._graphs, pool=self._pool, project_id=project_id, graph_id=graph_id
            ),
        )
