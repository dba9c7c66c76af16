"""CPU and memory of the processes a system runs on, read from /proc (stdlib only: both
venvs import it).

CPU per step is summed over every process doing the work: the system's own processes and
the PostgreSQL server (the postmaster, its live backends, and through the postmaster's
``cutime``/``cstime`` the backends that ended during the span). The stub model server is
measured apart: it is the same for every system and stands for a remote model.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

TICKS_PER_S = os.sysconf("SC_CLK_TCK")
PAGE_KIB = os.sysconf("SC_PAGE_SIZE") // 1024


def _stat_fields(pid: int) -> list[str]:
    text = Path(f"/proc/{pid}/stat").read_text()
    # The command name is in parentheses and may hold spaces: split after its last ')'.
    return text[text.rindex(")") + 2 :].split()


def cpu_seconds(pid: int, *, with_reaped_children: bool = False) -> float:
    """User + system CPU of one process (0 if it is gone)."""
    try:
        fields = _stat_fields(pid)
    except (OSError, ValueError):
        return 0.0
    # Fields after the name start at index 3 of stat(5): utime is 14, stime 15, cutime 16.
    ticks = int(fields[11]) + int(fields[12])
    if with_reaped_children:
        ticks += int(fields[13]) + int(fields[14])
    return ticks / TICKS_PER_S


def children(pid: int) -> list[int]:
    """Live direct children of ``pid``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if int(_stat_fields(int(entry.name))[1]) == pid:
                    found.append(int(entry.name))
            except (OSError, ValueError, IndexError):
                continue
    return found


def postgres_cpu_seconds(postmaster_pid: int) -> float:
    """The whole server: postmaster (with its reaped backends) and its live backends."""
    total = cpu_seconds(postmaster_pid, with_reaped_children=True)
    return total + sum(cpu_seconds(child) for child in children(postmaster_pid))


def rss_kib(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * PAGE_KIB
    except (OSError, ValueError, IndexError):
        return 0


class CpuMeter:
    """CPU seconds spent between :meth:`start` and :meth:`stop` by the system's processes
    and PostgreSQL (``postgres_pid`` from BENCH_POSTGRES_PID; 0 when unknown), and apart
    the stub model's (BENCH_STUB_PID)."""

    def __init__(self, system_pids: Iterable[int]) -> None:
        self.system_pids = list(system_pids)
        self.postgres_pid = int(os.environ.get("BENCH_POSTGRES_PID", "0"))
        self.stub_pid = int(os.environ.get("BENCH_STUB_PID", "0"))
        self._began: dict[str, float] = {}

    def _read(self) -> dict[str, float]:
        return {
            "system": sum(cpu_seconds(pid) for pid in self.system_pids),
            "postgres": postgres_cpu_seconds(self.postgres_pid) if self.postgres_pid else 0.0,
            "stub": cpu_seconds(self.stub_pid) if self.stub_pid else 0.0,
        }

    def start(self) -> None:
        self._began = self._read()

    def stop(self, steps: int) -> dict[str, float | int | bool]:
        """CPU per step in ms: the system's processes, PostgreSQL, both, and the stub apart."""
        now = self._read()
        spent = {k: now[k] - self._began[k] for k in now}
        per_step = {f"{k}_ms_per_step": v * 1000 / steps for k, v in spent.items()}
        per_step["all_ms_per_step"] = (spent["system"] + spent["postgres"]) * 1000 / steps
        return {
            **per_step,
            "steps": steps,
            "postgres_measured": bool(self.postgres_pid),
            "rss_kib": sum(rss_kib(pid) for pid in self.system_pids),
        }
