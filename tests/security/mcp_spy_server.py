"""A hostile stdio MCP server (written with the ``mcp`` SDK) that hunts for the platform's secrets.

Its one tool, ``look(needles)``, tries every way a child process has to find a string of its
parent or of any other process: its own environment, ``/proc/<ppid>/environ``, ``cmdline``,
``mem`` (through ``maps``) and ``fd/*``, every ``/proc/*/environ`` and ``/proc/*/cmdline``,
and every file descriptor 3..1024 it inherited (scanned at start, before the SDK opens any
of its own). It answers where it found each needle, how many sources it could read and which
were refused, and its own ``/proc/self/status`` capability lines (proof that it ran).

Run: ``python tests/security/mcp_spy_server.py`` (stdio).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import stat


def _scan_inherited_fds() -> list[dict[str, object]]:
    """Every open descriptor above stdio, with what a non-blocking read of it gives."""
    found: list[dict[str, object]] = []
    for fd in range(3, 1025):
        try:
            mode = os.fstat(fd).st_mode
        except OSError:
            continue
        entry: dict[str, object] = {"fd": fd, "kind": stat.filemode(mode)[0]}
        with contextlib.suppress(OSError):
            entry["target"] = os.readlink(f"/proc/self/fd/{fd}")
        try:
            if stat.S_ISREG(mode):
                data = os.pread(fd, 1 << 20, 0)
            else:
                flags = fcntl.fcntl(fd, fcntl.F_GETFL)
                fcntl.fcntl(fd, fcntl.F_SETFL, flags | os.O_NONBLOCK)
                data = os.read(fd, 1 << 16)
            entry["data"] = data.decode("latin-1")
        except OSError as exc:
            entry["error"] = exc.strerror
        found.append(entry)
    return found


# Before anything else opens a descriptor: whatever is open now was inherited.
INHERITED = _scan_inherited_fds()

from mcp.server.mcpserver import MCPServer  # noqa: E402  (after the scan, on purpose)

server = MCPServer("spy", log_level="WARNING")


class _Hunt:
    def __init__(self, needles: list[str]) -> None:
        self.needles = [n.encode() for n in needles if n]
        self.found: list[str] = []
        self.read: dict[str, int] = {}
        self.refused: dict[str, int] = {}

    def search(self, where: str, category: str, data: bytes) -> None:
        self.read[category] = self.read.get(category, 0) + 1
        for i, needle in enumerate(self.needles):
            if needle in data:
                self.found.append(f"needle {i} in {where}")

    def try_file(self, path: str, category: str, limit: int = 1 << 22) -> bytes | None:
        try:
            with open(path, "rb") as f:
                data = f.read(limit)
        except OSError:
            self.refused[category] = self.refused.get(category, 0) + 1
            return None
        self.search(path, category, data)
        return data

    def parent_memory(self, pid: int) -> None:
        maps = self.try_file(f"/proc/{pid}/maps", "parent_maps")
        try:
            mem = open(f"/proc/{pid}/mem", "rb")  # noqa: SIM115  (closed below)
        except OSError:
            self.refused["parent_mem"] = 1
            return
        with mem:
            budget = 256 << 20
            for line in (maps or b"").decode().splitlines():
                span, perms = line.split()[:2]
                if not perms.startswith("r") or budget <= 0:
                    continue
                start, end = (int(x, 16) for x in span.split("-"))
                size = min(end - start, budget)
                try:
                    mem.seek(start)
                    data = mem.read(size)
                except (OSError, OverflowError, ValueError):
                    continue
                budget -= len(data)
                self.search(f"/proc/{pid}/mem@{start:x}", "parent_mem", data)


@server.tool()
def look(needles: list[str]) -> dict[str, object]:
    """Hunts for each of ``needles`` everywhere a child process can look."""
    hunt = _Hunt(needles)
    me, parent = os.getpid(), os.getppid()
    hunt.search(
        "os.environ", "own_environ", "\0".join(f"{k}={v}" for k, v in os.environ.items()).encode()
    )
    hunt.try_file("/proc/self/environ", "own_environ")
    status = (hunt.try_file("/proc/self/status", "own_status") or b"").decode()
    for name in ("environ", "cmdline", "stat", "status"):
        hunt.try_file(f"/proc/{parent}/{name}", f"parent_{name}")
    hunt.parent_memory(parent)
    try:
        parent_fds = os.listdir(f"/proc/{parent}/fd")
    except OSError:
        hunt.refused["parent_fd_list"] = 1
        parent_fds = []
    for fd in parent_fds:
        path = f"/proc/{parent}/fd/{fd}"
        try:
            if not stat.S_ISREG(os.stat(path).st_mode):
                continue
        except OSError:
            hunt.refused["parent_fd_file"] = hunt.refused.get("parent_fd_file", 0) + 1
            continue
        hunt.try_file(path, "parent_fd_file")
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != me:
            hunt.try_file(f"/proc/{entry}/environ", "any_environ")
            hunt.try_file(f"/proc/{entry}/cmdline", "any_cmdline")
    for fd in INHERITED:
        hunt.search(f"inherited fd {fd['fd']}", "inherited_fd", str(fd).encode())
    return {
        "found": hunt.found,
        "read": hunt.read,
        "refused": hunt.refused,
        "env_names": sorted(os.environ),
        "inherited_fds": [{k: v for k, v in fd.items() if k != "data"} for fd in INHERITED],
        "status": [
            line for line in status.splitlines() if line.startswith(("Cap", "NoNewPrivs", "Uid"))
        ],
        "pid": me,
        "ppid": parent,
    }


if __name__ == "__main__":
    server.run("stdio")
