"""``agentfleet run``, ``resume`` and ``cancel``: start or steer a run and follow it live.

The root run's events come from the executor's stream (StartRun / ResumeRun); each child
announced by a CHILD_RUN_STARTED event is followed with the history service's WatchRun
(which replays from the start, so nothing before the watch began is missed). The persisted
run tree is fetched once a second for steps and tokens, and once more at the end.

A definition with ``streaming`` set sends its replies as MODEL_TEXT_DELTA pieces: the root
run's text is printed under the tree as it comes (``--json`` prints every piece as an event).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
from collections.abc import AsyncIterator, Coroutine, Iterator
from typing import Any

from rich.console import Group, RenderableType
from rich.live import Live
from rich.text import Text

from agentfleet.cli.client import Connection
from agentfleet.cli.live import RunTreeView
from agentfleet.cli.manage.budget import dollars_to_nanos
from agentfleet.cli.manage.tools import key_values
from agentfleet.cli.render import console, print_json, run_status, styled_status
from agentfleet.timestamps import duration_proto
from agentfleet.v1 import common_pb2, executor_pb2, history_pb2

_ENDED_BEFORE = ("completed", "failed")
"""Statuses CancelRun cannot have caused: the run had ended on its own."""
TREE_REFRESH_S = 1.0
TREE_DRAIN_S = 5.0
"""How long the live tree waits, after the root run's stream ended, for the rest of its
descendants' events (they have normally all been shown by then)."""
_ROOT_DONE = object()
_WATCH_DONE = object()
STREAMED_LINES = 20
"""Lines of the streaming reply shown under the tree (the tail)."""


class StreamedText:
    """The root run's reply text as it streams in, for the live view."""

    def __init__(self) -> None:
        self.step = 0
        self.text = ""

    def apply(self, event: common_pb2.RunEvent, *, root_run_id: str | None) -> bool:
        """Takes a MODEL_TEXT_DELTA of the root run's answer text; True when it did."""
        if event.WhichOneof("payload") != "model_text_delta" or event.run_id != root_run_id:
            return False
        delta = event.model_text_delta
        if delta.thought:
            return False
        if delta.step != self.step:
            self.step, self.text = delta.step, ""
        self.text += delta.text
        return True

    def render(self, tree: RenderableType) -> RenderableType:
        if not self.text:
            return tree
        tail = "\n".join(self.text.splitlines()[-STREAMED_LINES:])
        return Group(tree, Text(tail))


async def run_agent(conn: Connection, args: argparse.Namespace) -> int:
    request = executor_pb2.StartRunRequest(
        project_id=conn.project,
        agent_name=args.agent,
        input=args.input,
        labels=key_values(args.label, "--label"),
        request_id=args.request_id or "",
        include_internal=args.internal,
    )
    if args.max_steps is not None:
        request.max_steps = args.max_steps
    if args.timeout is not None:
        request.timeout.CopyFrom(duration_proto(args.timeout))
    tree_cost = dollars_to_nanos(args.max_tree_usd, "--max-tree-usd")
    if tree_cost is not None:
        request.max_tree_cost_nanos = tree_cost
    return await follow(
        conn, conn.executor().StartRun(request), json_mode=args.json, internal=args.internal
    )


async def resume_run(conn: Connection, args: argparse.Namespace) -> int:
    request = executor_pb2.ResumeRunRequest(
        project_id=conn.project,
        run_id=args.run_id,
        input=args.input or "",
        include_internal=args.internal,
    )
    if args.max_steps is not None:
        request.max_steps = args.max_steps
    return await follow(
        conn,
        conn.executor().ResumeRun(request),
        json_mode=args.json,
        internal=args.internal,
        fresh=False,
    )


async def cancel_run(conn: Connection, args: argparse.Namespace) -> int:
    reply = await conn.executor().CancelRun(
        executor_pb2.CancelRunRequest(
            project_id=conn.project, run_id=args.run_id, reason=args.reason or ""
        )
    )
    status = run_status(reply.run.status)
    if status in _ENDED_BEFORE:
        # CancelRun leaves a run that had ended unchanged; saying "cancel requested" read
        # as if something had been stopped.
        console.print(
            Text.assemble(
                f"run {reply.run.id} had already ended (",
                styled_status(status),
                "); nothing was cancelled",
            ),
            soft_wrap=True,
        )
    else:
        console.print(
            Text.assemble(f"cancel requested for {reply.run.id}: ", styled_status(status))
        )
    return 0


