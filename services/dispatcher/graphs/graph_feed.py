"""One task graph's reads, shared by every WatchTaskGraph stream of it in this process.

A :class:`GraphFeed` belongs to one ``(project_id, graph_id)``, the key a stream is given
only after its own project check. It keeps the latest :class:`GraphSnapshot` (the full
view, read once) and, for the last snapshots, which tasks each one changed. A stream
remembers the snapshot it last sent (:class:`Seen`: its number and task versions) and takes
from a newer one only the tasks changed since: N streams of a graph cost one read per
change, and each stream work in proportion to what changed, not to the graph's size.

Reads go through :class:`agentfleet.runs.shared_reads.SharedReads` and first compare the
graph's stamp (``GraphReader.load_if_changed``): the periodic recheck of a graph in which
nothing changed is one aggregate row, not every task decoded and sorted.
"""

from __future__ import annotations

import uuid
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import asyncpg

from agentfleet.graph import GraphObject, GraphRepository
from agentfleet.runs.shared_reads import SharedFeed
from agentfleet.timestamps import timestamp_proto
from agentfleet.v1 import dispatcher_pb2
from services.dispatcher.graphs.graph_reads import GraphReader, GraphView
from services.dispatcher.models import GRAPH_STATUS, TaskView, task_to_proto

__all__ = ["CHANGES_KEPT", "Change", "GraphFeed", "GraphSnapshot", "Seen", "task_event"]

E = dispatcher_pb2

CHANGES_KEPT = 64
"""Snapshots whose changed tasks are kept; a stream further behind compares every task."""

TaskState = tuple[int, str]
"""A task's (version, status) as a stream last sent it."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Seen:
    """What a stream has sent: the snapshot's number and its tasks' states (shared, never
    mutated; a stream keeps this, not the view, so a slow one holds no old view alive)."""

    number: int
    states: Mapping[str, TaskState]


@dataclass(frozen=True, kw_only=True, slots=True)
class GraphSnapshot:
    """One full read of the graph, numbered from 1 in its feed."""

    view: GraphView
    seen: Seen
    position: Mapping[str, int]
    """Task id -> index in ``view.tasks`` (topological order, the order events go in)."""
    _protos: dict[str, E.Task] = field(default_factory=dict)
    _opening: list[E.TaskEvent] = field(default_factory=list)

    # Wire forms are built once per snapshot for every stream that sends them (converting
    # a large graph's tasks costs far more than sending them) and never mutated after.

    def task_proto(self, task: TaskView) -> E.Task:
        """The wire form of one of this snapshot's tasks."""
        proto = self._protos.get(task.object.id)
        if proto is None:
            proto = self._protos[task.object.id] = task_to_proto(task)
        return proto

    def opening(self) -> list[E.TaskEvent]:
        """The SNAPSHOT event of every task, in order: what a new stream sends first."""
        if len(self._opening) < len(self.view.tasks):
            self._opening[:] = [
                task_event(self.view, E.TASK_EVENT_TYPE_SNAPSHOT, task=self.task_proto(t))
                for t in self.view.tasks
            ]
        return self._opening


@dataclass(frozen=True, kw_only=True, slots=True)
class _Changed:
    """The tasks whose version a snapshot changed, and their sessions read after it."""

    number: int
    task_ids: frozenset[str]
    sessions: Mapping[str, GraphObject]


@dataclass(frozen=True, kw_only=True, slots=True)
class Change:
    """A task whose version differs from what the stream sent, with what it sent (None:
    never) and the session the task names, as read after the change."""

    task: TaskView
    before: TaskState | None
    session: GraphObject | None


