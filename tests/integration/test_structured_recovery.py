"""A worker that dies after the model's final answer and before the run ends: the worker
that takes the run over ends it from the stored answer. With an output schema the answer
is checked (and repaired once if it does not fit), so a recovered run still carries its
typed output (issue #19)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest
from google.genai import types

from agentfleet.gemini_stub import GeminiStub, Reply, Script
from agentfleet.llm import ModelReply, TokenUsage
from agentfleet.testing.checks.invariants import assert_invariants
from agentfleet.testing.gemini import model_client_for
from services.executor.queue import RunQueue
from services.executor.registry.definitions import AgentDefinition, DefinitionRepository
from services.executor.registry.model_config import ModelConfig
from services.executor.run_path.loop import AgentLoop, RunControl
from services.executor.runs import RunRecord, StartRunParams
from services.executor.store.persistence import RunRecorder
from services.executor.tools.tool_gateway import InMemoryToolGateway

PROJECT = "structured-recovery"
OWNER = "worker-a"
AGENT = "rater"
SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"score": {"type": "integer"}},
    "required": ["score"],
    "additionalProperties": False,
}


@pytest.fixture
async def loop(db_pool: asyncpg.Pool, gemini_stub: GeminiStub) -> AsyncIterator[AgentLoop]:
    model = model_client_for(gemini_stub, retry=None)
    try:
        yield AgentLoop(
            pool=db_pool,
            definitions=DefinitionRepository(db_pool),
            tools=InMemoryToolGateway(tools={}),
            model=model,
            owner=OWNER,
        )
    finally:
        await model.aclose()


async def _answered_then_died(pool: asyncpg.Pool, answer: str) -> RunRecord:
    """A claimed run whose dead worker stored the opening and the model's final answer."""
    definition = AgentDefinition(
        name=AGENT,
        system_prompt="You rate things.",
        model=ModelConfig(name="gemini-test"),
        tools=[],
        output_schema=SCHEMA,
    )
    stored = await DefinitionRepository(pool).upsert(PROJECT, definition)
    queue = RunQueue(pool)
    await queue.enqueue(
        StartRunParams(
            project_id=PROJECT,
            agent_name=AGENT,
            agent_definition_id=str(stored.definition.id),
            input="Rate WebAssembly.",
        )
    )
    (run,) = await queue.claim_next(OWNER, 30.0)
    dead = RunRecorder(pool, run, owner=OWNER)
    await dead.record_start(
        system_prompt=definition.system_prompt,
        user_input=types.Content(role="user", parts=[types.Part(text=run.input)]),
        model_name="gemini-test",
        tool_names=[],
        trace_id=None,
    )
    content = types.Content(role="model", parts=[types.Part(text=answer)])
    reply = ModelReply(
        content=content,
        text=answer,
        function_calls=(),
        finish_reason="STOP",
        usage=TokenUsage(),
        model_version=None,
        response_id=None,
        attempts=1,
    )
    await dead.record_model_reply(step=1, reply=reply, calls=[])
    return run


async def test_a_stored_answer_that_fits_ends_the_run_with_its_output_and_no_model_call(
    db_pool: asyncpg.Pool, gemini_stub: GeminiStub, loop: AgentLoop
) -> None:
    gemini_stub.add_script(
        Script(name=AGENT, match_system="You rate things.", replies=[Reply(text='{"score": 1}')])
    )
    run = await _answered_then_died(db_pool, json.dumps({"score": 7}))

    finished = await loop.execute(run, RunControl())

    assert finished is not None
    assert (finished.status, finished.output) == ("completed", {"score": 7})
    assert gemini_stub.requests_for(AGENT) == []
    await assert_invariants(db_pool, project_id=PROJECT)


async def test_a_stored_answer_that_does_not_fit_gets_the_one_repair(
    db_pool: asyncpg.Pool, gemini_stub: GeminiStub, loop: AgentLoop
) -> None:
    gemini_stub.add_script(
        Script(name=AGENT, match_system="You rate things.", replies=[Reply(text='{"score": 3}')])
    )
    run = await _answered_then_died(db_pool, "Seven out of ten.")

    finished = await loop.execute(run, RunControl())

    assert finished is not None
    assert (finished.status, finished.output) == ("completed", {"score": 3})
    (repair,) = gemini_stub.requests_for(AGENT)
    assert "Seven out of ten." in json.dumps(repair.body)
    await assert_invariants(db_pool, project_id=PROJECT)
