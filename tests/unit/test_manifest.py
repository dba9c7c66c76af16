import copy
import json
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import json_format, struct_pb2

from agentfleet.errors import InvalidArgument
from services.executor.registry.definitions import AgentDefinition
from services.executor.registry.manifest import (
    MAX_CONFIG_BYTES,
    MAX_MANIFEST_BYTES,
    definition_violations,
    parse_manifest,
)
from services.executor.registry.model_config import ModelConfig

EXAMPLE = Path(__file__).parents[2] / "examples/products/research/manifest.json"


def example() -> dict[str, Any]:
    return json.loads(EXAMPLE.read_text())


def violations(document: dict[str, Any], **kwargs: Any) -> dict[str, str]:
    with pytest.raises(InvalidArgument) as caught:
        parse_manifest(document, **kwargs)
    return {v.field: v.description for v in caught.value.violations}


def agent(name: str, **fields: Any) -> dict[str, Any]:
    return {"name": name, "model": {"name": "gemini-2.5-flash"}, **fields}


def test_the_research_example_validates_into_its_four_agents_and_web_server() -> None:
    manifest = parse_manifest(example(), project_agents=[])
    assert manifest.name == "research"
    assert [a.name for a in manifest.agents] == [
        "research-assistant",
        "web-browser",
        "paper-summarizer",
        "data-analyst",
    ]
    browser = manifest.agents[1]
    assert browser.tools == ["web__web_search", "web__web_fetch"]
    assert browser.model == ModelConfig(provider="google", name="gemini-2.5-flash", temperature=0.2)
    (web,) = manifest.mcp_servers
    assert (web.name, web.transport, web.command) == ("web", "stdio", "python")
    assert web.args == ("examples/mcp/offline_web/server.py",)
    lead = manifest.agents[0]
    assert {"list_available_agents", "spawn_agents"} <= set(lead.tools)
    assert lead.is_default
    assert lead.visibility == "external"
    assert all(a.visibility != "external" for a in manifest.agents[1:])


def test_the_example_survives_the_struct_round_trip_with_float_numbers() -> None:
    # InstallProduct carries the manifest as a Struct: every number becomes a double.
    struct = json_format.ParseDict(example(), struct_pb2.Struct())
    document = json_format.MessageToDict(struct)
    assert document["agents"][1]["max_steps"] == 20.0
    manifest = parse_manifest(document)
    assert manifest.agents[1].max_steps == 20
    assert type(manifest.agents[1].max_steps) is int


def test_schema_errors_name_every_field_path() -> None:
    document = example()
    document["agents"][2]["flow_type"] = "loopy"
    document["agents"][0]["max_steps"] = 2.5
    document["agents"][1]["colour"] = "red"
    del document["agents"][3]["model"]["name"]
    document["mcp"]["servers"][0]["transport"] = "carrier-pigeon"
    found = violations(document)
    assert found == {
        "manifest.agents[0].max_steps": "2.5 is not of type 'integer'",
        "manifest.agents[1].colour": "is not a known field",
        "manifest.agents[2].flow_type": (
            "'loopy' is not one of ['single', 'sequential', 'loop', 'parallel']"
        ),
        "manifest.agents[3].model.name": "is required",
        "manifest.mcp.servers[0].transport": (
            "'carrier-pigeon' is not one of ['stdio', 'sse', 'streamable_http']"
        ),
    }


def test_the_error_message_lists_paths_too() -> None:
    document = example()
    document["agents"][2]["flow_type"] = "loopy"
    with pytest.raises(InvalidArgument, match=r"manifest\.agents\[2\]\.flow_type: 'loopy'"):
        parse_manifest(document)


@pytest.mark.parametrize(
    ("change", "field", "fragment"),
    [
        (lambda d: d.pop("version"), "manifest.version", "is required"),
        (lambda d: d.update(name="Research!"), "manifest.name", "lowercase letters"),
        (lambda d: d["agents"][0].update(name="A B"), "manifest.agents[0].name", "lowercase"),
        (
            lambda d: d["mcp"]["servers"][0].pop("command"),
            "manifest.mcp.servers[0].command",
            "is required for the stdio transport",
        ),
        (
            lambda d: d["mcp"]["servers"][0].update(transport="sse"),
            "manifest.mcp.servers[0].url",
            "is required for the sse transport",
        ),
        (
            lambda d: d["mcp"]["servers"][0].update(tool_prefix="9lives"),
            "manifest.mcp.servers[0].tool_prefix",
            "must be empty or up to 32",
        ),
        (
            lambda d: d["mcp"]["servers"][0].update(env={"9X": "y"}),
            "manifest.mcp.servers[0].env[9X]",
            "must be a variable name",
        ),
        (
            lambda d: d["agents"][0]["model"].update(temperature=3),
            "manifest.agents[0].model.temperature",
            "greater than the maximum of 2",
        ),
        (
            lambda d: d.update(agents=[agent(f"a{i}") for i in range(201)]),
            "manifest.agents",
            "has 201 entries; at most 200",
        ),
    ],
)
def test_each_kind_of_schema_error_names_its_field(change: Any, field: str, fragment: str) -> None:
    document = example()
    change(document)
    found = violations(document)
    assert field in found, found
    assert fragment in found[field]


