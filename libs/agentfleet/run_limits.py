"""Limits every run obeys, whichever service enforces them (DESIGN §6; seed 000 D10).

The depth rule: a top-level run (depth 0) may use the spawn tools; a sub-agent (depth 1)
only when its definition names a spawn tool exactly (a glob does not give it); a run at
:data:`MAX_SPAWN_DEPTH` never. The toolpool applies it when it resolves a run's tools, the
executor when the model calls a tool anyway and when it starts flows and tasks.

The step cap: a run's steps across all its resumes never pass :data:`MAX_TOTAL_STEPS`.

The timeout cap: no run or task asks for more than :data:`MAX_TIMEOUT_S` (StartRun and
ResumeRun, spawn_agents tasks, task graphs; the manifest schema's ``default_timeout_s``
repeats it as JSON, checked equal by a unit test).
"""

from __future__ import annotations

SPAWN_TOOLS = frozenset({"list_available_agents", "spawn_agents"})
"""The tools that start other runs."""
MAX_SPAWN_DEPTH = 2
"""Depth of the deepest run a tree may hold: runs at this depth cannot spawn."""
MAX_TOTAL_STEPS = 500
"""Global cap on a run's steps across all its resumes (seed 000 D10)."""
MAX_TIMEOUT_S = 24 * 3600
"""Longest timeout, in seconds, a run or a task may be given."""


def may_spawn(depth: int) -> bool:
    """Whether a run at ``depth`` may start child runs at all."""
    return depth < MAX_SPAWN_DEPTH


def spawn_tool_refusal(name: str, *, depth: int, named_exactly: bool) -> str | None:
    """Why a run at ``depth`` may not use tool ``name`` (None: it may); ``named_exactly``:
    the run's definition names the tool itself rather than through a glob."""
    if name not in SPAWN_TOOLS or depth == 0:
        return None
    if not may_spawn(depth):
        return (
            f"depth refusal: this run is at depth {depth}, the cap is {MAX_SPAWN_DEPTH}; "
            f"runs at depth {MAX_SPAWN_DEPTH} cannot use {name}"
        )
    if not named_exactly:
        return (
            f"depth refusal: a sub-agent (depth {depth}) may use {name} only when its "
            "definition names it exactly"
        )
    return None
