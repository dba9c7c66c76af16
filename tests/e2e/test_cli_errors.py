"""Every way a newcomer's `agentfleet` command fails ends in one line, never a traceback:
``agentfleet: <CODE>: <message>`` on stderr and a non-zero exit status."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import pytest

from agentfleet.postgres.embedded_pg import EmbeddedPostgres
from agentfleet.testing.database import DatabaseFactory


async def agentfleet(*argv: str, cwd: Path, **settings: str) -> tuple[int, str, str]:
    """The real command in a fresh process, with only ``settings`` as AGENTFLEET_*/DATABASE_URL."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("AGENTFLEET_", "GEMINI")) and k != "DATABASE_URL"
    }
    env.update(settings)
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "agentfleet.cli.main",
        *argv,
        cwd=cwd,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), 120)
    return process.returncode or 0, out.decode(), err.decode()


def assert_one_line(code: int, err: str, status: str) -> str:
    """The error line, after checking the shape every failure must have."""
    assert code != 0
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"agentfleet: {status}: "), err
    return lines[0]


@pytest.fixture
async def empty_database(database_factory: DatabaseFactory) -> AsyncIterator[str]:
    url = await database_factory.create_database(migrated=False)
    yield url
    await database_factory.drop_database(url)


async def test_token_create_from_another_folder_says_which_database_and_what_to_do(
    tmp_path: Path,
) -> None:
    # No AGENTFLEET_DATA_DIR: the command starts a fresh embedded database under ./.data.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    try:
        code, out, err = await agentfleet("token", "create", "--project", "p", cwd=elsewhere)
        line = assert_one_line(code, err, "FAILED_PRECONDITION")
        assert f"embedded PostgreSQL in {elsewhere / '.data' / 'postgres'}" in line
        assert "agentfleet migrate" in line
        assert "AGENTFLEET_DATA_DIR" in line
        assert out == ""
    finally:
        # As root the cluster may live in a folder made for it, outside tmp_path.
        await asyncio.to_thread(EmbeddedPostgres(elsewhere / ".data" / "postgres").remove)


async def test_token_create_on_an_unmigrated_database_names_it_and_creates_nothing(
    empty_database: str, tmp_path: Path
) -> None:
    code, _, err = await agentfleet(
        "token", "create", "--project", "p", cwd=tmp_path, DATABASE_URL=empty_database
    )
    line = assert_one_line(code, err, "FAILED_PRECONDITION")
    assert "DATABASE_URL postgresql://" in line
    assert "schema version 0" in line
    conn = await asyncpg.connect(empty_database)
    try:
        # Checking the schema wrote nothing (not even the migrations' bookkeeping table).
        assert await conn.fetchval("SELECT to_regnamespace('kb')") is None
    finally:
        await conn.close()


@pytest.mark.parametrize(
    ("argv", "settings", "status", "exit_code"),
    [
        ((), {}, "INVALID_ARGUMENT", 2),
        (("frobnicate",), {}, "INVALID_ARGUMENT", 2),
        (("token", "create", "--role", "emperor"), {}, "INVALID_ARGUMENT", 2),
        (("run", "only-an-agent"), {}, "INVALID_ARGUMENT", 2),
        (("migrate",), {"AGENTFLEET_DB_POOL_MAX": "many"}, "INVALID_ARGUMENT", 2),
        (("runs",), {"AGENTFLEET_DB_POOL_MAX": "many"}, "INVALID_ARGUMENT", 2),
        (
            ("migrate", "status"),
            {"DATABASE_URL": "postgresql://x@127.0.0.1:1/db"},
            "UNAVAILABLE",
            1,
        ),
        (("install", "missing.yaml", "--project", "p"), {}, "INVALID_ARGUMENT", 2),
        (("install", "nope.json", "--project", "p"), {}, "INVALID_ARGUMENT", 2),
        (("dag", "submit", "nope.yaml", "--project", "p"), {}, "INVALID_ARGUMENT", 2),
        (("runs",), {}, "INVALID_ARGUMENT", 2),
        (("runs", "--project", "p", "--history-addr", "127.0.0.1:1"), {}, "UNAVAILABLE", 1),
    ],
    ids=[
        "no-command",
        "unknown-command",
        "bad-choice",
        "missing-argument",
        "bad-setting",
        "bad-setting-remote",
        "database-unreachable",
        "missing-manifest",
        "missing-json-manifest",
        "missing-dag-file",
        "no-project",
        "service-unreachable",
    ],
)
async def test_each_failure_is_one_line(
    argv: tuple[str, ...], settings: dict[str, str], status: str, exit_code: int, tmp_path: Path
) -> None:
    """The README's convention: INVALID_ARGUMENT (a bad command line, setting or file)
    exits 2, every other failure 1."""
    code, _, err = await agentfleet(*argv, cwd=tmp_path, **settings)
    assert_one_line(code, err, status)
    assert code == exit_code, err
