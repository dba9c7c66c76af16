"""Stdio MCP servers run only what the operator allowed (AGENTFLEET_MCP_STDIO_ALLOWLIST).

The old remote-code-execution chain, tried with a member token, a tenant-admin token and a
stolen service credential: ``TestMcpServer`` with ``python -c``, ``UpsertMcpServer`` with a
command the operator did not allow, a product manifest carrying one. Each is refused with
PERMISSION_DENIED, nothing is written, and the command never runs (it would leave a file).
"""

from __future__ import annotations

import sys
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

import asyncpg
import grpc
import pytest
from google.protobuf import json_format, struct_pb2

from agentfleet.config import ConfigError, load_settings
from agentfleet.errors import PermissionDenied
from agentfleet.mcp.servers import McpServerConfig
from agentfleet.mcp.stdio import is_allowed_stdio, is_loader_variable, require_allowed_stdio
from agentfleet.testing.services import Stack
from agentfleet.testing.stdio_allowlist import TEST_SERVER
from agentfleet.v1 import registry_pb2, registry_pb2_grpc, toolpool_pb2, toolpool_pb2_grpc
from services.toolpool.mcp import McpClientPool

PROJECT = "alpha"
CALLERS = ("member", "admin", "service")
ALLOWED = (sys.executable, TEST_SERVER, "--transport", "stdio")


# -- the policy, pure ------------------------------------------------------------------------


def test_only_an_exact_command_line_is_allowed() -> None:
    allowlist = (("python", "-m", "x"), ("/usr/bin/tool",))
    assert is_allowed_stdio("python", ["-m", "x"], allowlist)
    assert is_allowed_stdio("/usr/bin/tool", [], allowlist)
    for command, args in [
        ("python", ["-c", "import os; os.system('id')"]),
        ("python", ["-m", "x", "--extra"]),
        ("python", ["-m"]),
        ("python", ["-m", "y"]),
        ("/usr/bin/tool", ["--evil"]),
        ("tool", []),
        ("sh", ["-c", "python -m x"]),
    ]:
        assert not is_allowed_stdio(command, args, allowlist), (command, args)
    with pytest.raises(PermissionDenied, match="AGENTFLEET_MCP_STDIO_ALLOWLIST is empty"):
        require_allowed_stdio("python", ["-m", "x"], ())
    with pytest.raises(PermissionDenied, match="not one of the 2 allowed"):
        require_allowed_stdio("python", ["-c", "1"], allowlist)


def test_the_setting_takes_shell_quoted_lines_separated_by_semicolons_or_newlines() -> None:
    raw = "python -m x ; '/opt/my tools/server' --flag\n\n  npx -y @scope/server  "
    settings = load_settings({"AGENTFLEET_MCP_STDIO_ALLOWLIST": raw})
    assert settings.mcp_stdio_allowlist == (
        ("python", "-m", "x"),
        ("/opt/my tools/server", "--flag"),
        ("npx", "-y", "@scope/server"),
    )
    assert load_settings({}).mcp_stdio_allowlist == ()
    with pytest.raises(ConfigError, match="AGENTFLEET_MCP_STDIO_ALLOWLIST"):
        load_settings({"AGENTFLEET_MCP_STDIO_ALLOWLIST": "python -m 'unterminated"})


@pytest.mark.parametrize(
    "name",
    ["LD_PRELOAD", "ld_library_path", "DYLD_INSERT_LIBRARIES", "PYTHONPATH", "PYTHONSTARTUP",
     "NODE_OPTIONS", "PERL5OPT", "RUBYOPT", "BASH_ENV", "ENV", "PATH", "GCONV_PATH",
     "JAVA_TOOL_OPTIONS", "NPM_CONFIG_REGISTRY", "UV_INDEX_URL"],
)  # fmt: skip
def test_loader_and_interpreter_variables_are_refused(name: str) -> None:
    assert is_loader_variable(name)


