"""The live run tree's waiting line (issue 31): shown while a run waits for its model's
quota, gone when the wait ends or the run stops, and shown as written (never markup, no
terminal control codes), as all server and tenant text is."""

from __future__ import annotations

import io

from rich.console import Console

from agentfleet.cli.live import RunTreeView
from agentfleet.v1 import common_pb2

RUN_ID = "6f1c2a53-8a40-4d8e-9f65-1f0f0c7e3a10"


def rendered(view: RunTreeView) -> str:
    console = Console(width=200, file=io.StringIO(), force_terminal=True, color_system=None)
    console.print(view.render())
    return console.file.getvalue()  # type: ignore[attr-defined]


def event(**payload: object) -> common_pb2.RunEvent:
    return common_pb2.RunEvent(run_id=RUN_ID, root_run_id=RUN_ID, agent_name="writer", **payload)  # type: ignore[arg-type]


def wait(waiting: bool, message: str) -> common_pb2.RunEvent:
    return event(
        type=common_pb2.RUN_EVENT_TYPE_MODEL_QUOTA_WAIT,
        model_quota_wait=common_pb2.ModelQuotaWait(waiting=waiting, message=message),
    )


def test_the_waiting_line_shows_while_the_run_waits() -> None:
    view = RunTreeView()
    view.apply(event(type=common_pb2.RUN_EVENT_TYPE_RUN_STARTED, run_started={}))
    view.apply(wait(True, "waiting for model quota: gemini-2.5-pro, about 12 s"))
    assert "running  step 0  0 tokens  (waiting for model quota: gemini-2.5-pro, about 12 s)" in (
        rendered(view)
    )
    view.apply(wait(False, "model quota wait over: gemini-2.5-pro, waited 12.0 s"))
    assert "quota" not in rendered(view)


def test_a_run_that_stops_shows_no_wait() -> None:
    view = RunTreeView()
    view.apply(event(type=common_pb2.RUN_EVENT_TYPE_RUN_STARTED, run_started={}))
    view.apply(wait(True, "waiting for model quota: m, about 1 s"))
    finished = common_pb2.AgentRun(
        id=RUN_ID, agent_name="writer", status=common_pb2.RUN_STATUS_CANCELLED
    )
    finished.waiting_for.message = "waiting for model quota: m, about 1 s"
    view.apply(event(type=common_pb2.RUN_EVENT_TYPE_RUN_FINISHED, run_finished={"run": finished}))
    assert "quota" not in rendered(view)


def test_the_waiting_line_is_shown_as_written() -> None:
    view = RunTreeView()
    view.apply(event(type=common_pb2.RUN_EVENT_TYPE_RUN_STARTED, run_started={}))
    view.apply(wait(True, "[red]quota[/red] [/unbalanced]\x1b[2J\x9b31m\x07\u202e about 1 s"))
    out = rendered(view)
    # Markup printed as written; each control shown as a visible character (render.inert).
    assert "[red]quota[/red] [/unbalanced]\u241b[2J\ufffd31m\u2407\ufffd about 1 s" in out
    for control in ("\x1b", "\x9b", "\x07", "\u202e"):
        assert control not in out


def remote(state: str) -> common_pb2.RunEvent:
    return event(
        type=common_pb2.RUN_EVENT_TYPE_REMOTE_STATUS,
        remote_status=common_pb2.RemoteStatus(state=state, task_id="t-1"),
    )


def test_a_remote_childs_line_says_what_its_remote_task_does() -> None:
    view = RunTreeView()
    view.apply(event(type=common_pb2.RUN_EVENT_TYPE_RUN_STARTED, run_started={}))
    view.apply(remote("working"))
    assert "(remote task working)" in rendered(view)
    view.apply(remote("input_required"))
    assert "remote task" not in rendered(view)
