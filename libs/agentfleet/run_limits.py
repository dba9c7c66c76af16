"""Limits every run obeys, whichever service enforces them (DESIGN §6; seed 000 D10).

The depth rule: a top-level run (depth 0) may use the spawn tools; a sub-agent (depth 1)
only when its definition names a spawn tool exactly (a glob does not give it); a run at
:data:`MAX_SPAWN_DEPTH` never. The toolpool applies it when it resolves a run's tools, the
executor when the model calls a tool anyway and when it starts flows and tasks.

The step cap: a run's steps across all its resumes never pass :data:`MAX_TOTAL_STEPS`.

The timeout bounds: no run or task asks for less than :data:`MIN_TIMEOUT_S` or more than
:data:`MAX_TIMEOUT_S` (StartRun and ResumeRun, spawn_agents tasks, task graphs; the manifest
schema's ``default_timeout_s`` repeats both as JSON, checked equal by a unit test).
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
MIN_TIMEOUT_S = 0.001
"""Shortest timeout, in seconds: 1 ms. A run's timeout is a PostgreSQL interval, which keeps
microseconds, so a Duration of a few nanoseconds became 0 and failed CHECK (timeout > 0);
no useful run ends within a millisecond either."""
TIMEOUT_RANGE = f"at least {MIN_TIMEOUT_S}s and at most {MAX_TIMEOUT_S}s"
"""The bounds as a refused timeout is told them."""


def timeout_allowed(seconds: float) -> bool:
    """Whether a run or a task may be given a timeout of ``seconds``."""
    return MIN_TIMEOUT_S <= seconds <= MAX_TIMEOUT_S


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


MAX_RESUMES_LIMIT = 100
DEFAULT_MAX_RESUMES = 10
"""Automatic resumes of a paused dispatched run within one attempt of its task when the task
names none (the dispatcher's AGENTFLEET_DISPATCHER_MAX_RESUMES): past them the attempt fails."""
