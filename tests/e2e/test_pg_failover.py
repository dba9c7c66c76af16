"""PostgreSQL restarted under 50 runs in flight (issue #18): real toolpool and executor
processes, the stub model, and an embedded PostgreSQL of this test stopped and started again
on the same data directory while the runs are mid-step.

What must hold: every run completes (none failed, none left waiting for a lease to expire),
no write was applied twice (the invariants, and one message per step and role), and the
executor logged the outage as a few warning lines, not a traceback per run.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from agentfleet.gemini_stub import Call, GeminiStub, Reply, Script
from agentfleet.postgres import db
from agentfleet.postgres.embedded_pg import EmbeddedPostgres
from agentfleet.postgres.migrate import migrate_up
from agentfleet.rpc.clients import open_channel
from agentfleet.testing.checks.invariants import assert_invariants
from agentfleet.testing.services import start_process_stack
from agentfleet.testing.stdio_allowlist import TEST_STDIO_ALLOWLIST
from agentfleet.testing.waiting import DATABASE_RESTARTING, wait_for, wait_for_query
from agentfleet.v1 import (
    common_pb2,
    executor_pb2,
    executor_pb2_grpc,
    registry_pb2,
    registry_pb2_grpc,
)

PROJECT = "failover"
RUNS = 50
TOOL_STEPS = 3
"""Model replies with a tool call per run; a final text answer follows."""
LEASE_S = 3.0
OUTAGE_S = LEASE_S + 1.5
"""How long the server stays down: longer than a lease, which the worker must keep anyway."""
MAX_WARNINGS = 4
"""The outage's warning lines the executor may log ("a few", one per outage and source)."""


@pytest.fixture
async def own_postgres() -> AsyncIterator[tuple[EmbeddedPostgres, str]]:
    """A PostgreSQL server of this test alone (it gets restarted), migrated."""
    folder = Path(tempfile.mkdtemp(prefix="af-failover-pg-"))
    server = EmbeddedPostgres(folder / "pg", durable=False)
    try:
        url = await server.start(PROJECT)
        await migrate_up(url)
        yield server, url
    finally:
        # remove(): as root the cluster may live outside ``folder``.
        await asyncio.to_thread(server.remove)
        shutil.rmtree(folder, ignore_errors=True)


def log_records(text: str) -> list[dict[str, object]]:
    records = []
    for line in text.splitlines():
        try:
            records.append(json.loads(line))
        except ValueError:
            continue
    return records