@pytest.mark.parametrize("name", ["API_TOKEN", "GREETING", "NODE_ENV", "HOME_REGION"])
def test_ordinary_variables_are_kept(name: str) -> None:
    assert not is_loader_variable(name)


# -- the RCE chain against the services ----------------------------------------------------


# The credential of the service that calls the target, as if stolen from its environment.
_CALLER_OF = {"toolpool": "executor", "executor": "dispatcher"}


async def _token(stack: Stack, caller: str, target: str = "toolpool") -> str:
    if caller == "service":
        return stack.service_tokens[_CALLER_OF[target]]
    return await stack.create_token(PROJECT, role=caller)


async def _refusal(call: Awaitable[Any]) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call
    return caught.value


async def _rows(pool: asyncpg.Pool) -> dict[str, int]:
    return {
        table: await pool.fetchval(f"SELECT count(*) FROM {table} WHERE project_id = $1", PROJECT)
        for table in ("kb.mcp_servers", "kb.products", "kb.agent_definitions")
    }


def _rce(marker: Path) -> toolpool_pb2.McpServer:
    """What an attacker sent before: run any Python on the toolpool host."""
    return toolpool_pb2.McpServer(
        name="pwn",
        transport=toolpool_pb2.MCP_TRANSPORT_STDIO,
        command="python",
        args=["-c", f"open({str(marker)!r}, 'w').write('ran')"],
    )


@pytest.mark.parametrize("caller", CALLERS)
async def test_test_mcp_server_with_python_c_is_refused(
    stack: Stack, caller: str, tmp_path: Path
) -> None:
    marker = tmp_path / "ran"
    toolpool = toolpool_pb2_grpc.ToolPoolServiceStub(
        stack.channel("toolpool", token=await _token(stack, caller))
    )
    error = await _refusal(
        toolpool.TestMcpServer(
            toolpool_pb2.TestMcpServerRequest(project_id=PROJECT, mcp_server=_rce(marker))
        )
    )
    assert error.code() == grpc.StatusCode.PERMISSION_DENIED, error.details()
    assert not marker.exists()
    assert await _rows(stack.pool) == {
        "kb.mcp_servers": 0,
        "kb.products": 0,
        "kb.agent_definitions": 0,
    }


@pytest.mark.parametrize("caller", CALLERS)
async def test_upsert_of_a_command_not_allowed_is_refused(
    stack: Stack, caller: str, tmp_path: Path
) -> None:
    marker = tmp_path / "ran"
    toolpool = toolpool_pb2_grpc.ToolPoolServiceStub(
        stack.channel("toolpool", token=await _token(stack, caller))
    )
    for server in (
        _rce(marker),
        toolpool_pb2.McpServer(
            name="shell",
            transport=toolpool_pb2.MCP_TRANSPORT_STDIO,
            command="sh",
            args=["-c", f"touch {marker}"],
        ),
        # An allowed command line with one argument more is another command line.
        toolpool_pb2.McpServer(
            name="more",
            transport=toolpool_pb2.MCP_TRANSPORT_STDIO,
            command=ALLOWED[0],
            args=[*ALLOWED[1:], "--evil"],
        ),
    ):
        error = await _refusal(
            toolpool.UpsertMcpServer(
                toolpool_pb2.UpsertMcpServerRequest(project_id=PROJECT, mcp_server=server)
            )
        )
        assert error.code() == grpc.StatusCode.PERMISSION_DENIED, error.details()
        if caller == "admin":
            # The admin got past the role check: the answer names the operator's setting.
            assert "AGENTFLEET_MCP_STDIO_ALLOWLIST" in error.details()
    assert not marker.exists()
    assert (await _rows(stack.pool))["kb.mcp_servers"] == 0


