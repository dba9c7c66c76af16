"""The scripted agent on agentfleet: the real executor and toolpool as processes, over gRPC.

One round of the peer comparison (``bench/run_all.py`` interleaves rounds with the ADK and
LangGraph scripts):

- ``single``: one agent of ``--steps`` steps, each step one model call (the stub Gemini
  server the runner started in its own process, shared with the peers, over HTTP) and one
  built-in tool call (``get_entity`` through ToolPool CallTool, a real database read);
  per-step time is the gap between consecutive ``tool_response`` events as the StartRun
  stream delivers them;
- ``concurrent``: ``--agents`` such agents of ``--concurrent-steps`` steps at once: steps/s;
- ``fanout``: one parent whose first step is ``spawn_agents`` with ``--children`` tasks,
  each child answering at once; wall time of the parent run, seen by the client.

Persisted per step, in two statements (each its own transaction, before the step goes on):
the model message, the tool call row ``started``, the run's counters and events
(tool_request) before the tool runs; then the tool message, the call row finished and the
tool_response event.

``python bench/peers/agentfleet_scripted.py --json out.json`` with DATABASE_URL (a fresh
database on that server) and BENCH_STUB_URL (the shared stub), as run_all.py sets them.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parents[2]))
sys.path.insert(0, str(Path(__file__).parent))

import itertools

from _args import parse
from _peerdb import fresh_database
from _procstat import CpuMeter
from _stubctl import answer, install_scripts, stepper, stub_url

from agentfleet.auth import TokenStore
from agentfleet.postgres import db
from agentfleet.postgres.migrate import migrate_up
from agentfleet.rpc.clients import open_channel
from agentfleet.testing.services import start_process_stack
from agentfleet.v1 import common_pb2, executor_pb2, executor_pb2_grpc
from bench._common import scratch_folder
from services.executor.registry.definitions import (
    AgentDefinition,
    DefinitionRepository,
    ModelConfig,
)

PROJECT = "bench"


def fanout_parent(marker: str, children: int) -> dict[str, Any]:
    tasks = [
        {"agent_name": "fan-child", "prompt": f"part {i}", "description": f"part {i}"}
        for i in range(children)
    ]
    return {
        "name": marker,
        "match_system": marker,
        "per_conversation": True,
        "replies": [
            {"calls": [{"name": "spawn_agents", "args": {"tasks": tasks}}]},
            {"text": "all parts done"},
        ],
    }


async def prepare(url: str, args: argparse.Namespace) -> tuple[list[str], str]:
    pool = await db.create_pool(url, min_size=1, max_size=2)
    try:
        repo = DefinitionRepository(pool)
        model = ModelConfig(name="stub")
        for name, prompt, tools in (
            ("stepper", "[stepper] use get_entity", ["get_entity"]),
            ("stepper-c", "[stepper-c] use get_entity", ["get_entity"]),
            ("fan-parent", "[fan-parent] split the work", ["spawn_agents"]),
            ("fan-child", "[fan-child] answer", []),
        ):
            await repo.upsert(
                PROJECT,
                AgentDefinition(name=name, system_prompt=prompt, model=model, tools=tools),
            )
        entities = [
            await pool.fetchval(
                "INSERT INTO kb.graph_objects (project_id, type, properties) "
                "VALUES ($1, 'Note', $2) RETURNING id::text",
                PROJECT,
                {"title": f"benchmark {i}"},
            )
            for i in range(16)
        ]
        admin = await TokenStore(pool).create(project_id=PROJECT, role="admin")
        return entities, admin.token
    finally:
        await pool.close()


async def run_agent(api: Any, agent: str, marks: list[float] | None) -> common_pb2.AgentRun:
    """Starts a run and follows its stream; ``marks`` gets the arrival of each tool response."""
    final = None
    async for event in api.StartRun(
        executor_pb2.StartRunRequest(project_id=PROJECT, agent_name=agent, input="go")
    ):
        kind = event.WhichOneof("payload")
        if kind == "tool_response" and marks is not None:
            marks.append(time.perf_counter())
        elif kind == "run_finished":
            final = event.run_finished.run
    assert final is not None, "stream ended without run_finished"
    assert final.status == common_pb2.RUN_STATUS_COMPLETED, final.error_message
    return final


async def measure(url: str, args: argparse.Namespace) -> dict[str, Any]:
    entities, token = await prepare(url, args)
    delay = args.model_delay
    await asyncio.to_thread(
        install_scripts,
        [
            stepper("[stepper]", args.steps, entities, delay),
            stepper("[stepper-c]", args.concurrent_steps, entities, delay),
            fanout_parent("[fan-parent]", args.children),
            # One answer per child conversation, as the peers' children get (a shared
            # one-reply script ran out after the first child: the others retried on 500s).
            answer("[fan-child]"),
        ],
    )
    pool = await db.create_pool(url, min_size=1, max_size=2)
    service = (
        await TokenStore(pool).create(project_id=None, role="service", service="executor")
    ).token
    await pool.close()
    logs = scratch_folder("agentfleet-bench-peer-")
    stack = await start_process_stack(
        database_url=url,
        log_dir=logs,
        names=("toolpool", "executor"),
        environ={
            "AGENTFLEET_SERVICE_TOKEN": service,
            "AGENTFLEET_LOG_LEVEL": "warning",
            "AGENTFLEET_GEMINI_BASE_URL": stub_url(),
            "GEMINI_API_KEY": "bench",
            # Same pool and concurrency as the peers (run_all prints them): the executor
            # runs --agents runs at once, as the peers gather --agents runs.
            "AGENTFLEET_DB_POOL_MAX": str(args.pool_size),
            # (children + parent for the fan-out, which the concurrent part never reaches).
            "AGENTFLEET_EXECUTOR_CONCURRENCY": str(max(args.agents, args.children + 1)),
            "AGENTFLEET_EXECUTOR_BUILTIN_TOOLS": args.builtin_tools,
            # One process, as each peer is: its pid is the one measured.
            "AGENTFLEET_EXECUTOR_PROCESSES": "1",
        },
    )
    out: dict[str, Any] = {
        "system": "agentfleet",
        "builtin_tools": args.builtin_tools,
        "pool_size": args.pool_size,
        "concurrency": args.agents,
    }
    meter = CpuMeter(process.pid for process in stack.processes.values())
    try:
        async with open_channel(stack.addresses["executor"], token=token) as channel:
            api = executor_pb2_grpc.ExecutorServiceStub(channel)
            await run_agent(api, "stepper", None)  # warm-up: connections, caches
            if "single" in args.parts:
                marks: list[float] = []
                began = time.perf_counter()
                await run_agent(api, "stepper", marks)
                out["single_wall_s"] = time.perf_counter() - began
                out["step_s"] = [b - a for a, b in itertools.pairwise(marks)]
                # Every turn but the last called the tool: the stub's script was the one answering.
                assert len(marks) == args.steps - 1, f"{len(marks)} tool steps of {args.steps - 1}"
            if "concurrent" in args.parts:
                meter.start()
                began = time.perf_counter()
                await asyncio.gather(
                    *(run_agent(api, "stepper-c", None) for _ in range(args.agents))
                )
                elapsed = time.perf_counter() - began
                out["cpu"] = meter.stop(args.agents * args.concurrent_steps)
                out["concurrent"] = {
                    "agents": args.agents,
                    "steps_each": args.concurrent_steps,
                    "wall_s": elapsed,
                    "steps_per_s": args.agents * args.concurrent_steps / elapsed,
                }
            if "fanout" in args.parts:
                await run_agent(api, "fan-parent", None)  # warm-up
                walls = []
                pool = await db.create_pool(url, min_size=1, max_size=1)
                try:
                    for _ in range(args.fanout_repeats):
                        began = time.perf_counter()
                        parent = await run_agent(api, "fan-parent", None)
                        walls.append(time.perf_counter() - began)
                        # A refused spawn (over a limit) also completes, fast, and a child
                        # failing still lets the parent complete: count completed children.
                        done = await pool.fetchval(
                            "SELECT count(*) FROM kb.agent_runs WHERE parent_run_id = $1::uuid "
                            "AND status = 'completed'",
                            parent.id,
                        )
                        assert done == args.children, f"{done} of {args.children} completed"
                finally:
                    await pool.close()
                out["fanout"] = {"children": args.children, "wall_s": walls}
    finally:
        await stack.stop(grace_s=5.0)
    where = (
        "tool over gRPC (executor -> toolpool CallTool)"
        if args.builtin_tools == "toolpool"
        else "tool in the executor's process (the toolpool's CallTool code, no hop)"
    )
    out["persisted"] = (
        "per step, two statements: model message + tool call row `started` + run counters +"
        " tool_request event before the tool runs; tool message + call row finished +"
        f" tool_response event after it; {where}"
    )
    return out


async def main(argv: list[str] | None = None) -> None:
    args = parse(__doc__, argv)
    async with fresh_database(args.url, "peer_af") as url:
        await migrate_up(url)
        out = await measure(url, args)
    print(json.dumps({k: v for k, v in out.items() if k != "step_s"}, indent=1))
    if args.json:
        args.json.write_text(json.dumps(out))


if __name__ == "__main__":
    asyncio.run(main())
