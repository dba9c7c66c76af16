"""Spawn trees: the depth-first order GetRunTree returns."""

from __future__ import annotations

from collections.abc import Sequence

from services.history.models import TreeRow


def depth_first(rows: Sequence[TreeRow]) -> list[TreeRow]:
    """Runs from the root, each parent before its children, siblings oldest first.

    ``rows`` is one tree; a run whose parent is missing (cut by the tree limit) is dropped
    together with its subtree rather than shown detached.
    """
    children: dict[str, list[TreeRow]] = {}
    roots: list[TreeRow] = []
    for row in rows:
        if row.parent_run_id is None:
            roots.append(row)
        else:
            children.setdefault(str(row.parent_run_id), []).append(row)
    for siblings in children.values():
        siblings.sort(key=lambda r: (r.created_at, str(r.id)))
    ordered: list[TreeRow] = []
    stack = list(reversed(roots))
    while stack:
        row = stack.pop()
        ordered.append(row)
        stack.extend(reversed(children.get(str(row.id), [])))
    return ordered