def test_a_manifest_over_one_mebibyte_is_refused_before_validation() -> None:
    document = example()
    document["agents"][0]["system_prompt"] = "x" * MAX_MANIFEST_BYTES
    assert list(violations(document)) == ["manifest"]


def test_a_config_over_64_kib_is_refused_in_a_definition_and_a_manifest() -> None:
    """A definition's config is read for every run: it may not be as large as a message."""
    big = {"notes": "x" * MAX_CONFIG_BYTES}
    found = {
        v.field: v.description for v in definition_violations(AgentDefinition(name="a", config=big))
    }
    assert list(found) == ["agent_definition.config"]
    assert "at most 65536" in found["agent_definition.config"]
    document = example()
    document["agents"][0]["config"] = big
    assert "manifest.agents[0].config" in violations(document)
    small = {"notes": "x" * (MAX_CONFIG_BYTES - 100)}
    assert definition_violations(AgentDefinition(name="a", config=small)) == []


def test_semantic_errors_name_their_fields() -> None:
    document = {
        "name": "p",
        "version": "1",
        "agents": [
            agent("a", flow_type="sequential", sub_agents=["b", "ghost"], max_iterations=3),
            agent("b", sub_agents=["a"]),
            agent("a", flow_type="parallel"),
            agent("c", is_default=True),
            agent("d", is_default=True),
            agent("e", flow_type="loop", sub_agents=["e", "from-project"]),
        ],
        "mcp": {
            "servers": [
                {"name": "web", "transport": "stdio", "command": "x", "url": "http://a"},
                {"name": "web", "transport": "sse", "url": "http://a", "env": {"K": "v"}},
                {"name": "other", "transport": "sse", "url": "http://b", "tool_prefix": "web__"},
            ]
        },
    }
    found = violations(document, project_agents=["from-project"])
    assert found == {
        "manifest.agents[0].max_iterations": "applies only to flow_type loop",
        "manifest.agents[0].sub_agents[1]": (
            "names no agent of the manifest or the project: 'ghost'"
        ),
        "manifest.agents[1].sub_agents": "must be empty for flow_type single",
        "manifest.agents[2].name": "duplicate agent name 'a' (also at manifest.agents[0])",
        "manifest.agents[2].sub_agents": "flow_type parallel needs at least one sub-agent",
        "manifest.agents[4].is_default": (
            "only one agent may be the default (manifest.agents[3] is)"
        ),
        "manifest.agents[5].sub_agents[0]": "an agent cannot be its own sub-agent",
        "manifest.mcp.servers[0].url": "must be empty for the stdio transport",
        "manifest.mcp.servers[1].name": (
            "duplicate MCP server name 'web' (also at manifest.mcp.servers[0])"
        ),
        "manifest.mcp.servers[1].env": "must be empty for the sse transport",
        "manifest.mcp.servers[2].tool_prefix": (
            "exposes tools as web__<tool> like manifest.mcp.servers[0]; "
            "their tool names would clash"
        ),
    }


def test_mcp_servers_meet_the_same_rules_as_the_toolpools_upsert() -> None:
    # What UpsertMcpServer refuses, a manifest may not store either (one rule set).
    document = {
        "name": "p",
        "version": "1",
        "agents": [agent("a")],
        "mcp": {
            "servers": [
                {"name": "s", "transport": "stdio", "command": "x", "env": {"K": "${broken"}},
                {"name": "h", "transport": "sse", "url": "http://a/${TOKEN"},
            ]
        },
    }
    found = violations(document)
    assert set(found) == {"manifest.mcp.servers[0].env[K]", "manifest.mcp.servers[1].url"}
    assert all("malformed ${...} reference" in why for why in found.values())


def test_a_loop_without_max_iterations_is_valid_and_takes_the_default_later() -> None:
    document = {
        "name": "p",
        "version": "1",
        "agents": [agent("w"), agent("l", flow_type="loop", sub_agents=["w"])],
    }
    assert parse_manifest(document).agents[1].max_iterations is None