async def follow(
    conn: Connection,
    stream: AsyncIterator[common_pb2.RunEvent],
    *,
    json_mode: bool,
    internal: bool = False,
    fresh: bool = True,
) -> int:
    """Shows a run tree live until the root run's stream ends; returns the exit code.
    ``internal``: the children's streams include internal events too, as the root's does.
    ``fresh``: the run starts now (StartRun), so its whole tree is new and one WatchRun
    include_descendants follows every descendant; a resumed run (False) has older children
    whose history that would replay, so each child it starts now is followed alone."""
    view = RunTreeView()
    streamed = StreamedText()
    queue: asyncio.Queue[common_pb2.RunEvent | object] = asyncio.Queue()
    history = conn.history()
    finished = asyncio.Event()

    async def pump(source: AsyncIterator[common_pb2.RunEvent], *, root: bool) -> None:
        async for event in source:
            # The tree's stream repeats the root's own events, which come from ``stream``.
            if root or event.run_id != view.root_run_id:
                queue.put_nowait(event)
        queue.put_nowait(_ROOT_DONE if root else _WATCH_DONE)

    async def refresh_tree() -> None:
        while not finished.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(finished.wait(), TREE_REFRESH_S)
            if view.root_run_id is not None and not finished.is_set():
                view.merge_tree(await _tree(conn, history, view.root_run_id))

    def watch(run_id: str, *, tree: bool) -> Coroutine[Any, Any, None]:
        request = history_pb2.WatchRunRequest(
            project_id=conn.project,
            run_id=run_id,
            include_descendants=tree,
            include_internal=internal,
        )
        return pump(history.WatchRun(request), root=False)

    loop = asyncio.get_running_loop()
    async with asyncio.TaskGroup() as tasks:
        tasks.create_task(pump(stream, root=True))
        watchers: list[asyncio.Task[None]] = []
        if not json_mode:
            tasks.create_task(refresh_tree())
        with _live(view, enabled=not json_mode) as live:
            drain_until: float | None = None
            watchers_done = 0
            while not (drain_until is not None and watchers_done == len(watchers)):
                wait = None if drain_until is None else max(0.0, drain_until - loop.time())
                try:
                    item = await asyncio.wait_for(queue.get(), wait)
                except TimeoutError:
                    break
                if item is _ROOT_DONE:
                    # Children end before their parent does: their streams are let finish
                    # (each ends once its runs have stopped), for at most TREE_DRAIN_S.
                    drain_until = loop.time() + TREE_DRAIN_S
                    continue
                if item is _WATCH_DONE:
                    watchers_done += 1
                    continue
                assert isinstance(item, common_pb2.RunEvent)
                event = item
                if json_mode:
                    print_json(event)
                if streamed.apply(event, root_run_id=view.root_run_id or event.run_id):
                    if live is not None:
                        live.update(streamed.render(view.render()))
                    continue
                spawned = view.apply(event)
                if spawned and fresh and view.root_run_id is not None:
                    # One stream for every descendant (WatchRun include_descendants), opened
                    # at the first child: a tree of any size costs one more stream, not one
                    # per run against the per-token stream limit.
                    if not watchers:
                        watchers.append(tasks.create_task(watch(view.root_run_id, tree=True)))
                else:
                    watchers.extend(tasks.create_task(watch(c, tree=False)) for c in spawned)
                if live is not None:
                    live.update(streamed.render(view.render()))
        finished.set()
        # Whatever the tree's stream has not shown by now is in the persisted tree fetched
        # below.
        for watcher in watchers:
            watcher.cancel()
    if view.root_run_id is None:
        return 1
    root = view.nodes[view.root_run_id]
    if not json_mode:
        view.merge_tree(await _tree(conn, history, view.root_run_id))
        console.print(view.render())
        if root.summary:
            console.print(root.summary)
        for node in view.paused():
            why = f": {node.pause_reason}" if node.pause_reason else ""
            console.print(
                f"{node.agent_name} {node.run_id} paused{why}; "
                f"continue it with `agentfleet resume {node.run_id}`",
                soft_wrap=True,  # never folded inside the command to copy
            )
    return 0 if root.status in ("completed", "paused") else 1


async def _tree(conn: Connection, history: object, run_id: str) -> history_pb2.GetRunTreeResponse:
    return await history.GetRunTree(  # type: ignore[attr-defined, no-any-return]
        history_pb2.GetRunTreeRequest(project_id=conn.project, run_id=run_id)
    )


@contextlib.contextmanager
def _live(view: RunTreeView, *, enabled: bool) -> Iterator[Live | None]:
    if not enabled:
        yield None
        return
    # Transient: the final tree is printed once, from the persisted state, after the run.
    with Live(view.render(), console=console, refresh_per_second=8, transient=True) as live:
        yield live
