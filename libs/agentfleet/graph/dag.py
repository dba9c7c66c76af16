"""Cycle detection for task DAGs (``blocks`` edges: blocker -> blocked). Pure, no I/O.

Used by ``create_subtasks`` and by the dispatcher (CreateTaskGraph, AddTasks), each inside
the transaction that adds the edges.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["find_cycle"]


def find_cycle(nodes: Iterable[str], edges: Iterable[tuple[str, str]]) -> list[str] | None:
    """One cycle of the directed graph, or ``None`` when it is acyclic.

    ``edges`` are ``(src, dst)`` pairs; a node named only by an edge counts as a node.
    The cycle is returned in edge order: ``[a, b, c]`` means ``a -> b -> c -> a``
    (a self-loop is ``[a]``). Topological sort (Kahn) finds whether one exists; the nodes
    it cannot order each keep an unordered predecessor, so walking predecessors from any
    of them must revisit a node, and the walk between the two visits is a cycle.
    Deterministic for inputs given in the same order.
    """
    successors: dict[str, list[str]] = {}
    predecessors: dict[str, list[str]] = {}
    for node in nodes:
        successors.setdefault(node, [])
        predecessors.setdefault(node, [])
    for src, dst in edges:
        successors.setdefault(src, []).append(dst)
        successors.setdefault(dst, [])
        predecessors.setdefault(dst, []).append(src)
        predecessors.setdefault(src, [])

    in_degree = {node: len(preds) for node, preds in predecessors.items()}
    ready = [node for node, degree in in_degree.items() if degree == 0]
    ordered: set[str] = set()
    while ready:
        node = ready.pop()
        ordered.add(node)
        for nxt in successors[node]:
            in_degree[nxt] -= 1
            if in_degree[nxt] == 0:
                ready.append(nxt)
    if len(ordered) == len(successors):
        return None

    start = next(node for node in successors if node not in ordered)
    position: dict[str, int] = {}
    walk: list[str] = []
    node = start
    while node not in position:
        position[node] = len(walk)
        walk.append(node)
        node = next(pred for pred in predecessors[node] if pred not in ordered)
    # walk follows edges backwards; reverse it so each node blocks the next one.
    cycle = walk[position[node] :]
    cycle.reverse()
    return cycle