def test_flow_membership_cycles_are_refused() -> None:
    document = {
        "name": "p",
        "version": "1",
        "agents": [
            agent("a", flow_type="sequential", sub_agents=["b"]),
            agent("b", flow_type="loop", sub_agents=["c"]),
            agent("c", flow_type="parallel", sub_agents=["a"]),
        ],
    }
    found = violations(document)
    assert found == {
        "manifest.agents[0].sub_agents": "flow membership forms a cycle: a -> b -> c -> a"
    }


def test_sub_agents_are_only_checked_against_the_project_when_it_is_given() -> None:
    document = {
        "name": "p",
        "version": "1",
        "agents": [agent("s", flow_type="sequential", sub_agents=["elsewhere"])],
    }
    assert parse_manifest(document).agents[0].sub_agents == ["elsewhere"]
    assert "manifest.agents[0].sub_agents[0]" in violations(document, project_agents=[])


def test_upsert_definitions_are_checked_with_the_same_rules_and_proto_field_names() -> None:
    bad = AgentDefinition(
        name="Bad_Name",
        model=ModelConfig(provider="openai", name="x", max_output_tokens=0),
        flow_type="single",
        sub_agents=["x"],
        default_timeout_s=-1.0,
    )
    found = {v.field: v.description for v in definition_violations(bad)}
    assert set(found) == {
        "agent_definition.name",
        "agent_definition.model.provider",
        "agent_definition.model.max_output_tokens",
        "agent_definition.sub_agents",
        "agent_definition.default_timeout",
    }
    assert definition_violations(AgentDefinition(name="good")) == []


def test_model_extra_allows_generation_settings_only() -> None:
    settings = {
        "temperature": 0.3,
        "top_p": 0.9,
        "top_k": 40.0,  # Struct numbers are doubles
        "max_output_tokens": 512,
        "stop_sequences": ["END"],
        "presence_penalty": -0.5,
        "frequency_penalty": 0.5,
        "seed": 7,
        "safety_settings": [
            {"category": "HARM_CATEGORY_HARASSMENT", "threshold": "BLOCK_ONLY_HIGH"}
        ],
        "thinking_config": {"include_thoughts": False, "thinking_budget": 0},
    }
    good = agent("g", model={"name": "m", "extra": settings})
    assert parse_manifest({"name": "p", "version": "1", "agents": [good]}).agents[0].model.extra
    bad_extra = {
        "http_options": {"base_url": "http://169.254.169.254"},
        "candidate_count": 8,
        "top_p": 1.5,
        "stop_sequences": ["a"] * 6,
        "safety_settings": [{"category": "HARM_CATEGORY_HARASSMENT", "threshold": "LOUD"}],
        "thinking_config": {"thinking_budget": 10**9, "headers": {}},
    }
    bad = agent("b", model={"name": "m", "extra": bad_extra})
    found = violations({"name": "p", "version": "1", "agents": [bad]})
    extra = "manifest.agents[0].model.extra"
    assert set(found) == {
        f"{extra}.http_options",
        f"{extra}.candidate_count",
        f"{extra}.top_p",
        f"{extra}.stop_sequences",
        f"{extra}.safety_settings[0].threshold",
        f"{extra}.thinking_config.thinking_budget",
        f"{extra}.thinking_config.headers",
    }
    assert "not an allowed generation setting" in found[f"{extra}.http_options"]


def test_parsing_does_not_mutate_the_document() -> None:
    document = example()
    before = copy.deepcopy(document)
    parse_manifest(document)
    assert document == before


def test_a_list_past_its_bound_is_one_violation_and_is_not_walked() -> None:
    # 150,000 empty tags used to be 150,000 violations: seconds, and a 9.9 MB trailer.
    found = definition_violations(AgentDefinition(name="a", tags=[""] * 150_000))
    assert [(v.field, v.description) for v in found] == [
        ("agent_definition.tags", "has 150000 entries; at most 200")
    ]


def test_violations_are_capped_with_a_count_of_the_rest() -> None:
    found = definition_violations(AgentDefinition(name="a", tags=[""] * 150))
    assert len(found) == 21
    assert found[0].field == "agent_definition.tags[0]"
    assert (found[-1].field, found[-1].description) == (
        "agent_definition",
        "and 130 more violations (the first 20 are listed)",
    )


def test_a_manifest_with_a_huge_list_is_refused_at_its_bound() -> None:
    found = violations({"name": "p", "version": "1", "agents": [agent("a", tags=[""] * 100_000)]})
    assert found == {"manifest.agents[0].tags": "has 100000 entries; at most 200"}
