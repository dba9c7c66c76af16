"""The order in which one process's calls waiting for a model's quota are served.

Start-time fair queueing between projects: each project has a virtual time that grows by
``1 / weight`` with each of its calls served, and the next call served is the one of the
waiting project with the least virtual time, so projects share by weight. A project that
starts waiting is brought up to the virtual time of the last call served: it gets its
share at once (its first call goes within a round of the others, however long their
queues) without credit for the time it waited for nothing. Only waiting projects compete,
so a project alone gets everything (work-conserving). Within a project, the call of the
oldest run goes first (a run near its end is not starved by new ones), then arrival order.
Pure data structure, no I/O.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Generic, TypeVar

T = TypeVar("T")


@dataclass(slots=True)
class _Project(Generic[T]):
    weight: float
    virtual_time: float = 0.0
    heap: list[tuple[float, int, T]] = field(default_factory=list)
    step: float = 0.0
    """``1 / weight``: what each served item adds to ``virtual_time``."""

    def __post_init__(self) -> None:
        self.step = 1 / self.weight


class FairQueue(Generic[T]):
    """Items by project; :meth:`pop` gives the next one to serve."""

    def __init__(self, weights: Mapping[str, float] | None = None) -> None:
        self._weights = dict(weights or {})
        self._projects: dict[str, _Project[T]] = {}
        self._order = itertools.count()
        self._clock = 0.0
        """The virtual time of the last item served."""
        self._removed: set[int] = set()
        self._seqs: dict[int, int] = {}
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def push(self, item: T, *, project: str, age_key: float) -> None:
        """Queues ``item`` of ``project``; lower ``age_key`` (its run's start) goes first."""
        entry = self._projects.get(project)
        if entry is None:
            entry = self._projects[project] = _Project(self._weights.get(project, 1.0))
        if not entry.heap:
            entry.virtual_time = max(entry.virtual_time, self._clock)
        seq = next(self._order)
        self._seqs[id(item)] = seq
        heapq.heappush(entry.heap, (age_key, seq, item))
        self._size += 1

    def remove(self, item: T) -> None:
        """Forgets a queued ``item`` (a call that gave up); lazily dropped when reached."""
        seq = self._seqs.pop(id(item), None)
        if seq is not None:
            self._removed.add(seq)
            self._size -= 1

    def pop(self) -> T | None:
        """The next item to serve, None when empty."""
        # Called for every call that waited: a plain scan (a project or two wait, most of
        # the time) instead of min() over a generator with a key function, and the idle
        # check inline, cost a third of the time.
        projects = self._projects
        while self._size:
            name, entry = "", None
            for candidate, project in projects.items():
                if project.heap and (entry is None or project.virtual_time < entry.virtual_time):
                    name, entry = candidate, project
            assert entry is not None
            heap = entry.heap
            _, seq, item = heapq.heappop(heap)
            if seq in self._removed:
                self._removed.discard(seq)
                if not heap:
                    self._drop_if_idle(name, entry)
                continue
            self._seqs.pop(id(item), None)
            self._size -= 1
            self._clock = entry.virtual_time
            entry.virtual_time += entry.step
            if not heap:
                self._drop_if_idle(name, entry)
            return item
        return None

    def waiting_in(self, project: str) -> int:
        """Items of ``project`` queued (removed ones included until reached)."""
        entry = self._projects.get(project)
        return len(entry.heap) if entry is not None else 0

    def waiting(self) -> dict[str, int]:
        """Items queued per project (removed ones included until reached)."""
        return {n: len(p.heap) for n, p in self._projects.items() if p.heap}

    def active_projects(self) -> int:
        return sum(1 for p in self._projects.values() if p.heap)

    def _drop_if_idle(self, name: str, entry: _Project[T]) -> None:
        # Forgotten once idle and at most one call ahead of the clock: coming back, it
        # starts at the clock, so forgetting costs at most one call of credit and keeps the
        # projects scanned to those that wait.
        if not entry.heap and entry.virtual_time <= self._clock + entry.step:
            del self._projects[name]
