"""Task DAG files (``examples/dags/*.yaml``) as CreateTaskGraph requests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from agentfleet.errors import InvalidArgument
from agentfleet.v1 import dispatcher_pb2

__all__ = ["load_dag_file"]

_SPEC_FIELDS = ("key", "title", "description", "assigned_agent", "tags", "priority", "max_retries")


def load_dag_file(path: str | Path, *, project_id: str) -> dispatcher_pb2.CreateTaskGraphRequest:
    """Reads a DAG file: ``title``, ``max_parallel``, ``tasks`` (TaskSpec fields) and
    ``edges`` (``blocker``/``blocked`` keys)."""
    document: dict[str, Any] = yaml.safe_load(Path(path).read_text())
    if not isinstance(document, dict) or not isinstance(document.get("tasks"), list):
        raise InvalidArgument(f"{path}: a DAG file is a mapping with a 'tasks' list")
    request = dispatcher_pb2.CreateTaskGraphRequest(
        project_id=project_id,
        title=str(document.get("title", "")),
        max_parallel=int(document.get("max_parallel", 0)),
    )
    for task in document["tasks"]:
        request.tasks.append(
            dispatcher_pb2.TaskSpec(**{k: task[k] for k in _SPEC_FIELDS if k in task})
        )
    for edge in document.get("edges", []):
        request.edges.append(
            dispatcher_pb2.TaskEdge(
                blocker_key=str(edge["blocker"]), blocked_key=str(edge["blocked"])
            )
        )
    return request
