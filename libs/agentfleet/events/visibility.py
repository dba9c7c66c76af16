"""Which run events are internal: the one classification (seed 004, "Visibility").

An internal event is the platform's own plumbing, not something the agent did or a person
needs to act on. It is stored like any other (``is_internal = true``, same gapless seq, for
audit) and left out of WatchRun, StartRun/ResumeRun streams and the CLI unless the caller
asks for ``include_internal``. Every appended event passes :func:`is_internal` (in
:func:`agentfleet.events.store.event_columns`), so no writer can forget it; a writer that
knows more than the event says (the approval continuation) sets ``is_internal`` itself.

Internal:

- SAFETY ``doom_loop_warning``: the note to the model that its repeated call was not run
  (the call's TOOL_REQUEST and TOOL_RESPONSE stay visible; ``doom_loop_stop`` ends the run
  and stays visible);
- STATUS_CHANGED ``waiting -> queued``: approval plumbing, the run going back to the queue
  once its held calls are decided (the decisions are the calls' TOOL_RESPONSEs), and the
  ``queued -> running`` of the continuation that follows (set by its writer);
- RUN_STARTED of a recovered execution (``recovered``): the same execution continued by
  another worker after a crash or lease loss, not a new start;
- TOOL_REQUEST / TOOL_RESPONSE of :data:`INTERNAL_TOOLS`: coordination bookkeeping, an
  agent looking up whom it may route to (it changes nothing).

Messages the executor itself adds to a conversation (the soft stop's and time's-up prompts,
the structured-output request and repair, a resume's default "continue") are internal
messages (``agent_run_messages.is_internal``), written so by the executor.
"""

from __future__ import annotations

from agentfleet.events.domain import (
    RunEvent,
    RunStarted,
    Safety,
    StatusChanged,
    ToolRequest,
    ToolResponse,
)

__all__ = ["INTERNAL_SAFETY_KINDS", "INTERNAL_TOOLS", "is_internal"]

INTERNAL_TOOLS = frozenset({"list_available_agents"})
"""Coordination tools whose calls are bookkeeping, not work: hidden with their answers."""
INTERNAL_SAFETY_KINDS = frozenset({"doom_loop_warning"})
"""SAFETY kinds that are notes to the model rather than decisions about the run."""


def is_internal(event: RunEvent) -> bool:
    """Whether ``event`` is platform plumbing (see the module docstring)."""
    if event.is_internal:
        return True
    match event:
        case Safety(kind=kind):
            return kind in INTERNAL_SAFETY_KINDS
        case StatusChanged(from_status="waiting", to_status="queued"):
            return True
        case RunStarted(recovered=True):
            return True
        case ToolRequest(tool_name=name) | ToolResponse(tool_name=name):
            return name in INTERNAL_TOOLS
    return False
