"""mTLS (issue #18): a server that requires client certificates refuses a caller without one
at the handshake (UNAVAILABLE), whatever bearer token it carries: a member token, a tenant
admin token, or a stolen service credential. The call never reaches the service, so the
database is unchanged."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import asyncpg
import grpc
import pytest

from agentfleet.rpc.clients import open_channel
from agentfleet.rpc.tls import ClientTls
from agentfleet.testing.certificates import CertificateAuthority
from agentfleet.testing.services import Stack, start_stack
from agentfleet.v1 import toolpool_pb2, toolpool_pb2_grpc

P = "alpha"


@dataclass(frozen=True, kw_only=True, slots=True)
class MtlsToolpool:
    stack: Stack
    ca_file: Path
    client_cert: tuple[Path, Path]
    """A certificate of the client CA (an operator's), and its key."""


@pytest.fixture
async def mtls_toolpool(
    database_url: str, db_pool: asyncpg.Pool, tmp_path: Path
) -> AsyncIterator[MtlsToolpool]:
    ca = CertificateAuthority("fleet")
    ca_file = ca.write(tmp_path)
    cert_file, key_file = ca.issue("toolpool").write(tmp_path, "toolpool")
    stack = await start_stack(
        database_url=database_url,
        pool=db_pool,
        names=("toolpool",),
        environ={
            "AGENTFLEET_TLS_CERT_FILE": str(cert_file),
            "AGENTFLEET_TLS_KEY_FILE": str(key_file),
            "AGENTFLEET_TLS_CLIENT_CA_FILE": str(ca_file),
        },
    )
    try:
        yield MtlsToolpool(
            stack=stack,
            ca_file=ca_file,
            client_cert=ca.issue("operator").write(tmp_path, "operator"),
        )
    finally:
        await stack.close()


async def set_secret(address: str, token: str, tls: ClientTls) -> None:
    async with open_channel(address, token=token, tls=tls) as channel:
        await toolpool_pb2_grpc.ToolPoolServiceStub(channel).SetSecret(
            toolpool_pb2.SetSecretRequest(project_id=P, name="stolen", value="x"), timeout=5
        )


async def secrets_of(pool: asyncpg.Pool) -> list[str]:
    rows = await pool.fetch("SELECT name FROM kb.project_secrets WHERE project_id = $1", P)
    return sorted(r["name"] for r in rows)


@pytest.mark.parametrize("who", ["member", "admin", "stolen executor credential"])
async def test_mtls_refuses_a_caller_without_a_client_certificate_at_the_handshake(
    mtls_toolpool: MtlsToolpool, db_pool: asyncpg.Pool, who: str
) -> None:
    stack = mtls_toolpool.stack
    if who.startswith("stolen"):
        token = stack.service_tokens["executor"]
    else:
        token = await stack.create_token(P, who)
    before = await secrets_of(db_pool)

    # It trusts the server (right CA) but has no certificate of its own.
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await set_secret(stack.address("toolpool"), token, ClientTls(ca_file=mtls_toolpool.ca_file))

    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE, refused.value.details()
    assert await secrets_of(db_pool) == before == []


async def test_the_same_call_with_a_client_certificate_goes_through(
    mtls_toolpool: MtlsToolpool, db_pool: asyncpg.Pool
) -> None:
    """The control: the refusal above is the missing certificate, not the request."""
    cert_file, key_file = mtls_toolpool.client_cert
    admin = await mtls_toolpool.stack.create_token(P, "admin")
    tls = ClientTls(ca_file=mtls_toolpool.ca_file, cert_file=cert_file, key_file=key_file)
    await set_secret(mtls_toolpool.stack.address("toolpool"), admin, tls)
    assert await secrets_of(db_pool) == ["stolen"]
