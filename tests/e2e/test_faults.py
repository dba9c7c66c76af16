"""Faults (issue 10, item 3), each on real service processes and the stub Gemini model:
PostgreSQL restarted mid-run, the toolpool SIGKILLed mid-run, an MCP server that hangs, and a
model answering malformed JSON, no candidates, or nothing at all.

Every test ends with :func:`agentfleet.testing.checks.invariants.assert_invariants`: whatever the
fault, nothing is left half-written. Waits are on database conditions with deadlines.
"""

from __future__ import annotations

import asyncio
import shutil
import sys
import tempfile
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg
import pytest
import pytest_asyncio
from google.protobuf import duration_pb2

from agentfleet.gemini_stub import Call, GeminiStub, Reply, Script, StubRequest
from agentfleet.postgres import db
from agentfleet.postgres.embedded_pg import EmbeddedPostgres
from agentfleet.postgres.migrate import migrate_up
from agentfleet.rpc.clients import open_channel
from agentfleet.testing.checks.invariants import assert_invariants
from agentfleet.testing.database import DatabaseFactory
from agentfleet.testing.services import ProcessStack, start_process_stack
from agentfleet.testing.stdio_allowlist import TEST_STDIO_ALLOWLIST
from agentfleet.testing.waiting import DATABASE_RESTARTING, wait_for, wait_for_query
from agentfleet.v1 import (
    common_pb2,
    executor_pb2,
    executor_pb2_grpc,
    registry_pb2,
    registry_pb2_grpc,
    toolpool_pb2,
    toolpool_pb2_grpc,
)

PROJECT = "faults"
TEST_SERVER = str(Path(__file__).parents[2] / "examples" / "mcp" / "test_server" / "server.py")
ENDED = ("completed", "failed", "cancelled", "paused")
"""Terminal, or paused (a timed-out run whose model gave no summary waits for ResumeRun)."""


def service_environ(stub: GeminiStub, **extra: str) -> dict[str, str]:
    """Auth off (one project, no tokens to mint), short leases, fast model retries."""
    return {
        "AGENTFLEET_AUTH": "off",
        "AGENTFLEET_GEMINI_BASE_URL": stub.base_url or "",
        "AGENTFLEET_MCP_STDIO_ALLOWLIST": TEST_STDIO_ALLOWLIST,
        "AGENTFLEET_EXECUTOR_LEASE_S": "3",
        "AGENTFLEET_EXECUTOR_HEARTBEAT_S": "0.5",
        "AGENTFLEET_SHUTDOWN_GRACE_S": "4",
        "AGENTFLEET_MODEL_MAX_ATTEMPTS": "2",
        "AGENTFLEET_MODEL_RETRY_BASE_S": "0.01",
        **extra,
    }


class Api:
    """Channels to the executor (runs and registry) and the toolpool of a process stack."""

    def __init__(self, stack: ProcessStack) -> None:
        self._channels = [open_channel(stack.addresses[n]) for n in ("executor", "toolpool")]
        self.runs = executor_pb2_grpc.ExecutorServiceStub(self._channels[0])
        self.registry = registry_pb2_grpc.AgentRegistryServiceStub(self._channels[0])
        self.toolpool = toolpool_pb2_grpc.ToolPoolServiceStub(self._channels[1])

    async def define(self, name: str, tools: Sequence[str] = ()) -> None:
        await self.registry.UpsertAgentDefinition(
            registry_pb2.UpsertAgentDefinitionRequest(
                project_id=PROJECT,
                agent_definition=common_pb2.AgentDefinition(
                    name=name,
                    system_prompt=f"You are {name}.",
                    model=common_pb2.ModelConfig(name="gemini-faults"),
                    tools=list(tools),
                ),
            )
        )

    async def trigger(self, agent: str, text: str = "go", timeout_s: float = 0) -> str:
        request = executor_pb2.StartRunRequest(project_id=PROJECT, agent_name=agent, input=text)
        if timeout_s:
            request.timeout.CopyFrom(duration_pb2.Duration(seconds=int(timeout_s)))
        return (await self.runs.TriggerRun(request)).id

    async def close(self) -> None:
        for channel in self._channels:
            await channel.close()


async def wait_all_terminal(pool: asyncpg.Pool, run_ids: list[str], timeout_s: float) -> None:
    await wait_for_query(
        pool,
        "SELECT count(*) = cardinality($1::uuid[]) FROM kb.agent_runs "
        "WHERE id = ANY($1::uuid[]) AND status = ANY($2::text[])",
        run_ids,
        list(ENDED),
        timeout_s=timeout_s,
        what=f"{len(run_ids)} runs ended",
        transient=DATABASE_RESTARTING,
    )


