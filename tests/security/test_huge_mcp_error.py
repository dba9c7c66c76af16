"""A hostile MCP server cannot stall the shared toolpool with a huge error (docs/SECURITY.md §7).

An error result (``isError``) is redacted before the model sees it, since a server may quote
the project secrets it was given. The whole result used to be redacted, and only then cut
to the 64 KiB the model is shown: a few MB of escapes and percent-encoding took the
redactor seconds on the toolpool's event loop, every project's tool calls waiting
meanwhile, and the error message (all of it) went back whole. Now only the start the result
can show is read, plus the longest form a secret can take, so a secret across the cut is
still masked whole.

The stack is in-process: the test's event loop is the toolpool's, so the longest gap of a
50 ms ticker during the CallTool is how long every other project stood still. The server,
``big_error_mcp_server.py``, is a real stdio MCP server given the secret in its environment.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import asyncpg
from google.protobuf import json_format

from agentfleet.mcp.stdio import format_allowlist
from agentfleet.testing.checks.loop_stall import longest_stall_during
from agentfleet.testing.services import toolpool_only
from agentfleet.testing.stdio_allowlist import TEST_STDIO_COMMANDS
from agentfleet.v1 import toolpool_pb2, toolpool_pb2_grpc
from services.toolpool.results import MAX_RESULT_BYTES
from tests.integration.test_toolpool_service import call_request, make_run
from tests.security.big_error_mcp_server import secret_forms

SERVER = (sys.executable, str(Path(__file__).with_name("big_error_mcp_server.py")))
PROJECT = "hostile-errors"
SECRET = "Kq7 Wälder-Zx9Rt"
ERROR_CHARS = 4_000_000  # unfixed: 6-7 s of redaction on this machine
MAX_STALL_S = 1.0
MAX_MESSAGE_CHARS = 8192  # "a few KiB": what the model needs of an error message


async def test_a_huge_error_result_is_cut_before_redaction_and_leaks_nothing(
    database_url: str, db_pool: asyncpg.Pool
) -> None:
    environ = {"AGENTFLEET_MCP_STDIO_ALLOWLIST": format_allowlist([*TEST_STDIO_COMMANDS, SERVER])}
    async with toolpool_only(database_url, db_pool, environ) as stack:
        admin = await stack.toolpool_as(PROJECT)
        await admin.SetSecret(
            toolpool_pb2.SetSecretRequest(project_id=PROJECT, name="TOKEN", value=SECRET)
        )
        await admin.UpsertMcpServer(
            toolpool_pb2.UpsertMcpServerRequest(
                project_id=PROJECT,
                mcp_server=toolpool_pb2.McpServer(
                    name="hostile",
                    transport=toolpool_pb2.MCP_TRANSPORT_STDIO,
                    command=SERVER[0],
                    args=SERVER[1:],
                    env={"API_TOKEN": "${TOKEN}"},
                ),
            )
        )
        executor = toolpool_pb2_grpc.ToolPoolServiceStub(
            stack.channel("toolpool", token=stack.service_tokens["executor"])
        )
        run_id = await make_run(db_pool, PROJECT, ["hostile__fail_big"])

        def fail_big(chars: int) -> toolpool_pb2.CallToolRequest:
            return call_request(PROJECT, run_id, "hostile__fail_big", chars=chars)

        # Connected and listed before the clock starts; a small error is masked as before.
        small = await executor.CallTool(fail_big(100), timeout=60)
        assert small.is_error
        assert "***" in small.error_message, small.error_message
        _assert_no_secret(small.error_message)

        reply, stall = await longest_stall_during(
            executor.CallTool(fail_big(ERROR_CHARS), timeout=120)
        )

    assert stall < MAX_STALL_S, f"the toolpool's event loop stood still for {stall:.1f} s"
    assert reply.is_error
    # Cut, and reported so with the size the server sent.
    assert reply.truncated
    assert reply.result_size_bytes > ERROR_CHARS
    result = json_format.MessageToDict(reply.result)
    assert len(json.dumps(result, ensure_ascii=False).encode()) <= MAX_RESULT_BYTES
    assert "***" in result["preview"]
    assert 0 < len(reply.error_message) <= MAX_MESSAGE_CHARS
    assert reply.error_message.endswith("characters are read]")
    _assert_no_secret(result["preview"])
    _assert_no_secret(reply.error_message)


def _assert_no_secret(text: str) -> None:
    """No form of the secret, nor any 4 characters in a row of one (a form cut in two)."""
    for form in secret_forms(SECRET):
        pieces = {form[i : i + 4] for i in range(len(form) - 3)}
        shown = sorted(piece for piece in pieces if piece in text)
        assert not shown, f"{form!r}: {shown} in ...{text[-200:]!r}"
