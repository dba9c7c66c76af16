"""The SpecTask properties the dispatcher acts on: their bounds, how Python reads them, and
guarded SQL casts, so that a malformed row hurts only its own task.

Writers (CreateTaskGraph, AddTasks, create_subtasks) validate against the bounds here. Readers
never trust a stored row: a value planted around the writers (or left by an older build) must
not make a statement raise, since one claim statement serves every project. In SQL a plain
``(x ->> 'k')::int`` raises on ``"abc"`` for the whole statement; the ``sql_*`` helpers return
NULL instead. They nest CASE because PostgreSQL does not promise to evaluate the operands
of AND in order, while CASE evaluates a branch only when its condition held.
"""

from __future__ import annotations

import fnmatch
import math
import re
from collections.abc import Sequence
from typing import Any

from agentfleet.run_limits import DEFAULT_MAX_RESUMES, MAX_RESUMES_LIMIT, MAX_TIMEOUT_S

__all__ = [
    "ALLOWED_AGENTS",
    "DEFAULT_MAX_RETRIES",
    "MAX_RETRIES_LIMIT",
    "PRIORITY_MAX",
    "PRIORITY_MIN",
    "agent_allowed",
    "allowed_agent_patterns",
    "is_uuid",
    "retry_delay_s",
    "sql_int",
    "sql_number",
    "sql_uuid",
    "task_max_resumes",
    "task_max_retries",
    "task_priority",
    "task_problem_sql",
    "task_timeout_s",
    "whole_number",
]

PRIORITY_MIN = -1000
PRIORITY_MAX = 1000
"""Priority is an integer in this range; higher runs first; absent or malformed = 0."""
MAX_RETRIES_LIMIT = 10
DEFAULT_MAX_RETRIES = 2
"""Retries after a failure when a task names none."""
_UUID = "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"
_UUID_RE = re.compile(_UUID)


ALLOWED_AGENTS = "allowed_agents"
"""SpecTask property set by ``create_subtasks`` (never from its arguments): the agent names
and globs the creating run's definition lets its subtasks run with (``config.subtask_agents``).
Absent on tasks of CreateTaskGraph/AddTasks, whose callers may name any agent."""


def allowed_agent_patterns(properties: dict[str, Any]) -> tuple[str, ...] | None:
    """The task's :data:`ALLOWED_AGENTS`; ``None`` when it has no such restriction. A
    malformed value allows nothing (a restriction is never lifted by a bad row)."""
    if ALLOWED_AGENTS not in properties:
        return None
    value = properties[ALLOWED_AGENTS]
    if not isinstance(value, list):
        return ()
    return tuple(p for p in value if isinstance(p, str) and p)


def agent_allowed(agent_name: str, patterns: Sequence[str]) -> bool:
    """Whether ``agent_name`` matches one of ``patterns`` (exact names or fnmatch globs)."""
    return any(fnmatch.fnmatchcase(agent_name, pattern) for pattern in patterns)


def is_uuid(value: object) -> bool:
    """Whether ``value`` is a UUID in its canonical text form (as graph ids are stored): the
    one check of ids that go to SQL as text. uuid.UUID() also takes braces, "urn:uuid:" and
    dashes anywhere, which asyncpg refuses; fullmatch, since ``$`` passes a final newline."""
    return isinstance(value, str) and _UUID_RE.fullmatch(value) is not None


def whole_number(value: object, low: int, high: int) -> int | None:
    """``value`` as an int when it is a JSON number with no fraction in [low, high]."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if isinstance(value, float) and not (math.isfinite(value) and value.is_integer()):
        return None
    number = int(value)
    return number if low <= number <= high else None


def task_priority(properties: dict[str, Any]) -> int:
    """The task's priority; a malformed one counts as the default, 0."""
    found = whole_number(properties.get("priority", 0), PRIORITY_MIN, PRIORITY_MAX)
    return 0 if found is None else found


def task_max_retries(properties: dict[str, Any]) -> int:
    """The task's retry bound; absent or malformed is the default (retries are always bounded)."""
    found = whole_number(properties.get("max_retries"), 0, MAX_RETRIES_LIMIT)
    return DEFAULT_MAX_RETRIES if found is None else found


