"""docs/DESIGN.md stays complete: it names every table the migrations create and every RPC
the protos declare, so a change that adds one cannot leave the design behind."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DESIGN = ROOT / "docs" / "DESIGN.md"

_CREATE_TABLE = re.compile(
    r"\bCREATE\s+(?:UNLOGGED\s+)?TABLE\s+(?:IF\s+NOT\s+EXISTS\s+)?(?:\w+\.)?(\w+)", re.IGNORECASE
)
_RPC = re.compile(r"^\s*rpc\s+(\w+)\s*\(", re.MULTILINE)
_SQL_COMMENT = re.compile(r"--[^\n]*")
_PROTO_COMMENT = re.compile(r"//[^\n]*")


def migration_tables() -> set[str]:
    """Tables created by the up migrations (comments ignored: prose may say CREATE TABLE)."""
    return {
        name
        for path in sorted((ROOT / "migrations").glob("*.up.sql"))
        for name in _CREATE_TABLE.findall(_SQL_COMMENT.sub("", path.read_text()))
    }


def proto_rpcs() -> set[str]:
    return {
        name
        for path in sorted((ROOT / "protos").rglob("*.proto"))
        for name in _RPC.findall(_PROTO_COMMENT.sub("", path.read_text()))
    }


def missing_from(text: str, names: set[str]) -> list[str]:
    """The names that ``text`` does not hold as a whole word (in backticks or not)."""
    return sorted(name for name in names if not re.search(rf"(?<!\w){re.escape(name)}(?!\w)", text))


def test_the_parsers_find_what_the_schema_and_protos_hold() -> None:
    # Guards the guard: a parser that found nothing would make the checks below pass vacuously.
    assert {"agent_runs", "agent_run_events", "graph_objects", "api_tokens"} <= migration_tables()
    assert {"StartRun", "WatchRun", "CallTool", "CreateTaskGraph"} <= proto_rpcs()


def test_design_names_every_table() -> None:
    missing = missing_from(DESIGN.read_text(), migration_tables())
    assert not missing, f"docs/DESIGN.md does not describe these tables of migrations/: {missing}"


def test_design_names_every_rpc() -> None:
    missing = missing_from(DESIGN.read_text(), proto_rpcs())
    assert not missing, f"docs/DESIGN.md does not describe these RPCs of protos/: {missing}"


def test_a_name_counts_only_as_a_whole_word() -> None:
    # "GetRun" inside "GetRunTree" must not count as GetRun described.
    text = "`GetRunTree`, kb.agent_runs_x and `api_tokens`"
    names = {"GetRun", "GetRunTree", "agent_runs", "api_tokens"}
    assert missing_from(text, names) == ["GetRun", "agent_runs"]


def test_the_readme_sends_newcomers_to_the_design() -> None:
    assert "](docs/DESIGN.md)" in (ROOT / "README.md").read_text()