class GraphFeed(SharedFeed):
    """The shared reads, snapshot and wake-ups of one graph's streams in this process."""

    def __init__(
        self, *, reader: GraphReader, pool: asyncpg.Pool, project_id: str, graph_id: str
    ) -> None:
        super().__init__()
        self.project_id = project_id
        self.graph_id = graph_id
        self._reader = reader
        self._pool = pool
        self._stamp: tuple[Any, ...] | None = None
        self._snapshot: GraphSnapshot | None = None
        self._changes: deque[_Changed] = deque(maxlen=CHANGES_KEPT)

    # -- streams ---------------------------------------------------------------------------

    def notify(self) -> None:
        """The graph changed (a notification, or one may have been lost): read again."""
        self._reads.owe()
        self._wake_all()

    async def current(self, need: int) -> GraphSnapshot:
        """The snapshot once a read numbered above ``need`` is done (one read for all the
        streams that need it; NotFound if the graph is gone)."""
        await self._reads.refresh(need)
        assert self._snapshot is not None
        return self._snapshot

    async def changes(self, seen: Seen, snapshot: GraphSnapshot) -> list[Change]:
        """The tasks of ``snapshot`` whose version differs from ``seen``, in its order."""
        kept = [c for c in self._changes if seen.number < c.number <= snapshot.seen.number]
        if len(kept) < snapshot.seen.number - seen.number:
            # Behind what is kept (a slow stream): compare every task, read their sessions.
            tasks = [t for t in snapshot.view.tasks if _moved(t, seen)]
            sessions = await self._sessions([t.object for t in tasks])
            return [
                Change(task=t, before=seen.states.get(t.object.id), session=_session(t, sessions))
                for t in tasks
            ]
        latest: dict[str, Mapping[str, GraphObject]] = {}
        for changed in kept:  # oldest first: a task's last change wins
            latest.update(dict.fromkeys(changed.task_ids, changed.sessions))
        order = sorted(snapshot.position[i] for i in latest if i in snapshot.position)
        out = []
        for index in order:
            task = snapshot.view.tasks[index]
            if _moved(task, seen):
                before = seen.states.get(task.object.id)
                session = _session(task, latest[task.object.id])
                out.append(Change(task=task, before=before, session=session))
        return out

    # -- reading ------------------------------------------------------------------------

    async def _read(self) -> None:
        stamp, view = await self._reader.load_if_changed(
            self.project_id, self.graph_id, self._stamp
        )
        if view is None:
            return
        previous = self._snapshot
        states = {t.object.id: (t.object.version, str(t.object.status)) for t in view.tasks}
        number = previous.seen.number + 1 if previous else 1
        if previous is not None:
            # The first snapshot is sent whole; later ones are sent as what they changed.
            changed = [t for t in view.tasks if _moved(t, previous.seen)]
            self._changes.append(
                _Changed(
                    number=number,
                    task_ids=frozenset(t.object.id for t in changed),
                    sessions=await self._sessions([t.object for t in changed]),
                )
            )
        self._snapshot = GraphSnapshot(
            view=view,
            seen=Seen(number=number, states=states),
            position={t.object.id: i for i, t in enumerate(view.tasks)},
        )
        self._stamp = stamp
        self._wake_all()

    async def _sessions(self, tasks: list[GraphObject]) -> dict[str, GraphObject]:
        ids = [
            str(uuid.UUID(str(t.properties["session_id"])))
            for t in tasks
            if t.properties.get("session_id")
        ]
        if not ids:
            return {}
        return await GraphRepository(self._pool).get_objects(self.project_id, ids)


def task_event(
    view: GraphView,
    kind: int,
    *,
    task: E.Task | None = None,
    previous: int = 0,
    session: E.TaskSession | None = None,
) -> E.TaskEvent:
    """A TaskEvent of the graph as ``view`` shows it (status, counts, last change)."""
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


def _moved(task: TaskView, seen: Seen) -> bool:
    """Whether the task's version differs from what ``seen`` holds (or it is new)."""
    state = seen.states.get(task.object.id)
    return state is None or state[0] != task.object.version


def _session(task: TaskView, sessions: Mapping[str, GraphObject]) -> GraphObject | None:
    return sessions.get(str(task.object.properties.get("session_id")))
