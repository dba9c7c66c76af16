"""The run-event NOTIFY of the executor's hot writes, sent after they commit, many at once.

PostgreSQL takes one lock for the whole cluster in the commit of every transaction that sent
a NOTIFY (so that notifications are queued in commit order) and holds it through that
commit's WAL flush. A step write that NOTIFYs therefore commits one at a time with every
other such write of every executor: about 1 / (WAL flush time) of them per second, whatever
the number of replicas (``bench/scale_out.py``). A transaction that only NOTIFYs writes no
WAL, so its commit does not wait for a flush.

The run's start and the step's two writes (one statement each, committing on their own)
therefore NOTIFY through a :class:`RunEventNotifier` once they have committed: it sends
what has come in since its last send in one statement, keeping the highest seq of each run
(a notification only says "run X has events up to seq N"; followers read the rows).
Appends inside a caller's transaction keep their NOTIFY at commit (``append_events``): they
are a run's few status changes, not its steps.

A notification that is lost (the process ends between the commit and the send, the send
fails) costs followers latency, never an event: :mod:`agentfleet.runs.run_watch` re-reads every
followed run every ``RECHECK_INTERVAL_S``.
"""

from __future__ import annotations

import asyncio

import asyncpg
import structlog

from agentfleet.events.store import CHANNEL
from agentfleet.reconnect import database_outage, is_disconnect

__all__ = ["RunEventNotifier"]

log = structlog.get_logger(__name__)

_SEND = (
    "SELECT pg_notify(channel, payload) FROM unnest($1::text[], $2::text[]) AS n(channel, payload)"
)


class RunEventNotifier:
    """Sends ``"<run_id>:<last seq>"`` on :data:`CHANNEL` for writes that have committed.

    One per process is the point (its sends carry every run's writes); one send at a time,
    on a connection of ``pool``. Not thread-safe: call it from the pool's event loop."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool
        self._pending: dict[str, int] = {}
        """run_id -> highest seq not sent yet."""
        self._wakeups: dict[tuple[str, str], None] = {}
        """(channel, payload) of other notifications not sent yet, in order, once each."""
        self._sending: asyncio.Task[None] | None = None

    def committed(self, run_id: str, last_seq: int) -> None:
        """The run's events up to ``last_seq`` have committed: notify followers soon.

        Returns at once; the send starts now unless one is under way, which sends this
        with whatever else comes in meanwhile when it is done."""
        if self._pending.get(run_id, 0) < last_seq:
            self._pending[run_id] = last_seq
        self._start()

    def wake(self, channel: str, payload: str) -> None:
        """Another notification of something committed (a queued run's wake-up of the
        workers), sent with the next batch: it costs no transaction of its own, and keeps
        the NOTIFY out of the commit that wrote it (see the module's docstring)."""
        self._wakeups[(channel, payload)] = None
        self._start()

    def _start(self) -> None:
        if self._sending is None:
            self._sending = asyncio.get_running_loop().create_task(self._send_pending())

    async def flush(self) -> None:
        """Waits until everything given to :meth:`committed` so far was sent (or failed)."""
        while self._sending is not None:
            await asyncio.shield(self._sending)

    async def _send_pending(self) -> None:
        try:
            while self._pending or self._wakeups:
                batch, self._pending = self._pending, {}
                wakeups, self._wakeups = list(self._wakeups), {}
                notes = [(CHANNEL, f"{run_id}:{seq}") for run_id, seq in batch.items()]
                notes += wakeups
                try:
                    await self._pool.execute(_SEND, [c for c, _ in notes], [p for _, p in notes])
                except Exception as exc:  # a lost notification costs latency only
                    # Followers re-read on their own within RECHECK_INTERVAL_S, workers
                    # claim on their poll. An outage is said once per process, with every
                    # other operation's.
                    if is_disconnect(exc):
                        database_outage.lost(exc, what="notifying run events")
                    else:
                        log.warning(
                            "run_event_notifications_lost",
                            runs=len(batch),
                            wakeups=len(wakeups),
                            error=str(exc),
                        )
        finally:
            self._sending = None
