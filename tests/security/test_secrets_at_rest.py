"""Project secrets: encrypted at rest, rotated by the CLI, and never returned in any form.

The database holds no plaintext; interpolation still fills ``${NAME}`` from the sealed
rows; a key is rotated then removed and every secret still decrypts; a row copied to
another project does not decrypt; no key means nothing is stored; and an error text from a
failing MCP endpoint carries none of the forms the secret takes in a URL or a header.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import ipaddress
import json
import stat
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import quote, quote_plus, unquote, unquote_plus

import asyncpg
import grpc
import pytest

from agentfleet.cli.manage.secrets import rotate_key, run_secrets
from agentfleet.config import ConfigError
from agentfleet.egress import EgressPolicy
from agentfleet.mcp.servers import McpServerConfig
from agentfleet.postgres.migrate import MigrationError, migrate_down
from agentfleet.secrets.secrets_crypto import SecretsKeyring, local_key_file, new_key_entry
from agentfleet.testing.loopback import LoopbackServer
from agentfleet.testing.services import Stack, toolpool_only
from agentfleet.testing.services import test_settings as settings_of
from agentfleet.v1 import toolpool_pb2
from services.toolpool.mcp import McpClientPool, SecretStore, resolve_server
from tests.integration.mcp_test_servers import HttpServer

PROJECT = "alpha"
NASTY = 'p@ss wörd/"quoted" 100%+\\ \u2603 end'
# HTTP header values are ASCII: the same troubles (space, quotes, %, /, \) without unicode.
NASTY_ASCII = 'h@dr v4l/"quoted" 100%+\\ end'
KEY_A = ("key-a", bytes(range(32)))
KEY_B = ("key-b", bytes(range(32, 64)))


def forms(value: str) -> list[str]:
    """Every form a value can take in an error text."""
    encoded = value.encode()
    return [
        value,
        quote(value),
        quote(value, safe=""),
        quote_plus(value),
        quote(value, safe="").lower(),
        json.dumps(value)[1:-1],
        json.dumps(value, ensure_ascii=False)[1:-1],
        base64.b64encode(encoded).decode(),
    ]


async def _table(pool: asyncpg.Pool) -> list[asyncpg.Record]:
    return await pool.fetch("SELECT * FROM kb.project_secrets ORDER BY project_id, name")


def _holds(rows: list[asyncpg.Record], value: str) -> bool:
    """Whether any column of any row contains ``value`` (as text or as UTF-8 bytes)."""
    needle = value.encode()
    for row in rows:
        for column in row.values():
            raw = column if isinstance(column, bytes) else str(column).encode()
            if needle in raw:
                return True
    return False


# -- the repository, with keys given directly ----------------------------------------------


async def test_the_database_holds_no_plaintext_and_interpolation_still_fills(
    db_pool: asyncpg.Pool,
) -> None:
    store = SecretStore(db_pool, SecretsKeyring([KEY_A]))
    await store.set(PROJECT, "TOKEN", NASTY)
    rows = await _table(db_pool)
    assert [(r["name"], r["value"], r["key_id"]) for r in rows] == [("TOKEN", None, "key-a")]
    for form in forms(NASTY):
        assert not _holds(rows, form), form
    config = McpServerConfig(
        project_id=PROJECT,
        name="api",
        transport="streamable_http",
        url="https://api.example/mcp?key=${TOKEN}",
        headers={"Authorization": "Bearer ${TOKEN}"},
    )
    resolved = resolve_server(config, await store.resolve(PROJECT))
    assert resolved.headers == {"Authorization": f"Bearer {NASTY}"}
    assert resolved.url == f"https://api.example/mcp?key={NASTY}"


async def test_the_decrypted_secret_reaches_a_real_mcp_server(db_pool: asyncpg.Pool) -> None:
    server = HttpServer("streamable_http").start()
    store = SecretStore(db_pool, SecretsKeyring([KEY_A]))
    await store.set(PROJECT, "TOKEN", NASTY)
    await store.set(PROJECT, "HEADER", NASTY_ASCII)
    loopback = EgressPolicy(allowed_networks=(ipaddress.ip_network("127.0.0.1/32"),))
    pool = McpClientPool(egress=loopback)
    try:
        await asyncio.to_thread(server.wait_accepting)
        config = McpServerConfig(
            project_id=PROJECT,
            name="api",
            transport="streamable_http",
            url=f"{server.url}?key=${{TOKEN}}",
            headers={"X-Token": "${HEADER}"},
        )
        secrets = await store.resolve(PROJECT)
        result = await pool.call_tool(config, secrets, "header", {"name": "x-token"})
        assert not result.is_error, result.error
        assert result.result["structured_content"]["result"] == NASTY_ASCII
    finally:
        await pool.aclose()
        server.kill()


async def test_rotation_rewraps_every_secret_and_the_old_key_can_then_go(
    db_pool: asyncpg.Pool,
) -> None:
    old = SecretStore(db_pool, SecretsKeyring([KEY_A]))
    values = {(f"p{i % 2}", f"S{i}"): f"value-{i}-{NASTY}" for i in range(5)}
    for (project, name), value in values.items():
        await old.set(project, name, value)
    # A row from before encryption: readable, and sealed by the rotation.
    await db_pool.execute(
        "INSERT INTO kb.project_secrets (project_id, name, value) VALUES ('p0', 'LEGACY', $1)",
        "legacy-plain-value",
    )
    values[("p0", "LEGACY")] = "legacy-plain-value"
    assert (await old.resolve("p0"))["LEGACY"] == "legacy-plain-value"
    ciphertexts = {r["name"]: r["ciphertext"] for r in await _table(db_pool)}

    both = SecretsKeyring([KEY_B, KEY_A])
    report = await rotate_key(db_pool, both, batch_size=2)
    assert (report.rewrapped, report.sealed, report.current, report.failed) == (5, 1, 0, [])
    rows = await _table(db_pool)
    assert {r["key_id"] for r in rows} == {"key-b"}
    assert not _holds(rows, "legacy-plain-value")
    # Re-wrapped, not re-encrypted: the values' ciphertexts are untouched.
    assert {r["name"]: r["ciphertext"] for r in rows if r["name"] != "LEGACY"} == {
        k: v for k, v in ciphertexts.items() if k != "LEGACY"
    }
    again = await rotate_key(db_pool, both, batch_size=2)
    assert (again.rewrapped, again.sealed, again.current, again.failed) == (0, 0, 6, [])

    # The old key removed: everything still decrypts with the new one alone.
    new_only = SecretStore(db_pool, SecretsKeyring([KEY_B]))
    for project in ("p0", "p1"):
        secrets = await new_only.resolve(project)
        assert secrets == {n: v for (p, n), v in values.items() if p == project}
        assert secrets.undecryptable == {}
    # And the old key alone no longer opens anything.
    stale = await SecretStore(db_pool, SecretsKeyring([KEY_A])).resolve("p1")
    assert stale == {}
    assert set(stale.undecryptable) == {"S1", "S3"}
    assert "key-b" in stale.undecryptable["S1"]


async def test_the_cli_rotates_with_the_configured_keys(
    db_pool: asyncpg.Pool, database_url: str
) -> None:
    entry_old, entry_new = new_key_entry("old"), new_key_entry("new")
    settings = settings_of(DATABASE_URL=database_url, AGENTFLEET_SECRETS_KEYS=entry_old)
    store = SecretStore(db_pool, SecretsKeyring(settings.secrets_keys))
    await store.set(PROJECT, "TOKEN", NASTY)
    rotated = settings_of(
        DATABASE_URL=database_url, AGENTFLEET_SECRETS_KEYS=f"{entry_new},{entry_old}"
    )
    args = argparse.Namespace(secrets_command="rotate-key", batch_size=100)
    assert await run_secrets(rotated, args) == 0
    assert await db_pool.fetchval("SELECT key_id FROM kb.project_secrets") == "new"
    only_new = settings_of(DATABASE_URL=database_url, AGENTFLEET_SECRETS_KEYS=entry_new)
    assert await SecretStore(db_pool, SecretsKeyring(only_new.secrets_keys)).resolve(PROJECT) == {
        "TOKEN": NASTY
    }


async def test_a_row_copied_to_another_project_does_not_decrypt(db_pool: asyncpg.Pool) -> None:
    store = SecretStore(db_pool, SecretsKeyring([KEY_A]))
    await store.set(PROJECT, "TOKEN", NASTY)
    await db_pool.execute(
        """INSERT INTO kb.project_secrets
               (project_id, name, ciphertext, nonce, wrapped_key, key_id)
           SELECT 'beta', name, ciphertext, nonce, wrapped_key, key_id
           FROM kb.project_secrets WHERE project_id = $1""",
        PROJECT,
    )
    moved = await store.resolve("beta")
    assert moved == {}
    assert "does not decrypt for project 'beta'" in moved.undecryptable["TOKEN"]
    config = McpServerConfig(
        project_id="beta", name="api", transport="sse", url="https://x.example/${TOKEN}"
    )
    with pytest.raises(Exception, match=r"cannot be decrypted: \$\{TOKEN\} in mcp_server\.url"):
        resolve_server(config, moved)
    assert await store.resolve(PROJECT) == {"TOKEN": NASTY}


# -- through the toolpool service --------------------------------------------------------


@pytest.fixture
async def toolpool_stack(database_url: str, db_pool: asyncpg.Pool) -> AsyncIterator[Stack]:
    async with toolpool_only(database_url, db_pool) as stack:
        yield stack


async def test_set_secret_without_a_key_stores_nothing(
    database_url: str, db_pool: asyncpg.Pool
) -> None:
    async with toolpool_only(database_url, db_pool, {"AGENTFLEET_SECRETS_KEYS": ""}) as stack:
        toolpool = await stack.toolpool_as(PROJECT)
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await toolpool.SetSecret(
                toolpool_pb2.SetSecretRequest(project_id=PROJECT, name="TOKEN", value=NASTY)
            )
    assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "AGENTFLEET_SECRETS_KEYS" in (caught.value.details() or "")
    assert await _table(db_pool) == []


class FailingEndpoint(LoopbackServer):
    """An HTTP server on 127.0.0.1 that answers 401 and echoes what it was sent."""

    async def answer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        body = b"rejected request:\n" + head
        writer.write(
            b"HTTP/1.1 401 Unauthorized\r\nContent-Type: text/plain\r\n"
            + f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
            + body
        )
        await writer.drain()
        writer.close()


@pytest.mark.parametrize(
    "transport", [toolpool_pb2.MCP_TRANSPORT_SSE, toolpool_pb2.MCP_TRANSPORT_STREAMABLE_HTTP]
)
async def test_test_mcp_server_errors_carry_no_form_of_the_secret(
    toolpool_stack: Stack, transport: int
) -> None:
    secret_value = NASTY
    toolpool = await toolpool_stack.toolpool_as(PROJECT)
    for name, value in [("KEY", secret_value), ("HKEY", NASTY_ASCII)]:
        await toolpool.SetSecret(
            toolpool_pb2.SetSecretRequest(project_id=PROJECT, name=name, value=value)
        )
    async with FailingEndpoint() as endpoint:
        probe = await toolpool.TestMcpServer(
            toolpool_pb2.TestMcpServerRequest(
                project_id=PROJECT,
                mcp_server=toolpool_pb2.McpServer(
                    name="failing",
                    transport=transport,
                    url=f"http://127.0.0.1:{endpoint.port}/mcp/${{KEY}}?key=${{KEY}}",
                    headers={"X-Key": "${HKEY}"},
                ),
            )
        )
    assert not probe.ok
    assert probe.error.startswith("cannot connect to MCP server alpha/failing"), probe.error
    for form in forms(secret_value) + forms(NASTY_ASCII):
        assert form not in probe.error, (form, probe.error)
    # Whatever mix of encoded and plain characters the HTTP client chose, decoding the
    # text does not bring a secret back either.
    for decoded in (unquote(probe.error), unquote_plus(probe.error)):
        assert secret_value not in decoded, probe.error
        assert NASTY_ASCII not in decoded, probe.error
    if transport == toolpool_pb2.MCP_TRANSPORT_SSE:
        # The SDK's SSE error names the URL it was refused at: the secret is masked in it.
        assert "401" in probe.error, probe.error
        assert "***" in probe.error, probe.error


async def test_call_tool_error_results_carry_no_form_of_the_secret() -> None:
    """CallTool's error result is what the model reads and the tool call row stores."""
    loopback = EgressPolicy(allowed_networks=(ipaddress.ip_network("127.0.0.1/32"),))
    pool = McpClientPool(egress=loopback)
    secrets = {"KEY": NASTY}
    try:
        async with FailingEndpoint() as endpoint:
            config = McpServerConfig(
                project_id=PROJECT,
                name="failing",
                transport="sse",
                url=f"http://127.0.0.1:{endpoint.port}/sse?key=${{KEY}}",
            )
            result = await pool.call_tool(config, secrets, "echo", {"text": "x"})
    finally:
        await pool.aclose()
    assert result.is_error
    assert result.outcome == "unavailable"
    text = json.dumps(result.result, ensure_ascii=False) + (result.error or "")
    assert "401" in text
    for form in forms(NASTY):
        assert form not in text, (form, text)
    assert NASTY not in unquote(text)


