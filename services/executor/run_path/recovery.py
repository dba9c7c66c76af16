"""Continuing a run that already has a conversation: after a crash (its lease expired and
another worker claimed it, DESIGN §4) or after ResumeRun.

:func:`load_continuation` rebuilds the conversation exactly from ``agent_run_messages`` and
finds the tool calls still ``started`` -- calls whose executor died (or was cut off) before
it recorded their results. The loop answers each of them as ``interrupted`` with an error
the model can read and never runs them again: a tool never runs twice.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import asyncpg
from google.genai import types

from agentfleet.llm import content_from_json
from services.executor.calls import PlannedCall
from services.executor.runs import RunRecord
from services.executor.store import messages, tool_calls
from services.executor.store.messages import MessageRow
from services.executor.store.tool_calls import ToolCallRow

INTERRUPTED_BY_CRASH = (
    "interrupted: the executor running this call stopped before it finished (crash or "
    "shutdown); it was not retried and its effects, if any, are unknown. Check before "
    "calling it again."
)


@dataclass(kw_only=True, slots=True)
class Continuation:
    """Where a run with a conversation stands."""

    contents: list[types.Content] = field(default_factory=list)
    """The conversation (system message excluded), exactly as persisted."""
    next_message_seq: int = 0
    step: int = 0
    """Step number of the newest message."""
    open_calls: list[PlannedCall] = field(default_factory=list)
    """Calls recorded ``started`` and never finished, in the order the model gave them."""
    last_text: str = ""
    """Newest model text (the partial output)."""
    final_text: str | None = None
    """Set when the newest message is a model reply without function calls: the run had
    answered and only its completion was not recorded."""
    past_calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    """Every function call of the conversation in order (to seed the doom-loop detector)."""
    used_ids: set[str] = field(default_factory=set)
    """Every tool_call_id the run has used (a new call must not reuse one)."""

    @property
    def has_messages(self) -> bool:
        return self.next_message_seq > 0


async def load_continuation(pool: asyncpg.Pool, run: RunRecord) -> Continuation:
    """The run's persisted conversation and open calls (project-scoped reads)."""
    async with pool.acquire() as conn:
        rows = await messages.of_run(conn, run.project_id, run.id)
        calls = await tool_calls.of_run(conn, run.project_id, run.id)
    return build_continuation(rows, calls)


async def load_conversation(
    conn: asyncpg.Connection | asyncpg.Pool, *, project_id: str, run_id: str
) -> tuple[str | None, list[types.Content]]:
    """The run's system instruction and conversation, rebuilt exactly from its messages."""
    rows = await messages.of_run(conn, project_id, run_id)
    system = next(
        (
            "".join(p.text or "" for p in content_from_json(m.content).parts or [])
            for m in rows
            if m.role == "system"
        ),
        None,
    )
    return system, build_continuation(rows, []).contents


def build_continuation(rows: Sequence[MessageRow], calls: Sequence[ToolCallRow]) -> Continuation:
    """Pure part of :func:`load_continuation`: rows in, :class:`Continuation` out."""
    state = Continuation(used_ids={c.tool_call_id for c in calls})
    started = [c for c in calls if c.status == "started"]
    last_model: types.Content | None = None
    last_role = ""
    for row in rows:
        state.next_message_seq = row.seq + 1
        state.step = row.step_number
        content = content_from_json(row.content)
        last_role = row.role
        if last_role == "system":
            continue
        state.contents.append(content)
        if last_role == "model":
            last_model = content
            text = "".join(p.text or "" for p in content.parts or [] if not p.thought)
            if text:
                state.last_text = text
            state.past_calls.extend(
                (p.function_call.name or "", dict(p.function_call.args or {}))
                for p in content.parts or []
                if p.function_call is not None
            )
    if last_role == "model" and last_model is not None:
        asked = [p.function_call for p in last_model.parts or [] if p.function_call is not None]
        if not asked:
            state.final_text = "".join(
                p.text or "" for p in last_model.parts or [] if not p.thought
            )
        else:
            state.open_calls = pair_open_calls(asked, started)
    return state


def pair_open_calls(
    calls: Sequence[types.FunctionCall], started: Sequence[ToolCallRow]
) -> list[PlannedCall]:
    """Matches the ``started`` rows to the function calls of the reply that asked for them,
    so each answer carries the model's own call id; order is the model's."""
    remaining = list(started)
    paired: list[PlannedCall] = []
    for index, call in enumerate(calls, start=1):
        row = _take(remaining, call, index)
        if row is None:
            continue  # already answered (not possible today: results commit together)
        paired.append(_planned(row, call))
    # Rows that matched no call (should not happen) still get an answer.
    paired.extend(
        _planned(row, types.FunctionCall(name=row.tool_name, args=dict(row.input or {})))
        for row in remaining
    )
    return paired


def _planned(row: ToolCallRow, call: types.FunctionCall) -> PlannedCall:
    return PlannedCall(
        tool_call_id=row.tool_call_id,
        tool_name=row.tool_name,
        arguments=dict(row.input or {}),
        source=row.source,
        call=call,
    )


def _take(rows: list[ToolCallRow], call: types.FunctionCall, index: int) -> ToolCallRow | None:
    # plan_calls keeps the model's id when it has one, else assigns call-<step>-<index>-...
    for position, row in enumerate(rows):
        tool_call_id = row.tool_call_id
        by_id = call.id is not None and tool_call_id == call.id
        by_index = tool_call_id.startswith(f"call-{row.step_number}-{index}-")
        if by_id or by_index:
            return rows.pop(position)
    return None
