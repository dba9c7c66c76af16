"""The CLI's trees mark the runs a trigger, schedule or event started (issue 32): the live tree
(``agentfleet run``, the research demo's follow) from the run_queued event or the persisted
tree, and ``agentfleet tree`` from GetRunTree's nodes; other runs say nothing, and tenant
text of the origin (an event's request id) is printed inert."""

from __future__ import annotations

import io

from rich.console import Console

from agentfleet.cli.live import RunTreeView
from agentfleet.cli.render import started_by_text
from agentfleet.cli.runs import _label
from agentfleet.structs import to_struct
from agentfleet.v1 import common_pb2, history_pb2

RUN_ID = "6f1c2a53-8a40-4d8e-9f65-1f0f0c7e3a10"
OBJECT_ID = "0b7e4c1d-2f3a-4b5c-8d9e-0f1a2b3c4d5e"
ORIGIN = {"trigger": "on_document_ingested", "object_type": "Document", "object_id": OBJECT_ID}


def text(renderable: object) -> str:
    console = Console(width=240, file=io.StringIO(), force_terminal=True, color_system=None)
    console.print(renderable)
    return console.file.getvalue()  # type: ignore[attr-defined]


def queued(started_by: str, origin: dict[str, object] | None = None) -> common_pb2.RunEvent:
    run = common_pb2.AgentRun(id=RUN_ID, agent_name="paper-summarizer", started_by=started_by)
    if origin:
        run.trigger_origin.CopyFrom(to_struct(origin))
    return common_pb2.RunEvent(
        run_id=RUN_ID,
        root_run_id=RUN_ID,
        agent_name="paper-summarizer",
        type=common_pb2.RUN_EVENT_TYPE_RUN_QUEUED,
        run_queued=common_pb2.RunQueued(run=run),
    )


def test_the_live_tree_marks_a_triggered_run() -> None:
    view = RunTreeView()
    view.apply(queued("trigger", ORIGIN))
    shown = text(view.render())
    assert "started by trigger on_document_ingested (Document 0b7e4c1d…)" in shown


def test_the_live_tree_takes_it_from_the_persisted_tree_too() -> None:
    view = RunTreeView()
    node = history_pb2.RunTreeNode(
        run_id=RUN_ID, agent_name="nightly", started_by="schedule", status=1
    )
    node.trigger_origin.CopyFrom(
        to_struct({"trigger": "schedule:nightly", "tick_at": "2026-01-01T02:00:00+00:00"})
    )
    view.merge_tree(history_pb2.GetRunTreeResponse(root_run_id=RUN_ID, nodes=[node]))
    assert "started by schedule schedule:nightly (tick 2026-01-01T02:00:00+00:00)" in text(
        view.render()
    )


def test_runs_no_trigger_started_say_nothing() -> None:
    view = RunTreeView()
    view.apply(queued("rpc"))
    assert "started by" not in text(view.render())
    for started_by in ("rpc", "parent", "task", ""):
        assert started_by_text(started_by, ORIGIN) == ""


def test_the_tree_command_marks_it_and_prints_tenant_text_inert() -> None:
    node = history_pb2.RunTreeNode(run_id=RUN_ID, agent_name="on-invoice", started_by="event")
    node.trigger_origin.CopyFrom(
        to_struct({"trigger": "on_event:invoice.paid", "request_id": "r-1\x1b[2J"})
    )
    shown = text(_label(node))
    assert "started by event on_event:invoice.paid (request r-1" in shown
    assert "\x1b[2J" not in shown
    plain = history_pb2.RunTreeNode(run_id=RUN_ID, agent_name="x", started_by="rpc")
    assert "started by" not in text(_label(plain))
