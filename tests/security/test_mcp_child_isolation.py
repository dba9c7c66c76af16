"""An MCP child process finds nothing of the platform's secrets.

A real toolpool process, its environment carrying a planted Gemini key, the database URL
and its service token, starts a hostile stdio MCP server (``mcp_spy_server.py``) that tries
every way to read them (see its docstring). None is found, and the spy did run: it read its
own ``/proc/self/status``. The suite runs as root in CI: there the launcher's dropping of
every capability is what stops the spy; a second test shows the non-dumpable flag alone
stopping a child of the same uid and the same (empty) capabilities.
"""

from __future__ import annotations

import asyncio
import re
import secrets
import sys
import textwrap
from pathlib import Path
from typing import Any

import asyncpg
from google.protobuf import json_format, struct_pb2

from agentfleet.auth import TokenStore
from agentfleet.mcp.jail import launcher_argv
from agentfleet.mcp.stdio import format_allowlist
from agentfleet.rpc.clients import open_channel
from agentfleet.testing.services import create_service_tokens, start_process_stack
from agentfleet.v1 import toolpool_pb2, toolpool_pb2_grpc
from tests.integration.test_toolpool_service import make_run

SPY = str(Path(__file__).with_name("mcp_spy_server.py"))
PROJECT = "spied"
# Variables whose values are secrets of the platform (keys, tokens, passwords, the DB URL).
SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|DATABASE_URL")


async def test_a_stdio_mcp_server_finds_no_platform_secret(
    database_url: str, db_pool: asyncpg.Pool, tmp_path: Path
) -> None:
    gemini_key = f"AIza-planted-{secrets.token_hex(16)}"
    service_tokens = await create_service_tokens(db_pool)
    environ = {
        "GEMINI_API_KEY": gemini_key,
        "AGENTFLEET_MCP_STDIO_ALLOWLIST": format_allowlist([(sys.executable, SPY)]),
    }
    stack = await start_process_stack(
        database_url=database_url,
        log_dir=tmp_path,
        environ=environ,
        names=("toolpool",),
        service_tokens=service_tokens,
    )
    toolpool_pid = stack.processes["toolpool"].pid
    try:
        environ_of_toolpool = _environ_given(stack, database_url, environ)
        environ_of_toolpool["AGENTFLEET_SERVICE_TOKEN"] = service_tokens["toolpool"]
        needles = sorted(
            {v for k, v in environ_of_toolpool.items() if SECRET_NAME.search(k) and len(v) >= 8}
        )
        assert {gemini_key, database_url, service_tokens["toolpool"]} <= set(needles)
        report = await _spy_report(
            stack.addresses["toolpool"], db_pool, needles, service_tokens["executor"]
        )
    finally:
        await stack.stop(grace_s=5.0)

    assert report["ppid"] == toolpool_pid  # the toolpool itself started the spy
    status = "\n".join(report["status"])
    assert "CapEff:\t0000000000000000" in status, status  # it ran, and holds no capability
    assert "CapBnd:\t0000000000000000" in status, status
    assert "NoNewPrivs:\t1" in status, status
    assert report["read"].get("own_status") == 1
    assert report["read"].get("own_environ") == 2
    assert report["found"] == [], report
    assert report["inherited_fds"] == [], report  # only stdin, stdout and stderr
    platform = ("AGENTFLEET_", "GEMINI", "GOOGLE", "DATABASE_URL")
    assert [n for n in report["env_names"] if n.startswith(platform)] == []
    # The parent's secrets were asked for and refused, not just absent.
    for source in ("parent_environ", "parent_mem"):
        assert report["refused"].get(source) == 1, report
    assert report["read"].get("any_environ", 0) + report["refused"].get("any_environ", 0) > 1


def _environ_given(stack: Any, database_url: str, environ: dict[str, str]) -> dict[str, str]:
    """The environment the toolpool process was started with, as its /proc shows it."""
    raw = Path(f"/proc/{stack.processes['toolpool'].pid}/environ")
    try:
        pairs = raw.read_bytes().split(b"\0")
    except PermissionError:
        # Not root: the toolpool is non-dumpable even to us; use what we gave it.
        return {"DATABASE_URL": database_url, **environ}
    given = dict(p.decode(errors="replace").split("=", 1) for p in pairs if b"=" in p)
    assert given["DATABASE_URL"] == database_url
    return given


async def _spy_report(
    address: str, db_pool: asyncpg.Pool, needles: list[str], executor_token: str
) -> dict[str, Any]:
    """The tenant admin configures the spy; the executor calls it (CallTool is its RPC)."""
    admin = await TokenStore(db_pool).create(project_id=PROJECT, role="admin", name="spy-test")
    run_id = await make_run(db_pool, PROJECT, ["spy__look"])
    async with (
        open_channel(address, token=admin.token) as channel,
        open_channel(address, token=executor_token) as executor_channel,
    ):
        toolpool = toolpool_pb2_grpc.ToolPoolServiceStub(channel)
        await toolpool.UpsertMcpServer(
            toolpool_pb2.UpsertMcpServerRequest(
                project_id=PROJECT,
                mcp_server=toolpool_pb2.McpServer(
                    name="spy",
                    transport=toolpool_pb2.MCP_TRANSPORT_STDIO,
                    command=sys.executable,
                    args=[SPY],
                ),
            )
        )
        arguments = json_format.ParseDict({"needles": needles}, struct_pb2.Struct())
        reply = await toolpool_pb2_grpc.ToolPoolServiceStub(executor_channel).CallTool(
            toolpool_pb2.CallToolRequest(
                project_id=PROJECT,
                run_id=run_id,
                tool_call_id="spy-1",
                tool_name="spy__look",
                arguments=arguments,
            ),
            timeout=60,
        )
    assert not reply.is_error, reply.error_message
    result = json_format.MessageToDict(reply.result)
    return result["structured_content"]


# -- the non-dumpable flag on its own ----------------------------------------------------------

# A "platform" process: holds a secret in its environment, optionally turns non-dumpable,
# then starts a reader through the MCP launcher and prints what the reader saw.
_PLATFORM = textwrap.dedent(
    """
    import subprocess, sys
    from agentfleet.process.hardening import make_non_dumpable
    from agentfleet.mcp.jail import launcher_argv
    if sys.argv[1] == "hidden":
        make_non_dumpable()
    reader = (
        "import os\\n"
        "try:\\n"
        "    data = open(f'/proc/{os.getppid()}/environ', 'rb').read()\\n"
        "    print('read', b'PLATFORM_SECRET=' in data)\\n"
        "except OSError as exc:\\n"
        "    print('refused', type(exc).__name__)\\n"
    )
    done = subprocess.run(
        launcher_argv(sys.executable, ["-c", reader]), env={}, capture_output=True, text=True
    )
    print(done.stdout.strip() or done.stderr.strip())
    """
)


async def _platform_sees(mode: str) -> str:
    # The platform itself runs through the launcher too, so it has the same uid and the
    # same (empty) capabilities as its reader: only the dumpable flag tells them apart.
    process = await asyncio.create_subprocess_exec(
        *launcher_argv(sys.executable, ["-c", _PLATFORM, mode]),
        env={"PLATFORM_SECRET": secrets.token_hex(16), "PATH": "/usr/bin:/bin"},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 0, err.decode()
    return out.decode().strip()


async def test_a_non_dumpable_parent_hides_its_environment_from_a_same_uid_child() -> None:
    # The control shows the reader would see the secret of a dumpable parent.
    assert await _platform_sees("visible") == "read True"
    assert await _platform_sees("hidden") == "refused PermissionError"
