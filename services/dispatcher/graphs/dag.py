"""Validation of submitted task graphs (CreateTaskGraph, AddTasks). Pure, no I/O.

Every problem is a :class:`FieldViolation` naming the request field (``tasks[2].key``,
``edges[0].blocker_key``); a cycle is reported on ``edges`` with the keys in edge order.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentfleet.errors import FieldViolation, InvalidArgument
from agentfleet.graph import MAX_TASKS_PER_GRAPH, find_cycle, graph_size_problem
from agentfleet.graph.task_properties import (
    DEFAULT_MAX_RETRIES,
    MAX_RETRIES_LIMIT,
    PRIORITY_MAX,
    PRIORITY_MIN,
)
from agentfleet.run_limits import MAX_RESUMES_LIMIT, TIMEOUT_RANGE, timeout_allowed

__all__ = [
    "DEFAULT_MAX_RETRIES",
    "MAX_TASKS_PER_GRAPH",
    "NewTask",
    "ValidatedGraph",
    "cycle_message",
    "validate_graph",
]

KEY_PATTERN = re.compile(r"^[A-Za-z0-9._-]{1,128}$")
MAX_TITLE_CHARS = 500
MAX_DESCRIPTION_CHARS = 100_000


@dataclass(kw_only=True, slots=True)
class NewTask:
    """One task of a request, already checked field by field."""

    key: str
    title: str
    description: str = ""
    assigned_agent: str = ""
    tags: list[str] = field(default_factory=list)
    priority: int = 0
    max_retries: int = DEFAULT_MAX_RETRIES
    max_resumes: int | None = None
    """None: the dispatcher's default (AGENTFLEET_DISPATCHER_MAX_RESUMES)."""
    timeout_s: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    """The request's free-form ``properties``."""


@dataclass(kw_only=True, slots=True)
class ValidatedGraph:
    """Tasks and (blocker_key, blocked_key) edges that passed :func:`validate_graph`."""

    tasks: list[NewTask]
    edges: list[tuple[str, str]]


def cycle_message(cycle: Sequence[str]) -> str:
    """``a -> b -> a``: the keys of a cycle, closed."""
    return "blocks edges form a cycle: " + " -> ".join([*cycle, cycle[0]])


def validate_graph(
    tasks: Sequence[NewTask],
    edges: Sequence[tuple[str, str]],
    *,
    existing_keys: Collection[str] = (),
    existing_edges: Sequence[tuple[str, str]] = (),
    require_tasks: bool = True,
) -> ValidatedGraph:
    """Checks keys, fields, edge ends and acyclicity; raises InvalidArgument naming every
    bad field. ``existing_*`` describe the graph being grown (AddTasks)."""
    problems: list[FieldViolation] = []
    if require_tasks and not tasks:
        problems.append(FieldViolation("tasks", "at least one task is required"))
    too_many = graph_size_problem(len(existing_keys), len(tasks))
    if too_many is not None:
        problems.append(FieldViolation("tasks", too_many))
    seen: dict[str, int] = {}
    for i, task in enumerate(tasks):
        problems += _task_problems(i, task)
        if task.key in seen:
            problems.append(
                FieldViolation(f"tasks[{i}].key", f"{task.key!r} is also tasks[{seen[task.key]}]")
            )
        elif task.key in existing_keys:
            problems.append(
                FieldViolation(f"tasks[{i}].key", f"{task.key!r} is already a task of the graph")
            )
        seen.setdefault(task.key, i)
    known = set(seen) | set(existing_keys)
    unique: dict[tuple[str, str], None] = {}
    for i, (blocker, blocked) in enumerate(edges):
        for name, key in (("blocker_key", blocker), ("blocked_key", blocked)):
            if key not in known:
                problems.append(FieldViolation(f"edges[{i}].{name}", f"unknown task key {key!r}"))
        if blocker == blocked:
            problems.append(FieldViolation(f"edges[{i}]", f"task {blocker!r} cannot block itself"))
        unique[(blocker, blocked)] = None
    if problems:
        raise InvalidArgument.for_fields(problems)
    cycle = find_cycle([t.key for t in tasks], [*existing_edges, *unique])
    if cycle is not None:
        raise InvalidArgument.for_field("edges", cycle_message(cycle))
    return ValidatedGraph(tasks=list(tasks), edges=list(unique))


def _task_problems(i: int, task: NewTask) -> list[FieldViolation]:
    where = f"tasks[{i}]"
    problems: list[FieldViolation] = []
    if not KEY_PATTERN.match(task.key):
        problems.append(
            FieldViolation(
                f"{where}.key", "letters, digits, '-', '_' and '.', 1-128 characters, required"
            )
        )
    if not task.title.strip():
        problems.append(FieldViolation(f"{where}.title", "is required"))
    elif len(task.title) > MAX_TITLE_CHARS:
        problems.append(FieldViolation(f"{where}.title", f"at most {MAX_TITLE_CHARS} characters"))
    if len(task.description) > MAX_DESCRIPTION_CHARS:
        problems.append(
            FieldViolation(f"{where}.description", f"at most {MAX_DESCRIPTION_CHARS} characters")
        )
    if not PRIORITY_MIN <= task.priority <= PRIORITY_MAX:
        problems.append(
            FieldViolation(f"{where}.priority", f"must be {PRIORITY_MIN} to {PRIORITY_MAX}")
        )
    if not 0 <= task.max_retries <= MAX_RETRIES_LIMIT:
        problems.append(FieldViolation(f"{where}.max_retries", f"must be 0 to {MAX_RETRIES_LIMIT}"))
    if task.max_resumes is not None and not 0 <= task.max_resumes <= MAX_RESUMES_LIMIT:
        problems.append(FieldViolation(f"{where}.max_resumes", f"must be 0 to {MAX_RESUMES_LIMIT}"))
    if task.timeout_s is not None and not timeout_allowed(task.timeout_s):
        problems.append(FieldViolation(f"{where}.timeout", f"must be {TIMEOUT_RANGE}"))
    for j, tag in enumerate(task.tags):
        if not tag.strip() or len(tag) > 64:
            problems.append(FieldViolation(f"{where}.tags[{j}]", "1 to 64 characters"))
    return problems
