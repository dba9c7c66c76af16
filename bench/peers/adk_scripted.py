"""The scripted agent on google-adk: its ``Gemini`` model (google-genai) with ``base_url`` on
the shared stub Gemini server (the runner's, in its own process: the same HTTP round trip as
every system), DatabaseSessionService on the runner's PostgreSQL (SQLAlchemy + asyncpg).

Same shape as ``agentfleet_scripted.py``: ``single`` (one agent, ``--steps`` steps, one tool
call per step; per-step time = gap between consecutive function-response events yielded by
``Runner.run_async``), ``concurrent`` (``--agents`` sessions at once, steps/s) and ``fanout``
(a ``ParallelAgent`` of ``--children`` LlmAgents, each one model call).

Persisted per step: the session events ADK appends (the model's function-call event and the
function-response event, each with the session row update) through SQLAlchemy. The tool is a
Python function returning a dict (no database read, no process hop).

Runs with bench/.peers-venv/bin/python: ``adk_scripted.py --url postgresql://... --json f``.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
import itertools

from _args import parse
from _peerdb import fresh_database, with_driver
from _procstat import CpuMeter
from _stubctl import answer, install_scripts, stepper, stub_url
from google.adk.agents import LlmAgent, ParallelAgent
from google.adk.models.google_llm import Gemini
from google.adk.runners import Runner
from google.adk.sessions import DatabaseSessionService
from google.genai import types

APP = "bench"


def get_entity(id: str) -> dict[str, Any]:
    """Returns the entity with this id."""
    return {"id": id, "type": "Note", "properties": {"title": "benchmark"}}


def model() -> Gemini:
    # The model name is the stub's business only; the stub matches on the instruction.
    return Gemini(model="gemini-2.5-flash", base_url=stub_url())


def agent(marker: str) -> LlmAgent:
    return LlmAgent(
        name="stepper", model=model(), instruction=f"{marker} use get_entity", tools=[get_entity]
    )


async def run_agent(runner: Runner, sessions: Any, marks: list[float] | None) -> None:
    session = await sessions.create_session(app_name=APP, user_id="u", session_id=str(uuid.uuid4()))
    message = types.Content(role="user", parts=[types.Part(text="go")])
    final = False
    async for event in runner.run_async(user_id="u", session_id=session.id, new_message=message):
        if event.get_function_responses() and marks is not None:
            marks.append(time.perf_counter())
        if event.is_final_response():
            final = True
    assert final, "run ended without a final response"


async def measure(url: str, args: Any) -> dict[str, Any]:
    ids = [f"e{i}" for i in range(16)]
    install_scripts(
        [
            stepper("[adk-stepper]", args.steps, ids, args.model_delay),
            stepper("[adk-stepper-c]", args.concurrent_steps, ids, args.model_delay),
            answer("[adk-fan-child]"),
        ]
    )
    sessions = DatabaseSessionService(db_url=with_driver(url, "asyncpg"), pool_size=args.pool_size)
    out: dict[str, Any] = {"system": "adk", "pool_size": args.pool_size, "concurrency": args.agents}
    single = Runner(app_name=APP, agent=agent("[adk-stepper]"), session_service=sessions)
    many = Runner(app_name=APP, agent=agent("[adk-stepper-c]"), session_service=sessions)
    meter = CpuMeter([os.getpid()])
    await run_agent(single, sessions, None)  # warm-up: schema creation, connections
    if "single" in args.parts:
        marks: list[float] = []
        began = time.perf_counter()
        await run_agent(single, sessions, marks)
        out["single_wall_s"] = time.perf_counter() - began
        out["step_s"] = [b - a for a, b in itertools.pairwise(marks)]
        # Every turn but the last called the tool: the stub's script was the one answering.
        assert len(marks) == args.steps - 1, f"{len(marks)} tool steps of {args.steps - 1}"
    if "concurrent" in args.parts:
        meter.start()
        began = time.perf_counter()
        await asyncio.gather(*(run_agent(many, sessions, None) for _ in range(args.agents)))
        elapsed = time.perf_counter() - began
        out["cpu"] = meter.stop(args.agents * args.concurrent_steps)
        out["concurrent"] = {
            "agents": args.agents,
            "steps_each": args.concurrent_steps,
            "wall_s": elapsed,
            "steps_per_s": args.agents * args.concurrent_steps / elapsed,
        }
    if "fanout" in args.parts:
        children = [
            LlmAgent(name=f"child_{i}", model=model(), instruction="[adk-fan-child] answer")
            for i in range(args.children)
        ]
        fan = Runner(
            app_name=APP,
            agent=ParallelAgent(name="fan_parent", sub_agents=children),
            session_service=sessions,
        )
        await run_fan(fan, sessions)  # warm-up
        walls = []
        for _ in range(args.fanout_repeats):
            began = time.perf_counter()
            await run_fan(fan, sessions)
            walls.append(time.perf_counter() - began)
        out["fanout"] = {"children": args.children, "wall_s": walls}
    out["persisted"] = (
        "per step: ADK session events (function call, function response) via SQLAlchemy; "
        "tool is an in-process Python function; model over HTTP (google-genai) to the stub"
    )
    return out


async def run_fan(runner: Runner, sessions: Any) -> None:
    session = await sessions.create_session(app_name=APP, user_id="u", session_id=str(uuid.uuid4()))
    message = types.Content(role="user", parts=[types.Part(text="go")])
    answers = 0
    async for event in runner.run_async(user_id="u", session_id=session.id, new_message=message):
        if event.content and any(p.text for p in event.content.parts or []):
            answers += 1
    assert answers >= 1, "no child answered"


async def main(argv: list[str] | None = None) -> None:
    args = parse(__doc__, argv)
    async with fresh_database(args.url, "peer_adk") as url:
        out = await measure(url, args)
    print(json.dumps({k: v for k, v in out.items() if k != "step_s"}, indent=1))
    if args.json:
        args.json.write_text(json.dumps(out))


if __name__ == "__main__":
    asyncio.run(main())