@pytest.mark.timeout(300)
async def test_postgres_restart_under_50_runs_every_run_completes_once(
    own_postgres: tuple[EmbeddedPostgres, str], gemini_stub: GeminiStub, tmp_path: Path
) -> None:
    server, url = own_postgres
    tool_step = Reply(calls=[Call("create_entity", {"type": "Job"})], delay_s=0.3)
    gemini_stub.add_script(
        Script(
            name="steady",
            per_conversation=True,
            replies=[*[tool_step] * TOOL_STEPS, Reply(text="done")],
        )
    )
    stack = await start_process_stack(
        database_url=url,
        log_dir=tmp_path,
        names=("toolpool", "executor"),
        environ={
            "AGENTFLEET_AUTH": "off",
            "AGENTFLEET_GEMINI_BASE_URL": gemini_stub.base_url or "",
            "AGENTFLEET_MCP_STDIO_ALLOWLIST": TEST_STDIO_ALLOWLIST,
            # A lease shorter than the outage: the worker must keep its runs all the same.
            "AGENTFLEET_EXECUTOR_LEASE_S": str(LEASE_S),
            "AGENTFLEET_EXECUTOR_HEARTBEAT_S": "0.5",
            "AGENTFLEET_EXECUTOR_CONCURRENCY": "25",
            "AGENTFLEET_SHUTDOWN_GRACE_S": "4",
        },
    )
    channel = open_channel(stack.addresses["executor"])
    pool = await db.create_pool(url, min_size=1, max_size=4)
    try:
        registry = registry_pb2_grpc.AgentRegistryServiceStub(channel)
        runs_api = executor_pb2_grpc.ExecutorServiceStub(channel)
        await registry.UpsertAgentDefinition(
            registry_pb2.UpsertAgentDefinitionRequest(
                project_id=PROJECT,
                agent_definition=common_pb2.AgentDefinition(
                    name="steady",
                    system_prompt="You are steady.",
                    model=common_pb2.ModelConfig(name="gemini-failover"),
                    tools=["create_entity"],
                ),
            )
        )
        run_ids = [
            (
                await runs_api.TriggerRun(
                    executor_pb2.StartRunRequest(
                        project_id=PROJECT, agent_name="steady", input=f"job {i}"
                    )
                )
            ).id
            for i in range(RUNS)
        ]
        # In the middle: some runs mid-step, with more queued behind them.
        await wait_for_query(
            pool,
            "SELECT count(*) >= 10 FROM kb.agent_runs WHERE id = ANY($1::uuid[]) "
            "AND status = 'running' AND step_count >= 1",
            run_ids,
            timeout_s=60,
            what="runs in flight",
            transient=DATABASE_RESTARTING,
        )
        await asyncio.to_thread(server.stop)
        await wait_for(
            lambda: '"database_unreachable"' in stack.log("executor"),
            "the executor to notice the outage",
        )
        # The outage's length, on purpose (not a wait for some state): leases expire.
        await asyncio.sleep(OUTAGE_S)
        assert await server.start(PROJECT) == url

        await wait_for_query(
            pool,
            "SELECT count(*) = cardinality($1::uuid[]) FROM kb.agent_runs "
            "WHERE id = ANY($1::uuid[]) AND status IN ('completed', 'failed', 'cancelled')",
            run_ids,
            timeout_s=120,
            what=f"{RUNS} runs ended",
            transient=DATABASE_RESTARTING,
        )
        statuses = await pool.fetch(
            "SELECT status, count(*) AS n, min(error_message) AS error FROM kb.agent_runs "
            "WHERE id = ANY($1::uuid[]) GROUP BY status",
            run_ids,
        )
        assert {r["status"]: r["n"] for r in statuses} == {"completed": RUNS}, [
            dict(r) for r in statuses
        ]
        # Nothing written twice: one message per step and role, every run's answer once.
        doubled = await pool.fetch(
            "SELECT run_id, step_number, role, count(*) AS n FROM kb.agent_run_messages "
            "WHERE run_id = ANY($1::uuid[]) GROUP BY run_id, step_number, role "
            "HAVING count(*) > 1 AND role <> 'system'",
            run_ids,
        )
        assert doubled == [], [dict(r) for r in doubled]
        per_run = await pool.fetch(
            "SELECT r.id, r.step_count, "
            "  (SELECT count(*) FROM kb.agent_run_messages m "
            "   WHERE m.run_id = r.id AND m.role = 'model') AS replies, "
            "  (SELECT count(*) FROM kb.agent_run_events e "
            "   WHERE e.run_id = r.id AND e.type = 'run_finished') AS finished "
            "FROM kb.agent_runs r WHERE r.id = ANY($1::uuid[])",
            run_ids,
        )
        wrong = [
            dict(r)
            for r in per_run
            if (r["step_count"], r["replies"], r["finished"]) != (TOOL_STEPS + 1,) * 2 + (1,)
        ]
        assert wrong == [], wrong
        await assert_invariants(pool, project_id=PROJECT)
    finally:
        await channel.close()
        await pool.close()
        codes = await stack.stop(grace_s=10)
    assert codes == {"toolpool": 0, "executor": 0}, codes

    executor_log = stack.log("executor")
    assert "Traceback" not in executor_log, executor_log[-4000:]
    records = log_records(executor_log)
    # The restart did reach the executor (the test is not vacuous) ...
    outage = [i for i, r in enumerate(records) if r.get("event") == "database_unreachable"]
    assert outage, executor_log[-4000:]
    # ... and from there it said so in a few lines (one per outage and component).
    warnings = [
        (r.get("event"), r.get("error") or r.get("failing"))
        for r in records[outage[0] :]
        if r.get("level") in ("warning", "error", "critical")
    ]
    assert len(warnings) <= MAX_WARNINGS, warnings
