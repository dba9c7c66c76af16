"""Task DAG files (``examples/dags/*.yaml``) as CreateTaskGraph requests — the one parser the
CLI (``agentfleet dag submit``), the tests and the benchmarks share.

A DAG file::

    title: Research sprint
    max_parallel: 2              # optional
    llm_triage: true             # optional: a model decides what to do with failed tasks
    tasks:
      - key: survey
        title: Survey the field
        description: ...
        assigned_agent: research-assistant   # optional; else the dispatcher selects
        tags: [research]                     # optional
        max_retries: 2                       # optional
        max_resumes: 10                      # optional: resumes of a paused run, then fail
        timeout_s: 600                       # optional
        properties: {area: ml}               # optional, free-form
      - key: report
        title: Write the report
        blocked_by: [survey]                 # these tasks must complete first
    edges:                                   # optional, the same dependencies as a list
      - {blocker: survey, blocked: report}

Dependencies may be written either way (or both); a dependency given twice is sent once.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from google.protobuf import json_format

from agentfleet.errors import InvalidArgument
from agentfleet.timestamps import duration_proto
from agentfleet.v1 import dispatcher_pb2

__all__ = ["graph_request", "load_dag_file"]

_SPEC_KEYS = frozenset(
    {
        "key",
        "title",
        "description",
        "assigned_agent",
        "tags",
        "priority",
        "max_retries",
        "max_resumes",
    }
)
_TASK_KEYS = _SPEC_KEYS | {"blocked_by", "timeout_s", "properties"}
_TOP_KEYS = frozenset({"title", "max_parallel", "llm_triage", "tasks", "edges"})


def load_dag_file(path: str | Path, *, project_id: str) -> dispatcher_pb2.CreateTaskGraphRequest:
    """Reads a DAG file; :class:`InvalidArgument` names the file and the field at fault."""
    try:
        document = yaml.safe_load(Path(path).read_text())
    except OSError as exc:
        raise InvalidArgument(f"DAG file {path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        reason = str(exc).splitlines()[0]
        raise InvalidArgument(f"DAG file {path} is not valid YAML: {reason}") from None
    if not isinstance(document, dict):
        raise InvalidArgument(f"DAG file {path} must hold a mapping")
    return graph_request(document, project_id=project_id)


def graph_request(
    document: dict[str, Any], *, project_id: str
) -> dispatcher_pb2.CreateTaskGraphRequest:
    """The CreateTaskGraph request a DAG document describes; errors name the field."""
    unknown = set(document) - _TOP_KEYS
    if unknown:
        raise InvalidArgument.for_field(sorted(unknown)[0], "unknown field of a DAG file")
    tasks = document.get("tasks")
    if not isinstance(tasks, list) or not tasks:
        raise InvalidArgument.for_field("tasks", "a DAG file needs a non-empty list of tasks")
    try:
        max_parallel = int(document.get("max_parallel") or 0)
    except (TypeError, ValueError):
        raise InvalidArgument.for_field("max_parallel", "must be an integer") from None
    llm_triage = document.get("llm_triage", False)
    if not isinstance(llm_triage, bool):
        raise InvalidArgument.for_field("llm_triage", "must be true or false")
    request = dispatcher_pb2.CreateTaskGraphRequest(
        project_id=project_id,
        title=str(document.get("title") or ""),
        max_parallel=max_parallel,
        llm_triage=llm_triage,
    )
    edges: list[tuple[str, str]] = []
    for index, task in enumerate(tasks):
        spec, blockers = _task(task, f"tasks[{index}]")
        request.tasks.append(spec)
        edges += [(blocker, spec.key) for blocker in blockers]
    edges += _edges(document.get("edges"))
    for blocker, blocked in dict.fromkeys(edges):
        request.edges.append(dispatcher_pb2.TaskEdge(blocker_key=blocker, blocked_key=blocked))
    return request


def _task(task: Any, where: str) -> tuple[dispatcher_pb2.TaskSpec, list[str]]:
    if not isinstance(task, dict):
        raise InvalidArgument.for_field(where, "must be a mapping")
    unknown = set(task) - _TASK_KEYS
    if unknown:
        raise InvalidArgument.for_field(f"{where}.{sorted(unknown)[0]}", "unknown field")
    spec = dispatcher_pb2.TaskSpec()
    try:
        json_format.ParseDict({k: v for k, v in task.items() if k in _SPEC_KEYS}, spec)
        if "properties" in task:
            spec.properties.update(task["properties"])
        if "timeout_s" in task:
            spec.timeout.CopyFrom(duration_proto(task["timeout_s"]))
    except (json_format.ParseError, ValueError, TypeError, AttributeError) as exc:
        raise InvalidArgument.for_field(where, str(exc)) from None
    blockers = task.get("blocked_by") or []
    if not isinstance(blockers, list) or not all(isinstance(b, str | int) for b in blockers):
        raise InvalidArgument.for_field(f"{where}.blocked_by", "must be a list of task keys")
    return spec, [str(b) for b in blockers]


def _edges(edges: Any) -> list[tuple[str, str]]:
    if edges is None:
        return []
    if not isinstance(edges, list):
        raise InvalidArgument.for_field("edges", "must be a list of {blocker, blocked}")
    out = []
    for index, edge in enumerate(edges):
        if not isinstance(edge, dict) or not {"blocker", "blocked"} <= set(edge):
            raise InvalidArgument.for_field(
                f"edges[{index}]", "must be a mapping with 'blocker' and 'blocked' task keys"
            )
        out.append((str(edge["blocker"]), str(edge["blocked"])))
    return out