async def run_row(pool: asyncpg.Pool, run_id: str) -> asyncpg.Record:
    return await pool.fetchrow("SELECT * FROM kb.agent_runs WHERE id = $1", run_id)


async def tool_responses(pool: asyncpg.Pool, run_id: str) -> list[dict[str, Any]]:
    rows = await pool.fetch(
        "SELECT payload FROM kb.agent_run_events_shown"
        " WHERE run_id = $1 AND type = 'tool_response' ORDER BY seq",
        run_id,
    )
    return [r["payload"] for r in rows]


def assert_alive(stack: ProcessStack) -> None:
    dead = {n: p.returncode for n, p in stack.processes.items() if p.returncode is not None}
    assert not dead, f"services exited: {dead}"


# --- (a) PostgreSQL restarted mid-run ------------------------------------------------------


@pytest.fixture
async def own_postgres() -> AsyncIterator[tuple[EmbeddedPostgres, str]]:
    """A PostgreSQL server of this test alone (it gets restarted), migrated."""
    folder = Path(tempfile.mkdtemp(prefix="af-fault-pg-"))
    server = EmbeddedPostgres(folder / "pg", durable=False)
    try:
        url = await server.start("faults")
        await migrate_up(url)
        yield server, url
    finally:
        # remove(): as root the cluster may live outside ``folder``.
        await asyncio.to_thread(server.remove)
        shutil.rmtree(folder, ignore_errors=True)


async def test_postgres_restart_mid_run_services_reconnect_and_runs_end_cleanly(
    own_postgres: tuple[EmbeddedPostgres, str], gemini_stub: GeminiStub, tmp_path: Path
) -> None:
    server, url = own_postgres
    # Each run: three tool calls (each a database write in the toolpool), then an answer.
    steps = [Reply(calls=[Call("create_entity", {"type": "Job"})], delay_s=0.3)] * 3
    gemini_stub.add_script(
        Script(name="w", per_conversation=True, replies=[*steps, Reply(text="done")])
    )
    stack = await start_process_stack(
        database_url=url,
        log_dir=tmp_path,
        names=("toolpool", "executor"),
        environ=service_environ(gemini_stub),
    )
    api = Api(stack)
    pool = await db.create_pool(url, min_size=1, max_size=4)
    try:
        await api.define("w", ["create_entity"])
        before = [await api.trigger("w", f"job {i}") for i in range(8)]
        await wait_for_query(
            pool,
            "SELECT count(*) >= 4 FROM kb.agent_runs WHERE id = ANY($1::uuid[]) "
            "AND status = 'running' AND step_count >= 1",
            before,
            what="runs in flight",
            transient=DATABASE_RESTARTING,
        )
        await asyncio.to_thread(server.stop)
        await server.start("faults")
        # Whatever was in flight ends (completed, or failed with a reason); nothing hangs.
        await wait_all_terminal(pool, before, timeout_s=45)
        # The services reconnected: a run started after the restart completes.
        after = await api.trigger("w", "after the restart")
        await wait_all_terminal(pool, [after], timeout_s=30)
        assert (await run_row(pool, after))["status"] == "completed"
        # Both services' LISTEN connections came back (NOTIFY wake-ups, WatchRun).
        await wait_for(
            lambda: all('"listener_reconnected"' in stack.log(n) for n in stack.processes),
            "every Listener to reconnect",
            interval_s=0.1,
        )
        assert_alive(stack)
        for run_id in before:
            row = await run_row(pool, run_id)
            if row["status"] == "failed":
                assert row["error_message"], run_id
        await assert_invariants(pool, project_id=PROJECT)
    finally:
        await api.close()
        await pool.close()
        codes = await stack.stop(grace_s=10)
    assert codes == {"toolpool": 0, "executor": 0}, codes


# --- (b) toolpool SIGKILLed mid-run ---------------------------------------------------------


def mcp_server(name: str, marker: str, call_timeout_s: float = 0) -> toolpool_pb2.McpServer:
    """The example test MCP server over stdio; ``marker`` in its environment finds its
    processes in /proc."""
    server = toolpool_pb2.McpServer(
        name=name,
        transport=toolpool_pb2.MCP_TRANSPORT_STDIO,
        command=sys.executable,
        args=[TEST_SERVER, "--transport", "stdio"],
        env={"AGENTFLEET_FAULT_MARKER": marker},
    )
    if call_timeout_s:
        server.call_timeout.FromNanoseconds(int(call_timeout_s * 1e9))
    return server


