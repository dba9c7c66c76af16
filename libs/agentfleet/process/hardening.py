"""Process hardening through Linux ``prctl(2)`` and ``capset(2)``, by ctypes on the C library.

- :func:`make_non_dumpable`: every service process and ``agentfleet up`` call it at start,
  so a process of the same user (an MCP server the toolpool started, say) can no longer
  read their ``/proc/<pid>/environ``, ``mem`` or ``fd``: the kernel then asks for
  ``CAP_SYS_PTRACE``. ``/proc/<pid>/cmdline`` stays readable by everyone, so no secret may
  ever travel on a command line.
- :func:`die_with_parent`: an executor host's workers (:mod:`agentfleet.process.host`) stop
  when the host is gone.
- :func:`set_no_new_privs` and :func:`drop_all_capabilities`: the stdio MCP launcher
  (:mod:`agentfleet.mcp.jail`) calls them before it runs the server, so even a child of a
  root toolpool has no capability (no ``CAP_SYS_PTRACE`` to read the non-dumpable platform
  processes, no ``CAP_DAC_OVERRIDE`` to bypass file permissions) and cannot regain one by
  executing a set-uid or file-capability program.

On other systems the first is a no-op with a debug log; the launcher's steps raise
:class:`HardeningError`, since running an MCP server without them would be unsafe.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys
from pathlib import Path

PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PR_CAPBSET_READ = 23
PR_CAPBSET_DROP = 24
PR_SET_NO_NEW_PRIVS = 38
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
_LINUX_CAPABILITY_VERSION_3 = 0x20080522
_CAP_LAST_CAP_FILE = Path("/proc/sys/kernel/cap_last_cap")


class HardeningError(OSError):
    """A hardening step failed; the message names the step and the system's reason."""


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
    ]


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


def _prctl(option: int, arg: int = 0, what: str = "prctl") -> int:
    libc = _libc()
    # All five arguments: some options refuse to run unless the unused ones are zero.
    libc.prctl.argtypes = [ctypes.c_int, *[ctypes.c_ulong] * 4]
    libc.prctl.restype = ctypes.c_int
    result = libc.prctl(option, arg, 0, 0, 0)
    if result < 0:
        errno = ctypes.get_errno()
        raise HardeningError(errno, f"{what}: {os.strerror(errno)}")
    return int(result)


def make_non_dumpable() -> bool:
    """``prctl(PR_SET_DUMPABLE, 0)``: same-user processes lose access to this one's
    ``/proc/<pid>/environ``, ``mem`` and ``fd`` (and no core dump holds its secrets).

    Returns whether it was applied: False (and a debug log) on a system without ``prctl``.
    """
    if not sys.platform.startswith("linux"):
        import structlog

        structlog.get_logger(__name__).debug("non_dumpable_unsupported", platform=sys.platform)
        return False
    _prctl(PR_SET_DUMPABLE, 0, "prctl(PR_SET_DUMPABLE, 0)")
    return True


def die_with_parent() -> None:
    """``prctl(PR_SET_PDEATHSIG, SIGTERM)``, run in a child between fork and exec (it survives
    the exec): an executor host's worker is told to stop when the host dies, even by SIGKILL,
    instead of serving on as an orphan that holds the port."""
    import signal

    if sys.platform.startswith("linux"):
        _prctl(PR_SET_PDEATHSIG, signal.SIGTERM, "prctl(PR_SET_PDEATHSIG, SIGTERM)")


def set_no_new_privs() -> None:
    """``prctl(PR_SET_NO_NEW_PRIVS, 1)``: no program this process executes gains privileges
    (set-uid bits and file capabilities are ignored); inherited by every descendant."""
    _require_linux()
    _prctl(PR_SET_NO_NEW_PRIVS, 1, "prctl(PR_SET_NO_NEW_PRIVS, 1)")


def drop_all_capabilities() -> None:
    """Empties the bounding, ambient, inheritable, permitted and effective capability sets.

    The bounding set matters for root: ``execve`` gives a uid-0 process every capability of
    its bounding set, so that set is emptied first (``PR_CAPBSET_DROP`` for each capability
    up to ``/proc/sys/kernel/cap_last_cap``, which needs ``CAP_SETPCAP``, still held then);
    then the ambient set, then ``capset(2)`` with zeroed data. A process without
    ``CAP_SETPCAP`` cannot shrink its bounding set; that is only an error for root, whose
    next ``execve`` would otherwise get capabilities back.
    """
    _require_linux()
    last_cap = int(_CAP_LAST_CAP_FILE.read_text().strip())
    for cap in range(last_cap + 1):
        if not _prctl(PR_CAPBSET_READ, cap, f"prctl(PR_CAPBSET_READ, {cap})"):
            continue  # already out (dropping needs CAP_SETPCAP, which may be gone too)
        try:
            _prctl(PR_CAPBSET_DROP, cap, f"prctl(PR_CAPBSET_DROP, {cap})")
        except HardeningError:
            if os.geteuid() == 0 or os.getuid() == 0:
                raise
            break  # an unprivileged process: its bounding set gives nothing at execve
    _prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, "prctl(PR_CAP_AMBIENT_CLEAR_ALL)")
    libc = _libc()
    header = _CapHeader(version=_LINUX_CAPABILITY_VERSION_3, pid=0)
    data = (_CapData * 2)()  # version 3 carries two 32-bit words per set, all zero here
    if libc.capset(ctypes.byref(header), data) < 0:
        errno = ctypes.get_errno()
        raise HardeningError(errno, f"capset (all sets empty): {os.strerror(errno)}")


def _require_linux() -> None:
    if not sys.platform.startswith("linux"):
        raise HardeningError(0, f"process hardening needs Linux (this is {sys.platform})")
