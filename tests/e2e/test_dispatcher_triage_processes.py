"""Failure triage (issue 37 item 5) on real processes: toolpool, history, executor and
dispatcher started with ``python -m``, the dispatcher with AGENTFLEET_DISPATCHER_TRIAGE_MODEL,
the stub Gemini server in this process answering both the agents and the triage model."""

from __future__ import annotations

from pathlib import Path

import asyncpg

from agentfleet.gemini_stub import GeminiStub
from agentfleet.rpc.clients import open_channel
from agentfleet.testing.services import start_process_stack
from agentfleet.v1 import dispatcher_pb2_grpc
from tests.integration.test_dispatcher_triage import TRIAGE_MODEL, triage_scenario


async def test_triage_on_real_processes(
    database_url: str, db_pool: asyncpg.Pool, gemini_stub: GeminiStub, tmp_path: Path
) -> None:
    stack = await start_process_stack(
        database_url=database_url,
        log_dir=tmp_path,
        names=("toolpool", "history", "executor", "dispatcher"),
        environ={
            "AGENTFLEET_AUTH": "off",
            "AGENTFLEET_GEMINI_BASE_URL": gemini_stub.base_url or "",
            "AGENTFLEET_DISPATCHER_TRIAGE_MODEL": TRIAGE_MODEL,
            "AGENTFLEET_MODEL_MAX_ATTEMPTS": "1",
        },
    )
    channel = open_channel(stack.addresses["dispatcher"])
    try:
        await triage_scenario(
            dispatcher_pb2_grpc.DispatcherServiceStub(channel), db_pool, gemini_stub
        )
    finally:
        await channel.close()
        await stack.stop(grace_s=5)
