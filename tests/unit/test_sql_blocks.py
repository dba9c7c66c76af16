"""agentfleet.postgres.sql_blocks: named statements of a .sql file, named parameters, fragments."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentfleet.events import STATEMENTS
from agentfleet.postgres.sql_blocks import SqlFileError, compose, load_blocks, load_statements

QUERIES = """\
-- Header comments before the first block are the file's documentation.

-- fragment: visible_runs
runs AS (SELECT id FROM kb.agent_runs WHERE project_id = :project_id)

-- name: count_runs
-- Counts a project's runs after :this_is_a_comment, not a parameter.
WITH
-- include: visible_runs
SELECT count(*) FROM runs WHERE id <> :run_id::uuid AND ':' || :project_id <> ':x'

-- name: one_run
SELECT * FROM kb.agent_runs WHERE id = :run_id::uuid
"""


def _load(tmp_path: Path, text: str) -> dict:
    path = tmp_path / "queries.sql"
    path.write_text(text, encoding="utf-8")
    return load_statements(path)


def test_parameters_are_numbered_in_order_of_first_use(tmp_path: Path) -> None:
    statements = _load(tmp_path, QUERIES)
    count = statements["count_runs"]
    assert count.parameters == ("project_id", "run_id")
    assert count.text == (
        "WITH\nruns AS (SELECT id FROM kb.agent_runs WHERE project_id = $1)\n"
        "SELECT count(*) FROM runs WHERE id <> $2::uuid AND ':' || $1 <> ':x'"
    )
    assert count.arguments({"run_id": "r", "project_id": "p"}) == ("p", "r")
    assert statements["one_run"].text == "SELECT * FROM kb.agent_runs WHERE id = $1::uuid"
    assert set(statements) == {"count_runs", "one_run"}  # a fragment is no statement


def test_arguments_name_what_is_missing_or_unknown(tmp_path: Path) -> None:
    count = _load(tmp_path, QUERIES)["count_runs"]
    with pytest.raises(ValueError, match=r"count_runs: missing \['run_id'\], unknown \['step'\]"):
        count.arguments({"project_id": "p", "step": 1})


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("-- name: a\nSELECT 1\n-- name: a\nSELECT 2\n", "block 'a' defined twice"),
        ("-- name: a\nWITH\n-- include: nowhere\nSELECT 1\n", "unknown fragment 'nowhere'"),
        ("SELECT 1\n-- name: a\nSELECT 2\n", "SQL before the first"),
        (
            "-- fragment: f\nx AS (\n-- include: f\n)\n-- name: a\nWITH\n-- include: f\nSELECT 1\n",
            "fragment 'f' includes itself",
        ),
    ],
)
def test_a_malformed_file_is_refused_at_load(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(SqlFileError, match=message):
        _load(tmp_path, text)


def test_the_run_event_statements_share_one_event_contract() -> None:
    event_columns = {
        "run_id",
        "project_id",
        "root_run_id",
        "event_types",
        "event_agents",
        "event_internal",
        "event_payloads",
    }
    for name in ("append_events", "record_start", "record_model_reply", "record_tool_results"):
        assert event_columns <= set(STATEMENTS[name].parameters), name
        assert "INSERT INTO kb.agent_run_events" in STATEMENTS[name].text
    # Only the append inside a caller's transaction NOTIFYs at commit; the statements that
    # commit on their own notify after (agentfleet.events.notifier).
    assert "channel" in STATEMENTS["append_events"].parameters
    for name in ("record_start", "record_model_reply", "record_tool_results"):
        assert "pg_notify" not in STATEMENTS[name].text, name
    assert ":" not in STATEMENTS["record_model_reply"].text.replace("::", "").replace("':'", "")


def test_a_statement_written_elsewhere_embeds_a_files_fragments_nested(tmp_path: Path) -> None:
    path = tmp_path / "queries.sql"
    path.write_text(
        "-- fragment: inner\nid = :run_id::uuid\n"
        "-- fragment: outer\nruns AS (SELECT id FROM kb.agent_runs WHERE\n-- include: inner\n)\n"
        "-- name: unused\nSELECT 1\n",
        encoding="utf-8",
    )
    _, fragments = load_blocks(path)

    statement = compose(
        "mine",
        "-- :not_a_parameter\nWITH\n-- include: outer\nSELECT count(*) FROM runs, x WHERE x.p = :p",
        fragments,
    )

    assert statement.parameters == ("run_id", "p")
    assert "id = $1::uuid" in statement.text
    assert "x.p = $2" in statement.text
    assert "not_a_parameter" not in statement.text
    with pytest.raises(SqlFileError, match="unknown fragment 'nowhere'"):
        compose("bad", "WITH\n-- include: nowhere\nSELECT 1", fragments)