async def test_migrating_down_refuses_while_sealed_secrets_exist(
    db_pool: asyncpg.Pool, database_url: str
) -> None:
    """Sealed values cannot be turned back into plain ones in SQL: never dropped silently."""
    await SecretStore(db_pool, SecretsKeyring([KEY_A])).set(PROJECT, "TOKEN", NASTY)
    with pytest.raises(MigrationError, match="cannot revert 0012_secrets_encryption"):
        await migrate_down(database_url, target=11)
    assert len(await _table(db_pool)) == 1
    await db_pool.execute("DELETE FROM kb.project_secrets")
    await db_pool.execute(
        "INSERT INTO kb.project_secrets (project_id, name, value) VALUES ('p', 'PLAIN', 'v')"
    )
    await migrate_down(database_url, target=11)
    assert [
        tuple(r) for r in await db_pool.fetch("SELECT name, value FROM kb.project_secrets")
    ] == [("PLAIN", "v")]


def test_the_keys_setting_is_checked_without_echoing_a_key() -> None:
    entry = new_key_entry("k1")
    keys = settings_of(
        AGENTFLEET_SECRETS_KEYS=f"{entry}, k0:{base64.b64encode(bytes(32)).decode()}"
    )
    assert [key_id for key_id, _ in keys.secrets_keys] == ["k1", "k0"]
    short = base64.b64encode(b"sixteen byte key").decode()
    for raw, reason in [
        (f"k1:{short}", "must be 32 bytes"),
        ("k1:not base64!", "not valid base64"),
        (f"{entry},{entry}", "appears twice"),
        (entry.split(":", 1)[1], "id:base64key"),
    ]:
        with pytest.raises(ConfigError, match=reason) as caught:
            settings_of(AGENTFLEET_SECRETS_KEYS=raw)
        assert str(caught.value).startswith("AGENTFLEET_SECRETS_KEYS: ")
        assert short not in str(caught.value)
        assert entry.split(":", 1)[1] not in str(caught.value)


def test_up_keeps_one_private_key_file_in_its_data_folder(tmp_path: Path) -> None:
    entry = local_key_file(tmp_path / "data")
    path = tmp_path / "data" / "secrets.key"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert local_key_file(tmp_path / "data") == entry  # kept, not replaced
    [(key_id, key)] = settings_of(AGENTFLEET_SECRETS_KEYS=entry).secrets_keys
    assert (key_id, len(key)) == ("local-1", 32)
