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


def descendants(rows: Sequence[TreeRow], run_id: str) -> list[str]:
    """The ids of ``run_id``'s descendants among ``rows`` (one tree), parents first."""
    ordered = depth_first(rows)
    below: set[str] = {run_id}
    found: list[str] = []
    for row in ordered:
        if row.parent_run_id is not None and str(row.parent_run_id) in below:
            below.add(str(row.id))
            found.append(str(row.id))
    return found
