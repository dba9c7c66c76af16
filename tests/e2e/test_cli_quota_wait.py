"""What the CLI shows of a run waiting for its model's quota (issue 31): ``agentfleet show``
and ``agentfleet tree`` print the waiting line while the run waits and none after; the live tree of
``agentfleet run``, fed the run's real events, shows it on the waiting node until the wait
ends. Services in-process, auth on, the stub answering 429 with a RetryInfo."""

from __future__ import annotations

import asyncio
import io
import re
from pathlib import Path

from rich.console import Console

from agentfleet.cli.live import RunTreeView
from agentfleet.gemini_stub import GeminiStub, Reply, Script
from agentfleet.v1 import common_pb2, executor_pb2, executor_pb2_grpc, history_pb2, history_pb2_grpc
from tests.e2e.cli_harness import MARKER, Cli, cli, install

__all__ = ["cli"]

RETRY_S = 4
"""The stub's retryDelay (the services' retry ceiling is 8 s)."""
INPUT = "go [red]now[/red] [/unbalanced]"
"""Tenant text that rich would read as markup (and fail on) unless shown as written."""
# The limiter blocks the budget for the 429's retryDelay; the call's wait is shown once it
# has lasted 0.5 s, with what is left of it.
WAITING = re.compile(rf"waiting for model quota: gemini-2\.5-flash, about [1-{RETRY_S}] s")


def rendered(view: RunTreeView) -> str:
    console = Console(width=200, file=io.StringIO())
    console.print(view.render())
    return console.file.getvalue()  # type: ignore[attr-defined]


async def test_show_and_the_live_tree_print_the_waiting_line(
    cli: Cli, gemini_stub: GeminiStub, tmp_path: Path
) -> None:
    await install(cli, tmp_path)
    gemini_stub.add_script(
        Script(
            name="helper",
            match_system=MARKER,
            replies=[
                Reply(error_status=429, retry_delay_s=RETRY_S),
                Reply(text="answered after the wait"),
            ],
        )
    )
    token, project = cli.environ["AGENTFLEET_TOKEN"], cli.environ["AGENTFLEET_PROJECT"]
    executor = executor_pb2_grpc.ExecutorServiceStub(cli.stack.channel("executor", token=token))
    history = history_pb2_grpc.HistoryServiceStub(cli.stack.channel("history", token=token))
    run = await executor.TriggerRun(
        executor_pb2.StartRunRequest(project_id=project, agent_name="helper", input=INPUT)
    )
    view = RunTreeView()
    events = aiter(history.WatchRun(history_pb2.WatchRunRequest(project_id=project, run_id=run.id)))
    async with asyncio.timeout(30):
        async for event in events:
            view.apply(event)
            if event.type == common_pb2.RUN_EVENT_TYPE_MODEL_QUOTA_WAIT:
                break

    assert re.search(rf"running  step 0  0 tokens  \({WAITING.pattern}\)", rendered(view))
    code, out, err = await cli("show", run.id)
    assert (code, err) == (0, "")
    assert WAITING.search(out)
    assert "running" in out
    assert INPUT in out
    shown = await cli.json_lines("show", run.id)
    assert shown[0]["run"]["waiting_for"]["limit"] == "rate_limit"
    code, out, _ = await cli("tree", run.id)
    assert code == 0
    assert WAITING.search(" ".join(out.split()))  # the terminal's width folds the line
    # The live tree's refresh from GetRunTree keeps the line.
    view.merge_tree(
        await history.GetRunTree(history_pb2.GetRunTreeRequest(project_id=project, run_id=run.id))
    )
    assert WAITING.search(rendered(view))

    async with asyncio.timeout(30):
        async for event in events:
            view.apply(event)
            if event.type == common_pb2.RUN_EVENT_TYPE_MODEL_QUOTA_WAIT:
                assert not event.model_quota_wait.waiting
                break
    assert "waiting for model quota" not in rendered(view)
    async with asyncio.timeout(30):
        async for event in events:
            view.apply(event)
    assert view.nodes[run.id].status == "completed"
    code, out, _ = await cli("show", run.id)
    assert code == 0
    assert "waiting for model quota" not in out
    assert "answered after the wait" in out
    code, out, _ = await cli("tree", run.id)
    assert "waiting for model quota" not in out