def processes_with(marker: str) -> list[int]:
    """PIDs of live processes whose environment holds ``AGENTFLEET_FAULT_MARKER=marker``."""
    needle = f"AGENTFLEET_FAULT_MARKER={marker}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if needle in environ.split(b"\0") and state != "Z":
            found.append(int(entry.name))
    return found


async def wait_no_processes(marker: str, timeout_s: float = 15.0) -> None:
    await wait_for(
        lambda: not processes_with(marker),
        f"MCP server processes left behind: {processes_with(marker)}",
        timeout_s=timeout_s,
    )


def toolpool_kill_policy(request: StubRequest) -> Reply:
    """Starts a slow tool; after an error, retries ``echo`` until it works; then answers."""
    if request.turn == 0:
        return Reply(text="Starting the slow job.", calls=[Call("test__slow", {"seconds": 30})])
    last = request.function_responses()[-1]["response"]
    if "error" not in last:
        return Reply(text=f"Done after the toolpool came back: {last}")
    if request.turn > 60:
        return Reply(text="gave up: the toolpool never came back")
    return Reply(calls=[Call("test__echo", {"text": f"again {request.turn}"})], delay_s=0.2)


async def test_toolpool_killed_mid_call_model_told_run_goes_on_after_restart(
    database_url: str, db_pool: asyncpg.Pool, gemini_stub: GeminiStub, tmp_path: Path
) -> None:
    marker = uuid.uuid4().hex
    gemini_stub.add_script(Script(name="k", policy=toolpool_kill_policy))
    env = service_environ(gemini_stub)
    stack = await start_process_stack(
        database_url=database_url, log_dir=tmp_path, names=("toolpool", "executor"), environ=env
    )
    api = Api(stack)
    try:
        await api.toolpool.UpsertMcpServer(
            toolpool_pb2.UpsertMcpServerRequest(
                project_id=PROJECT, mcp_server=mcp_server("test", marker)
            )
        )
        await api.define("k", ["test__slow", "test__echo"])
        run_id = await api.trigger("k")
        await wait_for_query(
            db_pool,
            "SELECT true FROM kb.agent_run_tool_calls WHERE run_id = $1 "
            "AND tool_name = 'test__slow' AND status = 'started'",
            run_id,
            what="the slow tool call under way",
            transient=DATABASE_RESTARTING,
        )
        await wait_for_processes(marker)
        toolpool = stack.processes["toolpool"]
        toolpool.kill()
        await toolpool.wait()
        # The killed toolpool's MCP server sees its stdin close and goes too.
        await wait_no_processes(marker)
        # Again on its old port, with the environment start_process_stack gave it.
        await stack.restart(
            "toolpool", {"DATABASE_URL": database_url, "AGENTFLEET_LOG_FORMAT": "json", **env}
        )
        await wait_all_terminal(db_pool, [run_id], timeout_s=60)
        assert_alive(stack)
    finally:
        await api.close()
        codes = await stack.stop(grace_s=10)
    await wait_no_processes(marker)
    assert codes == {"toolpool": 0, "executor": 0}, codes

    row = await run_row(db_pool, run_id)
    assert row["status"] == "completed", row["error_message"]
    assert row["summary"].startswith("Done after the toolpool came back"), row["summary"]
    answers = await tool_responses(db_pool, run_id)
    # The slow call failed on the transport, and the model got that error as the result.
    assert answers[0]["tool_name"] == "test__slow"
    assert answers[0]["status"] == "failed"
    assert "UNAVAILABLE" in answers[0]["error"]
    assert answers[-1]["status"] == "completed"
    # Calls made while the toolpool restarted waited for it rather than failing at once
    # (GrpcToolGateway waits up to CONNECT_WAIT_S for the channel to reconnect).
    assert len(answers) <= 3, [(a["tool_name"], a["status"], a.get("error")) for a in answers]
    told = [r["response"] for r in gemini_stub.requests[1].function_responses()]
    assert "UNAVAILABLE" in told[-1]["error"]
    await assert_invariants(db_pool, project_id=PROJECT)


async def wait_for_processes(marker: str, timeout_s: float = 15.0) -> None:
    await wait_for(
        lambda: processes_with(marker), "the MCP server process to start", timeout_s=timeout_s
    )


# --- (c) a hanging MCP server, (d) a broken model: one stack for both -----------------------


