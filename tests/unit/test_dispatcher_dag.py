"""Validation of submitted task graphs, prompts and the selector rules (pure)."""

from __future__ import annotations

import pytest

from agentfleet.errors import InvalidArgument
from services.dispatcher.graphs.dag import NewTask, validate_graph
from services.dispatcher.prompt import BlockerResult, build_prompt
from services.dispatcher.selector import AgentInfo, choose_by_rules


def tasks(*keys: str) -> list[NewTask]:
    return [NewTask(key=k, title=k.upper()) for k in keys]


def problems(*args, **kwargs) -> str:  # type: ignore[no-untyped-def]
    with pytest.raises(InvalidArgument) as caught:
        validate_graph(*args, **kwargs)
    return caught.value.message


def test_a_dag_passes_and_duplicate_edges_collapse() -> None:
    graph = validate_graph(tasks("a", "b", "c"), [("a", "b"), ("a", "b"), ("b", "c")])
    assert graph.edges == [("a", "b"), ("b", "c")]


def test_cycles_are_named_in_edge_order() -> None:
    assert problems(tasks("a", "b"), [("a", "b"), ("b", "a")]).endswith("b -> a -> b")
    message = problems(tasks("a", "b", "c"), [("a", "b"), ("b", "c"), ("c", "a")])
    assert message.startswith("edges: blocks edges form a cycle:")
    assert {"a", "b", "c"} <= set(message.split(": ")[-1].split(" -> "))


def test_a_cycle_through_existing_tasks_is_found() -> None:
    message = problems(
        tasks("x"), [("b", "x"), ("x", "a")], existing_keys={"a", "b"}, existing_edges=[("a", "b")]
    )
    assert "cycle" in message
    assert "x" in message


def test_field_problems_name_their_fields() -> None:
    message = problems(
        [
            NewTask(key="bad key", title=""),
            NewTask(key="a", title="A", max_retries=11),
            NewTask(key="a", title="A"),
        ],
        [("a", "zz"), ("a", "a")],
    )
    for expected in (
        "tasks[0].key",
        "tasks[0].title: is required",
        "tasks[1].max_retries",
        "tasks[2].key: 'a' is also tasks[1]",
        "edges[0].blocked_key: unknown task key 'zz'",
        "edges[1]: task 'a' cannot block itself",
    ):
        assert expected in message
    assert "tasks: at least one task is required" in problems([], [])
    assert "already a task of the graph" in problems(tasks("a"), [], existing_keys={"a"})


def test_prompt_has_blockers_and_previous_error() -> None:
    prompt = build_prompt(
        title="Implement",
        description="Do it.",
        blockers=[BlockerResult(key="1.2", title="Spec", summary="the spec", session_id="s")],
        previous_error="duplicate name",
        feedback="check first",
    )
    assert prompt.startswith("# Task: Implement\n\nDo it.")
    assert "### 1.2: Spec\nthe spec" in prompt
    assert "failed with: duplicate name" in prompt
    assert "## Feedback\ncheck first" in prompt


def test_selector_rules() -> None:
    agents = [
        AgentInfo(name="web", tags=("web",)),
        AgentInfo(name="db", tags=("sql", "web")),
        AgentInfo(name="x", tags=("sql",)),
    ]
    assert (
        choose_by_rules(assigned_agent="me", tags=[], agents=agents).choice.chosen_by == "assigned"
    )
    chosen = choose_by_rules(assigned_agent="", tags=["sql", "web"], agents=agents).choice
    assert chosen is not None
    assert chosen.agent_name == "db"
    assert chosen.chosen_by == "tag_rule"
    tied = choose_by_rules(assigned_agent="", tags=["sql"], agents=agents)
    assert tied.choice is None
    assert [a.name for a in tied.tied] == ["db", "x"]
    assert choose_by_rules(assigned_agent="", tags=["none"], agents=agents).choice is None
