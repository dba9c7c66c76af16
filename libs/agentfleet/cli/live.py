"""The live run tree: what ``agentfleet run`` shows while a run and its children work.

:class:`RunTreeView` is pure state: feed it :class:`RunEvent` messages from any run of the
tree (in any order across runs) and render it as a rich ``Tree``. Each node shows agent,
status, step, tokens, what started it when a trigger, schedule or event did, the tool call
in flight and what the run waits for (its model's quota).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rich.text import Text
from rich.tree import Tree

from agentfleet.cli.render import STATUS_STYLE, run_status, started_by_text, terminal_text
from agentfleet.structs import struct_dict
from agentfleet.v1 import common_pb2, history_pb2

_REMOTE_BUSY = frozenset({"submitted", "working"})
"""Remote task states shown on a remote child's line (the others end or pause the run)."""


@dataclass(kw_only=True, slots=True)
class RunNode:
    run_id: str
    agent_name: str
    parent_run_id: str = ""
    status: str = "queued"
    step: int = 0
    tokens: int = 0
    current_tool: str = ""
    """The tool called last and not yet answered, with its first argument keys."""
    summary: str = ""
    pause_reason: str = ""
    """Why the run paused (its STATUS_CHANGED reason, e.g. a step limit); empty otherwise."""
    waiting_for: str = ""
    """What the running run waits for (its model's quota), as the server says; empty when
    it is not waiting."""
    children: list[str] = field(default_factory=list)
    started_by: str = ""
    """What started a run a trigger, schedule or event started (:func:`started_by_text`);
    empty for any other run."""


class RunTreeView:
    """State of a run tree built from its events."""

    def __init__(self) -> None:
        self.nodes: dict[str, RunNode] = {}
        self.root_run_id: str | None = None

    def _node(self, run_id: str, agent_name: str = "", parent: str = "") -> RunNode:
        node = self.nodes.get(run_id)
        if node is None:
            node = RunNode(run_id=run_id, agent_name=agent_name or "?", parent_run_id=parent)
            self.nodes[run_id] = node
            if parent and parent in self.nodes and run_id not in self.nodes[parent].children:
                self.nodes[parent].children.append(run_id)
            if not parent and self.root_run_id is None:
                self.root_run_id = run_id
        elif agent_name and node.agent_name == "?":
            node.agent_name = agent_name
        return node

    def apply(self, event: common_pb2.RunEvent) -> list[str]:
        """Updates the tree; returns the ids of child runs this event announced."""
        node = self._node(event.run_id, event.agent_name, event.parent_run_id)
        kind = event.WhichOneof("payload")
        spawned: list[str] = []
        if kind == "run_queued":
            node.status = run_status(event.run_queued.run.status) or "queued"
            self._started_by(node, event.run_queued.run)
        elif kind == "run_started":
            node.status = "running"
        elif kind == "model_text":
            node.step = max(node.step, event.model_text.step)
        elif kind == "tool_request":
            request = event.tool_request
            node.step = max(node.step, request.step)
            keys = ", ".join(list(request.arguments.fields)[:2])
            node.current_tool = f"{request.tool_name}({keys})"
        elif kind == "tool_response":
            node.current_tool = ""
        elif kind == "child_run":
            child = self._node(
                event.child_run.child_run_id, event.child_run.agent_name, node.run_id
            )
            if event.type == common_pb2.RUN_EVENT_TYPE_CHILD_RUN_STARTED:
                spawned.append(child.run_id)
            elif event.child_run.status:
                child.status = run_status(event.child_run.status)
                child.summary = event.child_run.summary
        elif kind == "status_changed":
            node.status = run_status(event.status_changed.to_status)
            if node.status == "paused":
                node.pause_reason = event.status_changed.reason
        elif kind == "model_quota_wait":
            wait = event.model_quota_wait
            node.waiting_for = wait.message if wait.waiting else ""
        elif kind == "remote_status":
            # A remote child: what its remote task is doing while the run runs.
            state = event.remote_status.state
            node.waiting_for = f"remote task {state}" if state in _REMOTE_BUSY else ""
        elif kind == "run_finished":
            self.merge_run(event.run_finished.run)
        return spawned

    def merge_run(self, run: common_pb2.AgentRun) -> None:
        node = self._merge(run.id, run.agent_name, run.parent_run_id, run)
        node.summary = run.summary or run.error_message
        node.waiting_for = run.waiting_for.message if run.HasField("waiting_for") else ""
        self._started_by(node, run)

    def merge_tree(self, tree: history_pb2.GetRunTreeResponse) -> None:
        """Takes status, steps and tokens from the persisted tree (authoritative)."""
        for item in tree.nodes:
            node = self._merge(item.run_id, item.agent_name, item.parent_run_id, item)
            node.summary = node.summary or item.summary_preview
            node.waiting_for = item.waiting_for.message if item.HasField("waiting_for") else ""
            self._started_by(node, item)

    @staticmethod
    def _started_by(node: RunNode, run: common_pb2.AgentRun | history_pb2.RunTreeNode) -> None:
        if run.started_by:
            node.started_by = started_by_text(run.started_by, struct_dict(run.trigger_origin))

    def _merge(
        self,
        run_id: str,
        agent_name: str,
        parent_run_id: str,
        counts: common_pb2.AgentRun | history_pb2.RunTreeNode,
    ) -> RunNode:
        """Takes status, steps and tokens of a persisted run (a run or a tree node)."""
        node = self._node(run_id, agent_name, parent_run_id)
        node.status = run_status(counts.status)
        node.step = max(node.step, counts.step_count)
        node.tokens = counts.tokens_in + counts.tokens_out
        if node.status not in ("running", "queued"):
            node.current_tool = ""
            node.waiting_for = ""
        return node

    def paused(self) -> list[RunNode]:
        """The runs of the tree that paused, root first: each can be resumed on its own."""
        return [n for n in self.nodes.values() if n.status == "paused"]

    def render(self) -> Tree:
        if self.root_run_id is None:
            return Tree(Text("waiting for the run to start…", style="dim"))
        tree = Tree(self._label(self.nodes[self.root_run_id]))
        self._add_children(tree, self.nodes[self.root_run_id])
        return tree

    def _add_children(self, branch: Tree, node: RunNode) -> None:
        for child_id in node.children:
            child = self.nodes[child_id]
            self._add_children(branch.add(self._label(child)), child)

    @staticmethod
    def _label(node: RunNode) -> Text:
        text = Text()
        text.append(node.agent_name, style="bold")
        # The whole id: it is what show, tree, resume and cancel take.
        text.append(f"  {node.run_id}  ", style="dim")
        text.append(node.status, style=STATUS_STYLE.get(node.status, ""))
        if node.status == "paused" and node.pause_reason:
            text.append(f" ({node.pause_reason})", style=STATUS_STYLE["paused"])
        text.append(f"  step {node.step}  {node.tokens} tokens")
        if node.started_by:
            text.append(terminal_text(f"  ⚡ {node.started_by}", style="magenta"))
        if node.current_tool:
            text.append(f"  → {node.current_tool}", style="cyan")
        if node.waiting_for and node.status == "running":
            text.append(terminal_text(f"  ({node.waiting_for})", style="yellow"))
        return text
