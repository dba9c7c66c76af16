import pytest

from agentfleet.errors import InvalidArgument, NotFound
from services.toolpool.catalog import COORDINATION_TOOLS, ToolSpec, allows, resolve


def _tool(name: str, kind: str = "builtin", server: str = "") -> ToolSpec:
    return ToolSpec(
        name=name,
        description=name,
        parameters={"type": "object", "properties": {}},
        source_kind=kind,  # type: ignore[arg-type]
        mcp_server=server,
    )


CATALOG = [
    _tool("create_entity"),
    _tool("get_entity"),
    _tool("entities_search"),
    _tool("entities_list"),
    _tool("web__web_search", "mcp", "web"),
    _tool("web__web_fetch", "mcp", "web"),
    *COORDINATION_TOOLS,
]
SPAWN = ["list_available_agents", "spawn_agents"]


def names(tools: list[ToolSpec]) -> list[str]:
    return [t.name for t in tools]


def test_a_glob_resolves_the_expected_set() -> None:
    assert names(resolve(CATALOG, ["entities_*"], 0)) == ["entities_list", "entities_search"]
    assert names(resolve(CATALOG, ["web__*", "get_entity"], 0)) == [
        "get_entity",
        "web__web_fetch",
        "web__web_search",
    ]


def test_an_empty_whitelist_gives_no_tools() -> None:
    assert resolve(CATALOG, [], 0) == []


def test_star_gives_everything_at_the_top() -> None:
    assert set(names(resolve(CATALOG, ["*"], 0))) == {t.name for t in CATALOG}


def test_exact_names_that_do_not_exist_are_named() -> None:
    with pytest.raises(NotFound, match="'nope', 'web__missing'"):
        resolve(CATALOG, ["get_entity", "nope", "web__missing"], 0)


def test_a_glob_matching_nothing_is_not_an_error() -> None:
    assert resolve(CATALOG, ["zzz*"], 0) == []


def test_duplicates_collapse() -> None:
    assert names(resolve(CATALOG, ["get_entity", "get_*", "get_entity"], 0)) == ["get_entity"]


def test_spawn_tools_vanish_at_depth_one_unless_named_exactly() -> None:
    at_one = names(resolve(CATALOG, ["*"], 1))
    assert not set(SPAWN) & set(at_one)
    assert "exit_loop" in at_one
    assert set(SPAWN) <= set(names(resolve(CATALOG, ["*", *SPAWN], 1)))


def test_spawn_tools_vanish_always_at_depth_two() -> None:
    assert not set(SPAWN) & set(names(resolve(CATALOG, ["*", *SPAWN], 2)))
    assert "exit_loop" in names(resolve(CATALOG, ["exit_loop", *SPAWN], 2))


@pytest.mark.parametrize(
    ("patterns", "name", "depth", "expected"),
    [
        (["get_*"], "get_entity", 0, True),
        (["get_*"], "create_entity", 0, False),
        (["*"], "spawn_agents", 0, True),
        (["*"], "spawn_agents", 1, False),
        (["spawn_agents"], "spawn_agents", 1, True),
        (["spawn_agents"], "spawn_agents", 2, False),
        (["spawn_*"], "spawn_agents", 1, False),
        (["GET_*"], "get_entity", 0, False),
        ([], "get_entity", 0, False),
    ],
)
def test_allows_matches_resolve(patterns: list[str], name: str, depth: int, expected: bool) -> None:
    assert allows(patterns, name, depth) is expected
    resolved = names(resolve(CATALOG, patterns, depth))
    assert (name in resolved) is expected


@pytest.mark.parametrize("bad", ["", "has space", "a" * 201, "semi;colon", "emoji\u2603"])
def test_bad_patterns_are_invalid_arguments_naming_the_index(bad: str) -> None:
    with pytest.raises(InvalidArgument) as caught:
        resolve(CATALOG, ["get_entity", bad], 0)
    assert caught.value.violations[0].field == "patterns[1]"


def test_negative_depth_is_refused() -> None:
    with pytest.raises(InvalidArgument, match="depth"):
        resolve(CATALOG, ["*"], -1)


def test_sources_are_labelled_for_tool_call_rows() -> None:
    by_name = {t.name: t for t in CATALOG}
    assert by_name["get_entity"].source_label == "builtin"
    assert by_name["web__web_fetch"].source_label == "mcp:web"
    assert by_name["spawn_agents"].source_label == "executor"
    assert by_name["spawn_agents"].executed_by_executor
