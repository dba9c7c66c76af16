"""Benchmarks leave the temporary folder as they found it: the cleanup helpers of
bench/_common.py delete what they made when the benchmark ends normally, fails, or gets a
Ctrl-C, and every benchmark makes its temporary folders through them.

The process-level cases run a real Python process with ``TMPDIR`` pointed at the test's own
folder, so "nothing left behind" is checked as an empty folder.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).parents[2] / "bench"
sys.path.insert(0, str(BENCH))

from _common import interrupt, temporary_folder  # noqa: E402

CHILD = f"""
import asyncio, os, signal, sys
if os.environ.get("CTRL_C_IGNORED"):
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # as a shell's background job inherits it
sys.path.insert(0, {str(BENCH)!r})
from _common import scratch_folder, temporary_folder

mode = sys.argv[1]
logs = scratch_folder("agentfleet-bench-logs-")
(logs / "service.log").write_text("written by a service")
print(logs, flush=True)
if mode == "fails":
    raise RuntimeError("the benchmark failed")
if mode in ("interrupted", "ignores-ctrl-c"):
    if mode == "ignores-ctrl-c":
        signal.signal(signal.SIGINT, signal.SIG_IGN)

    async def main():
        with temporary_folder("agentfleet-bench-") as inner:
            (inner / "pg").mkdir()
            print(inner, flush=True)
            await asyncio.Event().wait()

    asyncio.run(main())
"""


def _start(mode: str, tmp_path: Path, *, ctrl_c_ignored: bool = False) -> subprocess.Popen[str]:
    """``ctrl_c_ignored``: start the child with SIGINT ignored, as a shell's background job
    (``make bench &``) is."""
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    return subprocess.Popen(
        [sys.executable, "-c", CHILD, mode],
        env={
            **os.environ,
            "TMPDIR": str(scratch),
            **({"CTRL_C_IGNORED": "1"} if ctrl_c_ignored else {}),
        },
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _made(process: subprocess.Popen[str], count: int) -> list[Path]:
    assert process.stdout is not None
    # readline blocks until the child has made the folder: a condition, not a sleep.
    return [Path(process.stdout.readline().strip()) for _ in range(count)]


@pytest.mark.parametrize("mode", ["ends", "fails"])
def test_scratch_folders_are_gone_when_the_process_ends_or_fails(mode: str, tmp_path: Path) -> None:
    process = _start(mode, tmp_path)
    (logs,) = _made(process, 1)
    assert logs.parent == tmp_path / "tmp"
    _, err = process.communicate(timeout=30)
    assert process.returncode == (0 if mode == "ends" else 1), err
    assert list((tmp_path / "tmp").iterdir()) == []


@pytest.mark.parametrize("ctrl_c_ignored", [False, True], ids=["foreground", "background-job"])
def test_ctrl_c_removes_every_folder_the_benchmark_made(
    tmp_path: Path, ctrl_c_ignored: bool
) -> None:
    process = _start("interrupted", tmp_path, ctrl_c_ignored=ctrl_c_ignored)
    logs, inner = _made(process, 2)
    assert logs.is_dir()
    assert inner.is_dir()
    interrupt(process, grace_s=30)  # what run_all does at its time limit: SIGINT first
    assert process.returncode != 0
    assert list((tmp_path / "tmp").iterdir()) == []


def test_a_benchmark_that_ignores_ctrl_c_is_killed_after_the_grace(tmp_path: Path) -> None:
    process = _start("ignores-ctrl-c", tmp_path)
    _made(process, 2)
    interrupt(process, grace_s=0.5)
    assert process.returncode == -signal.SIGKILL


def test_a_temporary_folder_is_gone_after_its_block_whichever_way_it_ends() -> None:
    with temporary_folder("agentfleet-bench-") as folder:
        (folder / "file").write_text("x")
    assert not folder.exists()
    for error in (RuntimeError("failed"), KeyboardInterrupt()):
        made: list[Path] = []
        with pytest.raises(type(error)):
            _fail_inside_a_temporary_folder(made, error)
        assert made
        assert not made[0].exists()


def _fail_inside_a_temporary_folder(made: list[Path], error: BaseException) -> None:
    with temporary_folder("agentfleet-bench-") as folder:
        made.append(folder)
        (folder / "file").write_text("x")
        raise error


def test_every_benchmark_makes_its_temporary_folders_through_the_helpers() -> None:
    direct = re.compile(r"\b(mkdtemp|mkstemp|TemporaryDirectory|NamedTemporaryFile)\(")
    offenders = [
        f"{path.relative_to(BENCH)}:{number}"
        for path in sorted(BENCH.rglob("*.py"))
        if path.name != "_common.py" and ".peers-venv" not in path.parts
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if direct.search(line)
    ]
    assert offenders == []
    # And the four that used to leave their folders behind now use them.
    for script, prefix in [
        ("peers/agentfleet_scripted.py", "agentfleet-bench-peer-"),
        ("executor_steps.py", "agentfleet-bench-steps-"),
        ("watch_fanout.py", "agentfleet-bench-watch-"),
        ("toolpool_calltool.py", "agentfleet-bench-logs-"),
    ]:
        assert f'scratch_folder("{prefix}")' in (BENCH / script).read_text(), script
