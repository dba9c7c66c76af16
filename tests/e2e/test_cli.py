"""Every remote ``agentfleet`` command against the four services (in-process, auth on), and
the one-line errors for a wrong address, a wrong token and an unknown run."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import uuid
from pathlib import Path

from agentfleet.gemini_stub import GeminiStub, Reply, Script
from agentfleet.testing.cli_process import start_agentfleet
from agentfleet.v1 import dispatcher_pb2, dispatcher_pb2_grpc
from tests.e2e.cli_harness import MARKER, Cli, cli, install

__all__ = ["cli"]

ROOT = Path(__file__).resolve().parents[2]


async def test_install_run_and_inspect(cli: Cli, gemini_stub: GeminiStub, tmp_path: Path) -> None:
    await install(cli, tmp_path)
    agents = await cli.json_lines("agents")
    assert [a["name"] for a in agents[0]["agent_definitions"]] == ["helper"]

    gemini_stub.add_script(
        Script(name="helper", match_system=MARKER, replies=[Reply(text="forty-two")] * 2)
    )
    events = await cli.json_lines("run", "helper", "what is the answer?")
    assert events[0]["type"] == "RUN_EVENT_TYPE_RUN_QUEUED"
    assert events[-1]["type"] == "RUN_EVENT_TYPE_RUN_FINISHED"
    final = events[-1]["run_finished"]["run"]
    assert (final["status"], final["summary"]) == ("RUN_STATUS_COMPLETED", "forty-two")
    run_id = final["id"]
    assert {e["run_id"] for e in events} == {run_id}

    # The live view ends with the persisted tree and the summary.
    code, out, err = await cli("run", "helper", "again?")
    assert (code, err) == (0, "")
    assert "helper" in out
    assert "completed" in out
    assert "forty-two" in out

    listed = await cli.json_lines("runs", "--status", "completed", "--agent", "helper")
    assert run_id in [r["id"] for r in listed[0]["runs"]]
    code, out, _ = await cli("runs")
    assert code == 0
    assert "helper" in out

    shown = await cli.json_lines("show", run_id)
    assert shown[0]["run"]["summary"] == "forty-two"
    code, out, _ = await cli("show", run_id)
    assert code == 0
    assert "forty-two" in out
    messages = (await cli.json_lines("show", run_id, "--messages"))[0]["messages"]
    assert [m["role"] for m in messages][-1] == "MESSAGE_ROLE_MODEL"
    full = await cli.json_lines("show", run_id, "--message", messages[-1]["id"])
    assert "forty-two" in json.dumps(full[0]["content"])
    code, out, _ = await cli("show", run_id, "--tool-calls")
    assert code == 0
    assert "tool call" in out

    tree = await cli.json_lines("tree", run_id)
    assert [n["run_id"] for n in tree[0]["nodes"]] == [run_id]
    code, out, _ = await cli("tree", run_id)
    assert code == 0
    assert "helper" in out

    # A finished run can be neither resumed nor cancelled into another state.
    code, _, err = await cli("resume", run_id)
    assert code == 1
    assert err.startswith("agentfleet: FAILED_PRECONDITION: ")
    assert len(err.splitlines()) == 1


async def test_secrets_are_set_listed_and_removed_never_shown(cli: Cli) -> None:
    code, out, err = await cli("secret", "set", "API_KEY", "--value", "s3cret-value")
    assert (code, err) == (0, "")
    assert "s3cret-value" not in out
    listed = await cli.json_lines("secret", "list")
    assert [s["name"] for s in listed[0]["secrets"]] == ["API_KEY"]
    assert "s3cret-value" not in json.dumps(listed)
    code, _, _ = await cli("secret", "remove", "API_KEY")
    assert code == 0
    assert (await cli.json_lines("secret", "list"))[0].get("secrets", []) == []


async def test_mcp_servers_are_added_tested_listed_and_removed(cli: Cli) -> None:
    server = str(ROOT / "examples" / "mcp" / "test_server" / "server.py")
    code, out, err = await cli(
        "mcp",
        "add",
        "demo",
        "--command",
        sys.executable,
        "--arg",
        server,
        "--arg=--transport",
        "--arg=stdio",
    )
    assert (code, err) == (0, "")
    assert "added mcp server demo" in out
    listed = await cli.json_lines("mcp", "list")
    assert [s["name"] for s in listed[0]["mcp_servers"]] == ["demo"]
    tested = await cli.json_lines("mcp", "test", "demo")
    assert tested[0]["ok"] is True
    assert tested[0]["tools"]
    code, _, _ = await cli("mcp", "remove", "demo")
    assert code == 0
    code, _, err = await cli("mcp", "test", "demo")
    assert code == 1
    assert err.startswith("agentfleet: NOT_FOUND: ")


async def test_dag_submit_follows_the_contract(cli: Cli, tmp_path: Path) -> None:
    dag = tmp_path / "dag.yaml"
    dag.write_text(
        "title: two steps\ntasks:\n  - key: a\n    title: first\n"
        "  - key: b\n    title: second\n    blocked_by: [a]\n"
    )
    code, out, err = await cli("dag", "submit", str(dag), "--validate-only")
    if code != 0:
        # The dispatcher is not built yet: its answer is still one line with the code.
        assert err.startswith("agentfleet: UNIMPLEMENTED: ")
        assert len(err.splitlines()) == 1
    else:
        assert "valid task graph" in out
    dag.write_text("tasks:\n  - key: a\n    colour: blue\n")
    code, _, err = await cli("dag", "submit", str(dag))
    assert (code, err.strip()) == (
        2,
        "agentfleet: INVALID_ARGUMENT: tasks[0].colour: unknown field",
    )


async def test_dag_submit_of_the_readme_example_keeps_its_edges(cli: Cli) -> None:
    """The README's `agentfleet dag submit examples/dags/seed002.yaml` sends the file's
    top-level `edges:` (it once sent 6 tasks and 0 edges)."""
    lines = await cli.json_lines("dag", "submit", str(ROOT / "examples" / "dags" / "seed002.yaml"))
    graph_id = lines[0]["task_graph"]["id"]
    reply = await dispatcher_pb2_grpc.DispatcherServiceStub(
        cli.stack.channel("dispatcher", token=cli.environ["AGENTFLEET_TOKEN"])
    ).GetTaskGraph(
        dispatcher_pb2.GetTaskGraphRequest(
            project_id=cli.environ["AGENTFLEET_PROJECT"], task_graph_id=graph_id
        )
    )
    edges = {(e.blocker_key, e.blocked_key) for e in reply.task_graph.edges}
    assert edges == {("1.2", "2.1"), ("1.1", "2.3"), ("1.2", "2.3"), ("2.1", "3.1"), ("2.3", "3.1")}
    blockers = {t.spec.key: set(t.blocker_keys) for t in reply.task_graph.tasks}
    assert blockers["3.1"] == {"2.1", "2.3"}
    assert blockers["1.1"] == set()


async def test_unknown_run_wrong_token_and_missing_project_are_one_line(cli: Cli) -> None:
    unknown = str(uuid.uuid4())
    for argv in (["show", unknown], ["tree", unknown], ["cancel", unknown]):
        code, _, err = await cli(*argv)
        assert code == 1
        assert err.startswith("agentfleet: NOT_FOUND: "), (argv, err)
        assert len(err.splitlines()) == 1
    code, _, err = await cli("runs", AGENTFLEET_TOKEN="af_not-a-real-token")
    assert (code, err.strip()) == (1, "agentfleet: UNAUTHENTICATED: invalid or revoked token")
    code, _, err = await cli("agents", AGENTFLEET_PROJECT="")
    assert err.strip() == (
        "agentfleet: INVALID_ARGUMENT: no project: pass --project or set AGENTFLEET_PROJECT"
    )


async def test_a_wrong_address_is_one_line_naming_it_from_the_real_command() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTFLEET_")}
    process = await start_agentfleet(
        "runs", "--project", "p", "--history-addr", "127.0.0.1:1", env=env
    )
    out, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 1
    (line,) = err.decode().splitlines()
    assert line.startswith("agentfleet: UNAVAILABLE: cannot reach history at 127.0.0.1:1 ")
    assert out == b""


async def test_budget_is_set_in_dollars_and_shown_with_usage(cli: Cli) -> None:
    code, out, err = await cli(
        "budget", "set", "--daily-tokens", "5000", "--monthly-usd", "12.5", "--warn-at", "0.9"
    )
    assert (code, err) == (0, "")
    assert "monthly_cost" in out
    assert "$12.500000" in out
    shown = (await cli.json_lines("budget", "show"))[0]
    assert shown["budget"]["daily_tokens"] == "5000"
    assert shown["budget"]["monthly_cost_nanos"] == str(12_500_000_000)
    assert shown["budget"]["warn_fraction"] == 0.9
    # A limit left out is removed; a hostile one is refused naming the field.
    code, _, err = await cli("budget", "set", "--daily-tokens=-3")
    assert code == 2  # INVALID_ARGUMENT, as argparse's usage errors
    assert err.startswith("agentfleet: INVALID_ARGUMENT: budget.daily_tokens")
    code, _, err = await cli("budget", "set", "--daily-usd", "NaN")
    assert code == 2  # INVALID_ARGUMENT, as argparse's usage errors
    assert "--daily-usd" in err
    code, _, _ = await cli("budget", "set")
    assert code == 0
    assert "daily_tokens" not in (await cli.json_lines("budget", "show"))[0].get("budget", {})
