"""WatchRun with ``include_descendants``: one stream of a run's events and every descendant's.

Each run of the subtree is followed by its own :meth:`RunWatch.events` stream (so each run's
events come gapless, in seq order, from the store, exactly as a single-run WatchRun sends
them), all pumped into one bounded queue: the runs' events interleave as they are
persisted and read, and a slow client holds every pump back instead of growing a buffer.

Which runs: the descendants recorded when the watch starts (the run's subtree of its spawn
tree, parent links, at most :data:`~services.history.queries.TREE_LIMIT` runs), then every
child a followed run starts (its CHILD_RUN_STARTED, read whether or not internal events are
shown), and, once every followed run has stopped, the subtree is read again so that a
descendant made without such an event (a task run placed under its creator) is not missed.
The stream ends when that read finds nothing new.

``after_seqs`` resumes: per descendant, the last seq the client has (the root's is
``after_seq``); others start from their first event.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass

from agentfleet.errors import NotFound
from agentfleet.runs.run_watch import RunWatch
from agentfleet.v1 import common_pb2

__all__ = ["QUEUE_SIZE", "watch_tree"]

QUEUE_SIZE = 256
"""Events read ahead of the client, across the tree's runs."""

Subtree = Callable[[], Awaitable[list[str]]]
"""The ids of the watched run's descendants now, parents before children."""


@dataclass(frozen=True, slots=True)
class _Done:
    """A run's stream ended."""

    run_id: str


@dataclass(frozen=True, slots=True)
class _Failed:
    """A run's stream failed: the watch fails with it."""

    error: BaseException


_Item = common_pb2.RunEvent | _Done | _Failed


async def watch_tree(
    watch: RunWatch,
    *,
    project_id: str,
    run_id: str,
    after_seq: int,
    after_seqs: Mapping[str, int],
    include_internal: bool,
    subtree: Subtree,
) -> AsyncIterator[common_pb2.RunEvent]:
    """The events of ``run_id`` after ``after_seq`` and of each descendant after its
    ``after_seqs`` entry (0 when absent), live until all of them have stopped. NotFound
    when ``run_id`` is not a run of ``project_id``."""
    queue: asyncio.Queue[_Item] = asyncio.Queue(QUEUE_SIZE)
    pumps: dict[str, asyncio.Task[None]] = {}

    async def pump(target: str, after: int, *, required: bool) -> None:
        try:
            async for event in watch.events(
                project_id=project_id,
                run_id=target,
                after_seq=after,
                # Every event is read: a hidden CHILD_RUN_STARTED still names a child.
                include_internal=True,
            ):
                await queue.put(event)
        except NotFound as exc:
            # A descendant is in the project by construction; the root is checked here.
            if required:
                await queue.put(_Failed(exc))
                return
        except Exception as exc:  # handed to the stream, which raises it to the client
            await queue.put(_Failed(exc))
            return
        await queue.put(_Done(target))

    def follow(target: str, *, required: bool = False) -> None:
        if target in pumps:
            return
        after = after_seq if target == run_id else after_seqs.get(target, 0)
        pumps[target] = asyncio.create_task(
            pump(target, after, required=required), name=f"watch-tree:{target}"
        )

    done: set[str] = set()
    try:
        follow(run_id, required=True)
        for descendant in await subtree():
            follow(descendant)
        while True:
            item = await queue.get()
            if isinstance(item, _Failed):
                raise item.error
            if isinstance(item, _Done):
                done.add(item.run_id)
                if len(done) < len(pumps):
                    continue
                # Every followed run has stopped: a descendant made without an event of
                # its parent (a task run) is found here, or the watch is over.
                for descendant in await subtree():
                    follow(descendant)
                if len(done) == len(pumps):
                    return
                continue
            if (
                item.type == common_pb2.RUN_EVENT_TYPE_CHILD_RUN_STARTED
                and item.child_run.child_run_id
            ):
                follow(item.child_run.child_run_id)
            if include_internal or not item.is_internal:
                yield item
    finally:
        # The stream owns its pumps: a client that hangs up (or an error) stops them all.
        for task in pumps.values():
            task.cancel()
        # Their CancelledErrors are results here; a cancellation of this stream still raises.
        await asyncio.gather(*pumps.values(), return_exceptions=True)
