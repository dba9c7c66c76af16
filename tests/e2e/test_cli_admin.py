"""`agentfleet migrate` and `agentfleet token` as a user runs them."""

import asyncio
import os
import sys
from collections.abc import AsyncIterator

import grpc
import pytest

from agentfleet.auth import hash_token
from agentfleet.rpc.clients import open_channel
from agentfleet.testing.database import DatabaseFactory
from agentfleet.testing.services import Stack
from agentfleet.v1 import history_pb2, history_pb2_grpc


async def agentfleet(database_url: str, *args: str) -> tuple[int, str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTFLEET_")}
    env["DATABASE_URL"] = database_url
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "agentfleet.cli.main",
        *args,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), 60)
    return process.returncode or 0, out.decode(), err.decode()


@pytest.fixture
async def empty_database(database_factory: DatabaseFactory) -> AsyncIterator[str]:
    url = await database_factory.create_database(migrated=False)
    yield url
    await database_factory.drop_database(url)


async def test_migrate_up_status_down(empty_database: str) -> None:
    code, out, err = await agentfleet(empty_database, "migrate", "status")
    assert code == 0, err
    assert "pending" in out

    code, out, err = await agentfleet(empty_database, "migrate", "up")
    assert code == 0, err
    applied = [line for line in out.splitlines() if line.startswith("applied")]
    assert applied
    latest = int(applied[-1].split()[1])
    assert f"schema is at version {latest}" in out

    code, out, err = await agentfleet(empty_database, "migrate", "up")
    assert code == 0, err
    assert not [line for line in out.splitlines() if line.startswith("applied")]

    code, out, err = await agentfleet(empty_database, "migrate", "status")
    assert code == 0, err
    assert "pending" not in out

    code, out, err = await agentfleet(empty_database, "migrate", "down")
    assert code == 0, err
    assert len([line for line in out.splitlines() if line.startswith("reverted")]) == latest
    assert "schema is at version 0" in out


async def test_token_create_prints_a_token_that_works(stack: Stack) -> None:
    url = stack.settings.database_url
    assert url is not None
    code, out, err = await agentfleet(
        url, "token", "create", "--project", "alpha", "--role", "member"
    )
    assert code == 0, err
    token = out.strip()
    assert token.startswith("af_")
    assert "shown only once" in " ".join(err.split())

    async with open_channel(stack.address("history"), token=token) as channel:
        stub = history_pb2_grpc.HistoryServiceStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub.ListRuns(history_pb2.ListRunsRequest(project_id="beta"))
        assert caught.value.code() == grpc.StatusCode.PERMISSION_DENIED
    # Only the hash is stored.
    rows = await stack.pool.fetch("SELECT token_hash, project_id, role FROM kb.api_tokens")
    assert [tuple(r) for r in rows if r["token_hash"] == hash_token(token)] == [
        (hash_token(token), "alpha", "member")
    ]
    assert all(token not in r["token_hash"] for r in rows)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("token", "create", "--role", "admin"), "project_id: an admin token needs a project"),
        (
            ("token", "create", "--project", "p", "--role", "service"),
            "project_id: service tokens belong to no project",
        ),
    ],
)
async def test_bad_token_requests_fail_with_one_line(
    database_url: str, args: tuple[str, ...], message: str
) -> None:
    code, _, err = await agentfleet(database_url, *args)
    assert code == 2
    assert err.strip() == f"agentfleet: INVALID_ARGUMENT: {message}"


async def test_token_revoke_names_a_bad_id_and_a_token_already_revoked(database_url: str) -> None:
    """`token revoke not-a-uuid` was INTERNAL (PostgreSQL's DataError); revoking twice
    printed a bare line without the `agentfleet: CODE:` prefix."""
    code, _, err = await agentfleet(database_url, "token", "revoke", "not-a-uuid")
    assert (code, err.strip()) == (
        2,
        "agentfleet: INVALID_ARGUMENT: token_id: is not a UUID: 'not-a-uuid'",
    )
    code, out, err = await agentfleet(database_url, "token", "create", "--project", "p")
    assert code == 0, err
    token_id = err.split("token ", 1)[1].split()[0]
    code, out, err = await agentfleet(database_url, "token", "revoke", token_id)
    assert (code, out.strip(), err) == (0, f"revoked {token_id}", "")
    code, out, err = await agentfleet(database_url, "token", "revoke", token_id)
    assert (code, out) == (1, "")
    assert err.strip() == (
        f"agentfleet: NOT_FOUND: no active token {token_id} (unknown or already revoked)"
    )


async def test_a_malformed_database_url_is_one_line() -> None:
    code, _, err = await agentfleet("postgresql://x:99999/db", "migrate", "status")
    assert code == 2
    assert err.strip().startswith(
        "agentfleet: INVALID_ARGUMENT: configuration error: DATABASE_URL: "
    )
