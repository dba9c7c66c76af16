"""A tenant admin cannot stall the shared toolpool with its own secrets (docs/SECURITY.md §7).

Every MCP connection, CallTool and TestMcpServer builds a redactor from the project's
secret values on the toolpool's event loop. It used to compile one regex with ~8
alternatives per character of every value: 4 values of 16 KiB (the most SetSecret takes)
stood the loop still for 4-4.6 s per TestMcpServer, and a changed value paid again. The
work is now linear in the values, and their number is capped per project
(AGENTFLEET_MAX_SECRETS_PER_PROJECT, RESOURCE_EXHAUSTED past it).

The stack is in-process: the test's event loop is the toolpool's, so the longest gap of a
50 ms ticker during one TestMcpServer call is how long every other project stood still.
The server tested is a loopback URL on a closed port (no traffic leaves the host).
"""

from __future__ import annotations

import asyncio
import secrets

import asyncpg
import grpc
import pytest

from agentfleet.testing.checks.loop_stall import longest_stall_during
from agentfleet.testing.services import Stack, toolpool_only
from agentfleet.testing.services import test_settings as settings_of
from agentfleet.v1 import toolpool_pb2, toolpool_pb2_grpc

P = "tenant-a"


async def test_big_secrets_do_not_stall_the_toolpool_loop(stack: Stack) -> None:
    token = await stack.create_token(P, "admin")
    toolpool = toolpool_pb2_grpc.ToolPoolServiceStub(stack.channel("toolpool", token=token))
    for i in range(4):
        await toolpool.SetSecret(
            toolpool_pb2.SetSecretRequest(
                project_id=P, name=f"BIG_{i}", value=secrets.token_urlsafe(12288)[:16384]
            )
        )

    answer, longest_gap = await longest_stall_during(
        toolpool.TestMcpServer(
            toolpool_pb2.TestMcpServerRequest(
                project_id=P,
                mcp_server=toolpool_pb2.McpServer(
                    name="probe",
                    transport=toolpool_pb2.MCP_TRANSPORT_STREAMABLE_HTTP,
                    url="http://127.0.0.1:9/mcp",  # discard port: nothing listens
                ),
            ),
            timeout=120,
        )
    )
    assert not answer.ok
    assert longest_gap < 1.0, f"the toolpool's event loop stood still for {longest_gap:.1f} s"


def test_the_cap_on_secrets_has_a_default_and_a_setting() -> None:
    assert settings_of().max_secrets_per_project == 100
    assert settings_of(AGENTFLEET_MAX_SECRETS_PER_PROJECT="7").max_secrets_per_project == 7


async def test_set_secret_refuses_a_new_secret_past_the_projects_cap(
    database_url: str, db_pool: asyncpg.Pool
) -> None:
    environ = {"AGENTFLEET_MAX_SECRETS_PER_PROJECT": "3"}
    async with toolpool_only(database_url, db_pool, environ) as stack:
        toolpool = await stack.toolpool_as(P)
        other = await stack.toolpool_as("tenant-b")

        def set_secret(project: str, name: str) -> toolpool_pb2.SetSecretRequest:
            return toolpool_pb2.SetSecretRequest(project_id=project, name=name, value="v-1234")

        # Concurrent SetSecrets of new names: exactly the cap's worth are stored.
        answers = await asyncio.gather(
            *(toolpool.SetSecret(set_secret(P, f"S{i}")) for i in range(8)),
            return_exceptions=True,
        )
        refused = [a for a in answers if isinstance(a, grpc.aio.AioRpcError)]
        assert len(answers) - len(refused) == 3
        assert {e.code() for e in refused} == {grpc.StatusCode.RESOURCE_EXHAUSTED}
        details = refused[0].details() or ""
        assert "AGENTFLEET_MAX_SECRETS_PER_PROJECT (3)" in details, details
        held = await toolpool.ListSecrets(toolpool_pb2.ListSecretsRequest(project_id=P))
        assert len(held.secrets) == 3

        # Replacing a held secret is not a new one; another project has its own count.
        await toolpool.SetSecret(set_secret(P, held.secrets[0].name))
        await other.SetSecret(set_secret("tenant-b", "S9"))
        # Deleting one makes room again.
        await toolpool.DeleteSecret(
            toolpool_pb2.DeleteSecretRequest(project_id=P, name=held.secrets[1].name)
        )
        assert (await toolpool.SetSecret(set_secret(P, "NEW"))).created
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await toolpool.SetSecret(set_secret(P, "ONE_MORE"))
        assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
