"""The Dockerfile parses and follows the image rules: multi-stage, slim, non-root, no
compilers in the final stage, only the venv, migrations and examples in it, and an
entrypoint that runs any service or the CLI."""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from dockerfile_parse import DockerfileParser

from agentfleet.cli import entry

ROOT = Path(__file__).resolve().parents[2]
COMPILERS = re.compile(r"\b(gcc|g\+\+|clang|cc|make|build-essential|python3?-dev|libpq-dev)\b")


@dataclass(kw_only=True, slots=True)
class Stage:
    image: str
    name: str | None
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def values(self, instruction: str) -> list[str]:
        return [value for kind, value in self.instructions if kind == instruction]


def stages() -> list[Stage]:
    parsed = DockerfileParser(path=str(ROOT / "Dockerfile"))
    result: list[Stage] = []
    for item in parsed.structure:
        kind, value = item["instruction"], item["value"]
        if kind == "FROM":
            image, _, name = value.partition(" AS ") if " AS " in value else (value, "", "")
            result.append(Stage(image=image.strip(), name=name.strip() or None))
        elif kind != "COMMENT":
            assert result, f"{kind} before the first FROM"
            result[-1].instructions.append((kind, value))
    return result


def test_multi_stage_with_a_slim_final_stage() -> None:
    all_stages = stages()
    assert len(all_stages) >= 2
    assert all_stages[0].name == "build"
    assert all_stages[-1].image == "python:3.11-slim"


def test_final_stage_runs_as_a_non_root_user() -> None:
    users = stages()[-1].values("USER")
    assert users, "the final stage names no USER"
    user = users[-1].split(":")[0]
    assert user not in ("root", "0")
    # The user is created in the final stage, so it exists at run time.
    created = " ".join(stages()[-1].values("RUN"))
    assert f"--uid {user}" in created or f"useradd {user}" in created


def test_final_stage_has_no_compilers_and_installs_nothing() -> None:
    for command in stages()[-1].values("RUN"):
        assert not COMPILERS.search(command), command
        assert "pip install" not in command, command
        assert "apt-get install" not in command, command


def test_final_stage_copies_only_the_venv_migrations_and_examples() -> None:
    build = stages()[0].name
    copies = stages()[-1].values("COPY")
    assert f"--from={build} /opt/venv /opt/venv" in copies
    sources = {c.split()[-2] for c in copies if not c.startswith("--from")}
    assert sources == {"migrations", "examples"}
    for source in sources:
        assert (ROOT / source).is_dir()


def test_the_build_stage_installs_the_package_into_the_venv() -> None:
    runs = stages()[0].values("RUN")
    assert any("python -m venv /opt/venv" in r for r in runs)
    assert any(r.startswith("/opt/venv/bin/pip install") for r in runs)


def test_entrypoint_is_the_dispatch_module() -> None:
    entrypoints = stages()[-1].values("ENTRYPOINT")
    assert json.loads(entrypoints[-1]) == ["python", "-m", "agentfleet.cli.entry"]
    env = " ".join(stages()[-1].values("ENV"))
    assert "PATH=/opt/venv/bin:$PATH" in env
    assert "AGENTFLEET_LISTEN_HOST=0.0.0.0" in env


@pytest.mark.parametrize(
    "service", ["executor", "toolpool", "dispatcher", "history", "a2a", "console"]
)
def test_entry_runs_each_service(service: str) -> None:
    assert entry.plan([service]) == [sys.executable, "-m", f"services.{service}"]


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["migrate", "up"], ["agentfleet.cli.main", "migrate", "up"]),
        (["cli", "runs", "--project", "p"], ["agentfleet.cli.main", "runs", "--project", "p"]),
        (["runs"], ["agentfleet.cli.main", "runs"]),
    ],
)
def test_entry_runs_the_cli(argv: list[str], expected: list[str]) -> None:
    assert entry.plan(argv) == [sys.executable, "-m", *expected]


def test_dockerignore_keeps_local_state_out() -> None:
    ignored = set((ROOT / ".dockerignore").read_text().split())
    assert {".git", ".venv", ".data", "tests"} <= ignored
