"""find_cycle: pure cycle detection over blocks edges."""

from __future__ import annotations

import itertools
import random

import pytest

from agentfleet.graph.dag import find_cycle


def _is_cycle_of(cycle: list[str], edges: list[tuple[str, str]]) -> bool:
    edge_set = set(edges)
    return len(set(cycle)) == len(cycle) and all(
        (a, b) in edge_set for a, b in zip(cycle, cycle[1:] + cycle[:1], strict=True)
    )


@pytest.mark.parametrize(
    ("nodes", "edges"),
    [
        ([], []),
        (["a"], []),
        (["a", "b", "c"], [("a", "b"), ("b", "c"), ("a", "c")]),
        # Diamond plus a synthesis task blocked by everything: seed 001 pattern 2.
        ([], [("r", "p"), ("r", "q"), ("p", "s"), ("q", "s"), ("r", "s")]),
    ],
)
def test_acyclic_graphs_have_no_cycle(nodes: list[str], edges: list[tuple[str, str]]) -> None:
    assert find_cycle(nodes, edges) is None


def test_self_loop() -> None:
    assert find_cycle(["a", "b"], [("a", "b"), ("b", "b")]) == ["b"]


def test_two_cycle_in_edge_order() -> None:
    cycle = find_cycle(["a", "b"], [("a", "b"), ("b", "a")])
    assert cycle is not None
    assert sorted(cycle) == ["a", "b"]


def test_cycle_behind_an_acyclic_prefix_is_returned_exactly() -> None:
    edges = [("start", "x"), ("x", "y"), ("y", "z"), ("z", "x"), ("z", "end")]
    cycle = find_cycle(["start", "end"], edges)
    assert cycle is not None
    assert sorted(cycle) == ["x", "y", "z"]
    assert _is_cycle_of(cycle, edges)


def test_nodes_named_only_by_edges_count() -> None:
    assert find_cycle([], [("a", "b"), ("b", "a")]) is not None
    assert find_cycle(["lonely"], [("a", "b")]) is None


def test_random_graphs_agree_with_brute_force() -> None:
    rng = random.Random(7)
    for _ in range(300):
        nodes = [f"n{i}" for i in range(rng.randint(1, 7))]
        edges = [(a, b) for a, b in itertools.product(nodes, nodes) if rng.random() < 0.2]
        cycle = find_cycle(nodes, edges)
        assert (cycle is not None) == _has_cycle_brute_force(nodes, edges), edges
        if cycle is not None:
            assert _is_cycle_of(cycle, edges), (cycle, edges)


def _has_cycle_brute_force(nodes: list[str], edges: list[tuple[str, str]]) -> bool:
    """A cycle exists when some node reaches itself (transitive closure)."""
    reach = {n: {b for a, b in edges if a == n} for n in nodes}
    changed = True
    while changed:
        changed = False
        for n in nodes:
            extra = set().union(*(reach[m] for m in reach[n])) - reach[n]
            if extra:
                reach[n] |= extra
                changed = True
    return any(n in reach[n] for n in nodes)
