"""MCP server configuration checks: every violation names its field."""

from __future__ import annotations

import dataclasses

import pytest

from agentfleet.errors import InvalidArgument
from agentfleet.mcp.servers import McpServerConfig
from services.toolpool.mcp import server_violations, validate_server

STDIO = McpServerConfig(project_id="p", name="files", transport="stdio", command="mcp-files")
HTTP = McpServerConfig(
    project_id="p", name="api", transport="streamable_http", url="https://mcp.example.test/mcp"
)


def fields(config: McpServerConfig) -> set[str]:
    return {v.field for v in server_violations(config)}


def test_valid_configurations_pass() -> None:
    validate_server(STDIO)
    validate_server(HTTP)
    validate_server(dataclasses.replace(HTTP, transport="sse", tool_prefix=""))
    validate_server(dataclasses.replace(STDIO, env={"KEY": "${SECRET}"}, args=("$${literal}",)))


@pytest.mark.parametrize("name", ["", "Upper", "has space", "x" * 64, "dots.no"])
def test_bad_name(name: str) -> None:
    assert fields(dataclasses.replace(STDIO, name=name)) == {"mcp_server.name"}


def test_stdio_needs_a_command_and_no_http_settings() -> None:
    config = dataclasses.replace(STDIO, command="", url="https://x.test", headers={"A": "b"})
    assert fields(config) == {"mcp_server.command", "mcp_server.url", "mcp_server.headers"}


@pytest.mark.parametrize(
    "url", [None, "", "ftp://x.test/mcp", "mcp.example.test/mcp", "http://", "file:///etc/passwd"]
)
def test_http_transports_need_an_http_url(url: str | None) -> None:
    for transport in ("sse", "streamable_http"):
        config = dataclasses.replace(HTTP, transport=transport, url=url)
        assert fields(config) == {"mcp_server.url"}, (transport, url)


def test_http_transports_refuse_stdio_settings() -> None:
    config = dataclasses.replace(HTTP, command="x", args=("a",), env={"A": "b"})
    assert fields(config) == {"mcp_server.command", "mcp_server.args", "mcp_server.env"}


def test_unknown_transport() -> None:
    assert fields(dataclasses.replace(HTTP, transport="websocket")) == {"mcp_server.transport"}  # type: ignore[arg-type]


@pytest.mark.parametrize("value", [0.0, -1.0, float("nan"), float("inf"), 10_000.0])
def test_timeouts_in_range(value: float) -> None:
    config = dataclasses.replace(STDIO, connect_timeout_s=value, call_timeout_s=value)
    assert fields(config) == {"mcp_server.connect_timeout", "mcp_server.call_timeout"}


@pytest.mark.parametrize("prefix", ["1abc", "has space", "x" * 33, "a/b"])
def test_bad_tool_prefix(prefix: str) -> None:
    assert fields(dataclasses.replace(STDIO, tool_prefix=prefix)) == {"mcp_server.tool_prefix"}


def test_malformed_references_and_bad_names_are_located() -> None:
    config = dataclasses.replace(
        STDIO, args=("ok", "${bad-name}"), env={"GOOD": "${}", "1BAD": "x"}
    )
    assert fields(config) == {
        "mcp_server.args[1]",
        "mcp_server.env[GOOD]",
        "mcp_server.env[1BAD]",
    }


def test_header_names_and_line_breaks() -> None:
    config = dataclasses.replace(HTTP, headers={"Bad Header": "x", "X-Ok": "a\r\nInjected: 1"})
    assert fields(config) == {"mcp_server.headers[Bad Header]", "mcp_server.headers[X-Ok]"}


def test_validate_raises_one_error_listing_every_violation() -> None:
    config = dataclasses.replace(STDIO, name="BAD", command="", call_timeout_s=0)
    with pytest.raises(InvalidArgument) as caught:
        validate_server(config)
    assert {v.field for v in caught.value.violations} == {
        "mcp_server.name",
        "mcp_server.command",
        "mcp_server.call_timeout",
    }
    assert "mcp_server.command" in caught.value.message


def test_exposed_names() -> None:
    assert STDIO.exposed_name("read") == "files__read"
    assert dataclasses.replace(STDIO, tool_prefix="").exposed_name("read") == "read"
    assert dataclasses.replace(STDIO, tool_prefix="fs_").exposed_name("read") == "fs_read"