def task_max_resumes(properties: dict[str, Any], default: int = DEFAULT_MAX_RESUMES) -> int:
    """How often the dispatcher resumes the task's paused run before failing the attempt;
    absent or malformed is ``default`` (resumes are always bounded)."""
    found = whole_number(properties.get("max_resumes"), 0, MAX_RESUMES_LIMIT)
    return default if found is None else found


def task_timeout_s(properties: dict[str, Any]) -> float | None:
    """The task's timeout in seconds; ``None`` when absent or malformed."""
    value = properties.get("timeout_s")
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if 0 < value <= MAX_TIMEOUT_S else None


def retry_delay_s(retry: int, *, base_s: float, max_s: float) -> float:
    """Backoff before retry number ``retry`` (1, 2, ...): base, 2x base, 4x base ..., capped."""
    return min(max_s, base_s * 2 ** max(0, min(retry - 1, 30)))


def sql_uuid(text: str) -> str:
    """SQL: the text expression ``text`` as a uuid, NULL when it is not one."""
    return f"(CASE WHEN ({text}) ~ '{_UUID}' THEN ({text})::uuid END)"


def sql_number(value: str, low: float, high: float) -> str:
    """SQL: the jsonb expression ``value`` as numeric when it is a number in [low, high]."""
    return (
        f"(CASE WHEN jsonb_typeof({value}) = 'number' THEN "
        f"CASE WHEN ({value})::numeric BETWEEN {low} AND {high} THEN ({value})::numeric END END)"
    )


def sql_int(value: str, low: int, high: int) -> str:
    """SQL: the jsonb expression ``value`` as an int when it is a whole number in [low, high]."""
    number = f"({value})::numeric"
    return (
        f"(CASE WHEN jsonb_typeof({value}) = 'number' THEN CASE WHEN {number} BETWEEN {low} "
        f"AND {high} AND {number} = trunc({number}) THEN {number}::int END END)"
    )


def task_problem_sql(task: str, graph_type: str) -> str:
    """SQL: why the SpecTask aliased ``task`` cannot be dispatched (a message naming the
    property), or NULL. Its graph must be a task graph of the task's own project."""
    p = f"{task}.properties"
    graph = sql_uuid(f"{p} ->> 'graph_id'")
    return f"""(CASE
        WHEN {graph} IS NULL THEN 'graph_id: ' || coalesce({p} ->> 'graph_id', 'missing')
            || ' is not a task graph id'
        WHEN NOT EXISTS (SELECT 1 FROM kb.graph_objects g WHERE g.project_id = {task}.project_id
                         AND g.id = {graph} AND g.type = '{graph_type}')
            THEN 'graph_id: ' || ({p} ->> 'graph_id') || ' is not a task graph of this project'
        WHEN jsonb_typeof({p} -> 'max_retries') IS DISTINCT FROM 'null'
             AND {p} ? 'max_retries' AND {sql_int(f"{p} -> 'max_retries'", 0, MAX_RETRIES_LIMIT)}
                 IS NULL
            THEN 'max_retries: must be a whole number from 0 to {MAX_RETRIES_LIMIT}'
        WHEN jsonb_typeof({p} -> 'max_resumes') IS DISTINCT FROM 'null'
             AND {p} ? 'max_resumes' AND {sql_int(f"{p} -> 'max_resumes'", 0, MAX_RESUMES_LIMIT)}
                 IS NULL
            THEN 'max_resumes: must be a whole number from 0 to {MAX_RESUMES_LIMIT}'
        WHEN jsonb_typeof({p} -> 'timeout_s') IS DISTINCT FROM 'null' AND {p} ? 'timeout_s'
             AND {sql_number(f"{p} -> 'timeout_s'", 0, MAX_TIMEOUT_S)} IS NULL
            THEN 'timeout_s: must be a number of seconds from 0 to {MAX_TIMEOUT_S}'
        WHEN {p} ? 'assigned_agent' AND jsonb_typeof({p} -> 'assigned_agent')
                 NOT IN ('string', 'null')
            THEN 'assigned_agent: must be an agent name'
    END)"""