@pytest.mark.parametrize("caller", CALLERS)
async def test_install_product_with_a_stdio_server_not_allowed_is_refused(
    stack: Stack, caller: str, tmp_path: Path
) -> None:
    marker = tmp_path / "ran"
    manifest = {
        "name": "trojan",
        "version": "1.0.0",
        "agents": [{"name": "helper", "model": {"name": "gemini-2.5-flash"}}],
        "mcp": {
            "servers": [
                {
                    "name": "pwn",
                    "transport": "stdio",
                    "command": "python",
                    "args": ["-c", f"open({str(marker)!r}, 'w').write('ran')"],
                }
            ]
        },
    }
    registry = registry_pb2_grpc.AgentRegistryServiceStub(
        stack.channel("executor", token=await _token(stack, caller, "executor"))
    )
    for validate_only in (True, False):
        error = await _refusal(
            registry.InstallProduct(
                registry_pb2.InstallProductRequest(
                    project_id=PROJECT,
                    manifest=json_format.ParseDict(manifest, struct_pb2.Struct()),
                    validate_only=validate_only,
                )
            )
        )
        assert error.code() == grpc.StatusCode.PERMISSION_DENIED, error.details()
        if caller == "admin":
            assert "manifest.mcp.servers[0].command" in error.details()
            assert "AGENTFLEET_MCP_STDIO_ALLOWLIST" in error.details()
    assert not marker.exists()
    assert await _rows(stack.pool) == {
        "kb.mcp_servers": 0,
        "kb.products": 0,
        "kb.agent_definitions": 0,
    }


async def test_an_allowed_command_cannot_bring_a_loader_variable(stack: Stack) -> None:
    toolpool = toolpool_pb2_grpc.ToolPoolServiceStub(
        stack.channel("toolpool", token=await stack.create_token(PROJECT, role="admin"))
    )
    server = toolpool_pb2.McpServer(
        name="preloaded",
        transport=toolpool_pb2.MCP_TRANSPORT_STDIO,
        command=ALLOWED[0],
        args=list(ALLOWED[1:]),
        env={"LD_PRELOAD": "/tmp/evil.so", "PYTHONSTARTUP": "/tmp/evil.py", "GREETING": "hi"},
    )
    error = await _refusal(
        toolpool.UpsertMcpServer(
            toolpool_pb2.UpsertMcpServerRequest(project_id=PROJECT, mcp_server=server)
        )
    )
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "mcp_server.env[LD_PRELOAD]" in error.details()
    assert "mcp_server.env[PYTHONSTARTUP]" in error.details()
    assert "GREETING" not in error.details()
    assert (await _rows(stack.pool))["kb.mcp_servers"] == 0


async def test_an_allowed_server_is_tested_by_an_admin(stack: Stack) -> None:
    toolpool = toolpool_pb2_grpc.ToolPoolServiceStub(
        stack.channel("toolpool", token=await stack.create_token(PROJECT, role="admin"))
    )
    server = toolpool_pb2.McpServer(
        name="test",
        transport=toolpool_pb2.MCP_TRANSPORT_STDIO,
        command=ALLOWED[0],
        args=list(ALLOWED[1:]),
    )
    probe = await toolpool.TestMcpServer(
        toolpool_pb2.TestMcpServerRequest(project_id=PROJECT, mcp_server=server)
    )
    assert probe.ok, probe.error
    assert "test__echo" in {tool.name for tool in probe.tools}


async def test_a_saved_server_no_longer_allowed_is_not_started(tmp_path: Path) -> None:
    """The allowlist shrank after the row was saved: the toolpool refuses at connect time."""
    marker = tmp_path / "ran"
    config = McpServerConfig(
        project_id=PROJECT,
        name="stale",
        transport="stdio",
        command="python",
        args=("-c", f"open({str(marker)!r}, 'w').write('ran')"),
    )
    pool = McpClientPool(stdio_allowlist=(ALLOWED,))
    try:
        result = await pool.call_tool(config, {}, "echo", {"text": "x"})
        assert (result.is_error, result.outcome) == (True, "config_error")
        assert "AGENTFLEET_MCP_STDIO_ALLOWLIST" in (result.error or "")
        with pytest.raises(PermissionDenied):
            await pool.list_tools(config, {})
        with pytest.raises(PermissionDenied):
            await pool.test_server(config, {})
    finally:
        await pool.aclose()
    assert not marker.exists()
