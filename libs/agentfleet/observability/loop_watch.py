"""The event loop's own watch: how late the loop runs what is due
(``agentfleet.event_loop.lag``), and a warning naming the RPC or run that held it.

Every project's calls on a process share its one loop, so a handler that computes for two
seconds without awaiting makes every other call wait two seconds. A timer due every
:data:`TICK_S` fires late by exactly how long the loop was held: that lateness is the lag,
one histogram point per tick (a timer and a clock read, ~10 a second).

Naming what held it. When the timer finally runs, the holder has usually finished (a
blocking handler returns without yielding again) and ``asyncio.current_task()`` there is the
watch itself, so the culprit cannot be asked for then. Two things name it:

- A watchdog thread looks while the loop is still held: each tick it checks the time of the
  loop's last tick, and past the threshold reads ``asyncio.current_task(loop)``, the task the
  loop is running at that moment, and what that task registered with :func:`doing` when it
  began (an RPC's method and project, a run's id). The thread gets the GIL while the holder
  runs Python code (the interpreter hands it over every 5 ms), the usual case (schema
  validation, redaction, a loop over a big structure).
- A holder in C code that keeps the GIL (``re``, one huge ``json.loads``) or a task that
  registered nothing is not seen by the thread; the warning then lists what was in flight
  during the stall (begun before it ended, not finished before it began, at most
  :data:`MAX_NAMED`). On a busy process that is a few names, but the culprit is among them.

Registering costs two dict writes per RPC or run; only the watch's own thread reads them.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field

import structlog

from agentfleet.observability import metrics

log = structlog.get_logger(__name__)

TICK_S = 0.1
"""How often the loop's lag is measured; a stall shorter than this may be read as less."""
MAX_NAMED = 10
"""At most this many in-flight RPCs and runs are named in one warning."""


@dataclass(slots=True)
class _Doings:
    """What each task of the loop is doing, as registered by :func:`doing`."""

    by_task: dict[asyncio.Task[object], str] = field(default_factory=dict)
    in_flight: dict[object, tuple[str, float]] = field(default_factory=dict)
    """Per registration: its label and when it began."""
    finished: deque[tuple[str, float, float]] = field(default_factory=lambda: deque(maxlen=64))
    """The latest registrations to end: label, begun, ended."""

    def during(self, start: float, end: float) -> list[str]:
        """Labels of the registrations in flight at some time in [start, end], oldest first."""
        seen = [(began, label) for label, began in self.in_flight.values() if began <= end]
        seen += [(began, label) for label, began, ended in self.finished if ended >= start]
        names = dict.fromkeys(label for _, label in sorted(seen))
        return list(names)[:MAX_NAMED]


_doings = _Doings()


@contextlib.contextmanager
def doing(label: str) -> Iterator[None]:
    """Registers what the current task does for the block (``rpc <method> project <id>``,
    ``run <id> project <id>``), for the watch to name if the loop is held meanwhile."""
    task = asyncio.current_task()
    key = object()
    began = time.monotonic()
    _doings.in_flight[key] = (label, began)
    previous = _doings.by_task.get(task) if task is not None else None
    if task is not None:
        _doings.by_task[task] = label
    try:
        yield
    finally:
        del _doings.in_flight[key]
        _doings.finished.append((label, began, time.monotonic()))
        if task is not None:
            if previous is None:
                _doings.by_task.pop(task, None)
            else:
                _doings.by_task[task] = previous


def rpc_label(method: str, request: object) -> str:
    """An RPC as the watch names it: its method, and the project its request names (not
    checked yet: the work that holds the loop may be the admission itself)."""
    project = getattr(request, "project_id", "")
    return f"rpc {method} project {project[:64]}" if project else f"rpc {method}"


class LoopWatch:
    """Measures the running loop's lag every tick and warns past ``warn_s``."""

    def __init__(self, *, warn_s: float, tick_s: float = TICK_S) -> None:
        self.warn_s = warn_s
        self.tick_s = tick_s
        self._loop = asyncio.get_running_loop()
        self._last_tick = time.monotonic()
        self._seen_holding: str | None = None
        """What the thread saw the loop running during the current stall."""
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="loop-watch", daemon=True)

    async def run(self, stopping: asyncio.Event) -> None:
        """Ticks until ``stopping`` is set."""
        self._thread.start()
        try:
            while not stopping.is_set():
                due = time.monotonic() + self.tick_s
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stopping.wait(), self.tick_s)
                self._tick(due)
        finally:
            self._stopped.set()
            await asyncio.to_thread(self._thread.join)

    def _tick(self, due: float) -> None:
        now = time.monotonic()
        lag = max(0.0, now - due)
        metrics.record_loop_lag(lag)
        held_by, self._seen_holding = self._seen_holding, None
        self._last_tick = now
        if lag >= self.warn_s:
            log.warning(
                "event loop held",
                lag_s=round(lag, 3),
                held_by=held_by,
                in_flight=_doings.during(due, now),
                threshold_s=self.warn_s,
                hint="AGENTFLEET_LOOP_LAG_WARN_S",
            )

    def _watch(self) -> None:
        while not self._stopped.wait(self.tick_s):
            if time.monotonic() - self._last_tick < self.warn_s:
                continue
            task = asyncio.current_task(self._loop)
            label = _doings.by_task.get(task) if task is not None else None
            if label is not None:
                self._seen_holding = label
