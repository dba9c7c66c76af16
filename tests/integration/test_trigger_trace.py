"""A triggered run joins the writer's trace (issue 32): the outbox row carries the W3C
traceparent of the span that wrote the event (a run's graph tool, an EmitEvent RPC), and the
run it starts is a child of that span, in that trace. On an in-process stack (toolpool and
executor, the stub model) whose spans the ``spans`` fixture records."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import asyncpg
import grpc
import pytest
from google.protobuf import struct_pb2
from opentelemetry import trace
from opentelemetry.trace import SpanKind

from agentfleet.gemini_stub import Call, GeminiStub, Reply, Script
from agentfleet.graph import GraphRepository
from agentfleet.testing.services import Stack, start_stack
from agentfleet.testing.waiting import wait_for_query
from agentfleet.v1 import executor_pb2, executor_pb2_grpc, triggers_pb2, triggers_pb2_grpc
from services.executor.registry.definitions import AgentDefinition, DefinitionRepository
from services.executor.registry.model_config import ModelConfig

P = "traced"


@dataclass(frozen=True, kw_only=True, slots=True)
class Fleet:
    stack: Stack
    token: str

    @property
    def pool(self) -> asyncpg.Pool:
        return self.stack.pool

    def channel(self) -> grpc.aio.Channel:
        return self.stack.channel("executor", token=self.token)


@pytest.fixture
async def fleet(database_url: str, db_pool: asyncpg.Pool) -> AsyncIterator[Fleet]:
    stub = GeminiStub()
    await stub.start()
    for name, replies in (
        (
            "writer",
            [
                Reply(calls=[Call("create_entity", {"type": "Document", "properties": {}})]),
                Reply(text="written"),
            ],
        ),
        ("summarizer", [Reply(text="summarized")]),
        ("listener", [Reply(text="heard")]),
    ):
        stub.add_script(
            Script(
                name=name,
                match_system=f"You are {name}.",
                replies=replies,
                per_conversation=True,
            )
        )
    stack = await start_stack(
        database_url=database_url,
        pool=db_pool,
        environ={"AGENTFLEET_GEMINI_BASE_URL": stub.base_url or ""},
        names=("toolpool", "executor"),
    )
    definitions = DefinitionRepository(db_pool)
    for name, fields in (
        ("writer", {"tools": ["create_entity"]}),
        ("summarizer", {"trigger": "on_document_ingested"}),
        ("listener", {"trigger": "on_event:ping"}),
    ):
        definition = AgentDefinition(
            name=name,
            system_prompt=f"You are {name}.",
            model=ModelConfig(name="gemini-2.5-flash"),
            **fields,  # type: ignore[arg-type]
        )
        await definitions.upsert(P, definition)
    token = await stack.create_token(P, "member")
    try:
        yield Fleet(stack=stack, token=token)
    finally:
        await stack.close()
        await stub.stop()


async def completed(pool: asyncpg.Pool, agent: str) -> asyncpg.Record:
    await wait_for_query(
        pool,
        "SELECT count(*) = 1 FROM kb.agent_runs WHERE project_id = $1 AND agent_name = $2"
        " AND status = 'completed'",
        P,
        agent,
    )
    row = await pool.fetchrow(
        "SELECT * FROM kb.agent_runs WHERE project_id = $1 AND agent_name = $2", P, agent
    )
    assert row is not None
    return row


def span_named(spans: Any, name: str) -> Any:
    found = [s for s in spans.get_finished_spans() if s.name == name]
    assert len(found) == 1, [s.name for s in spans.get_finished_spans()]
    return found[0]


async def test_a_run_triggered_by_a_runs_graph_write_is_in_the_writers_trace(
    fleet: Fleet, spans: Any
) -> None:
    executor = executor_pb2_grpc.ExecutorServiceStub(fleet.channel())
    await executor.TriggerRun(
        executor_pb2.StartRunRequest(project_id=P, agent_name="writer", input="go")
    )
    writer = await completed(fleet.pool, "writer")
    triggered = await completed(fleet.pool, "summarizer")
    await wait_for_query(
        fleet.pool, "SELECT count(*) = 0 FROM kb.trigger_outbox WHERE consumed_at IS NULL"
    )
    # The write happened in the writer's tool span (the innermost, where the tool ran): the
    # event names it...
    stored = await fleet.pool.fetchval("SELECT traceparent FROM kb.trigger_outbox")
    _, trace_hex, span_hex, _ = stored.split("-")
    (tool,) = [s for s in spans.get_finished_spans() if s.context.span_id == int(span_hex, 16)]
    assert tool.name == "execute_tool create_entity"
    # ...and the triggered run is below it, in the writer's trace.
    assert (
        triggered["trace_id"] == writer["trace_id"] == trace_hex == f"{tool.context.trace_id:032x}"
    )
    assert triggered["trace_parent"] == stored
    run_span = span_named(spans, "invoke_agent summarizer")
    assert run_span.context.trace_id == tool.context.trace_id
    assert run_span.parent.span_id == tool.context.span_id


async def test_a_run_an_event_starts_is_in_the_emitters_trace(fleet: Fleet, spans: Any) -> None:
    triggers = triggers_pb2_grpc.TriggerServiceStub(fleet.channel())
    payload = struct_pb2.Struct()
    payload.update({"text": "hi"})
    with trace.get_tracer("test").start_as_current_span("emitter") as emitter:
        await triggers.EmitEvent(
            triggers_pb2.EmitEventRequest(
                project_id=P, name="ping", payload=payload, request_id="e1"
            )
        )
    run = await completed(fleet.pool, "listener")
    trace_id = emitter.get_span_context().trace_id
    assert run["trace_id"] == f"{trace_id:032x}"
    (server,) = [
        s
        for s in spans.get_finished_spans()
        if s.name == "/agentfleet.v1.TriggerService/EmitEvent" and s.kind == SpanKind.SERVER
    ]
    assert server.context.trace_id == trace_id
    run_span = span_named(spans, "invoke_agent listener")
    assert run_span.context.trace_id == trace_id
    assert run_span.parent.span_id == server.context.span_id


async def test_an_untraced_write_starts_a_run_in_a_trace_of_its_own(
    fleet: Fleet, spans: Any
) -> None:
    # Plain SQL (or any writer outside a span) names no span: the run starts its own trace.
    await GraphRepository(fleet.pool).create_object(P, type="Document", properties={})
    run = await completed(fleet.pool, "summarizer")
    assert await fleet.pool.fetchval("SELECT traceparent FROM kb.trigger_outbox") is None
    assert run["trace_parent"] is None
    run_span = span_named(spans, "invoke_agent summarizer")
    assert run_span.parent is None