@dataclass(kw_only=True, slots=True)
class Shared:
    stack: ProcessStack
    api: Api
    pool: asyncpg.Pool
    stub: GeminiStub
    marker: str


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def shared(
    database_factory: DatabaseFactory, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Shared]:
    """Toolpool and executor processes with the test MCP server registered (call_timeout
    0.5 s) and a run timeout grace of 1 s."""
    url = await database_factory.create_database()
    stub = GeminiStub()
    await stub.start()
    stack = await start_process_stack(
        database_url=url,
        log_dir=tmp_path_factory.mktemp("faults"),
        names=("toolpool", "executor"),
        environ=service_environ(stub, AGENTFLEET_TIMEOUT_GRACE_S="1"),
    )
    api = Api(stack)
    pool = await db.create_pool(url, min_size=1, max_size=4)
    marker = uuid.uuid4().hex
    try:
        await api.toolpool.UpsertMcpServer(
            toolpool_pb2.UpsertMcpServerRequest(
                project_id=PROJECT, mcp_server=mcp_server("hang", marker, call_timeout_s=0.5)
            )
        )
        yield Shared(stack=stack, api=api, pool=pool, stub=stub, marker=marker)
    finally:
        await api.close()
        codes = await stack.stop(grace_s=10)
        await stub.stop()
        await pool.close()
        await database_factory.drop_database(url)
    await wait_no_processes(marker)
    assert codes == {"toolpool": 0, "executor": 0}, codes


async def test_hanging_mcp_server_times_out_then_its_breaker_opens(shared: Shared) -> None:
    # Six calls of a tool that sleeps far beyond the server's 0.5 s call_timeout, each with
    # different arguments (the doom-loop detector stops identical repeats).
    calls = 6
    shared.stub.add_script(
        Script(
            name="You are hanger.",
            match_system="You are hanger.",
            per_conversation=True,
            replies=[
                *(Reply(calls=[Call("hang__slow", {"seconds": 600 + i})]) for i in range(calls)),
                Reply(text="the tool never answered"),
            ],
        )
    )
    await shared.api.define("hanger", ["hang__slow"])
    run_id = await shared.api.trigger("hanger")
    await wait_all_terminal(shared.pool, [run_id], timeout_s=60)
    row = await run_row(shared.pool, run_id)
    assert (row["status"], row["summary"]) == ("completed", "the tool never answered")
    answers = await tool_responses(shared.pool, run_id)
    assert len(answers) == calls
    # Five timeouts (the breaker's threshold), each after about the call_timeout ...
    for answer in answers[:5]:
        assert "no answer within 0.5 s" in answer["error"], answer
        assert answer["duration_ms"] >= 450, answer
    # ... then the breaker is open: rejected without trying, at once.
    assert "circuit" in answers[5]["error"].lower() or "breaker" in answers[5]["error"].lower()
    assert answers[5]["duration_ms"] < 200, answers[5]
    # The model was given every error as the tool's result.
    told = [
        r["response"] for r in shared.stub.requests_for("You are hanger.")[-1].function_responses()
    ]
    assert [t["error"] for t in told] == [a["error"] for a in answers]
    await assert_invariants(shared.pool, project_id=PROJECT)


@pytest.mark.parametrize(
    ("reply", "expect"),
    [
        (Reply(malformed=True), ("failed", "json")),
        (Reply(empty=True), ("failed", "candidate")),
        # Past the run's 2 s timeout the model gets 1 s to summarize; it hangs again, so
        # the run pauses (ResumeRun may continue it) rather than failing.
        (Reply(hang=True), ("paused", "timeout of 2s reached")),
    ],
    ids=["malformed", "empty", "hang"],
)
async def test_broken_model_fails_or_pauses_the_run_cleanly(
    shared: Shared, reply: Reply, expect: tuple[str, str]
) -> None:
    name = f"broken{uuid.uuid4().hex[:8]}"
    prompt = f"You are {name}."
    shared.stub.add_script(Script(name=prompt, match_system=prompt, policy=lambda _: reply))
    await shared.api.define(name)
    run_id = await shared.api.trigger(name, timeout_s=2)
    await wait_all_terminal(shared.pool, [run_id], timeout_s=30)
    row = await run_row(shared.pool, run_id)
    status, reason = expect
    assert row["status"] == status, (row["status"], row["error_message"])
    if status == "failed":
        assert reason in row["error_message"].lower(), row["error_message"]
    else:
        # A paused run is not an error (no error_message): its SAFETY event says why.
        messages = await shared.pool.fetch(
            "SELECT payload->>'message' AS m FROM kb.agent_run_events "
            "WHERE run_id = $1 AND type = 'safety'",
            run_id,
        )
        assert [reason in m["m"] for m in messages] == [True], messages
    await assert_invariants(shared.pool, project_id=PROJECT)
