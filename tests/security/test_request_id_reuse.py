"""Attacks on the idempotency keys of mutating RPCs (AIP-155), on the real services with
auth on and the stub Gemini.

A request_id is scoped to the caller's project, so anyone who may call the RPC there can
send one another caller used (guessed, or reused by a client bug). Before, such a call got
the first request's answer whatever it asked -- another person's run (id, input, summary),
graph or install result -- and its own request was silently dropped. Now:

- a request under a used request_id that asks for anything else is refused with
  INVALID_ARGUMENT naming request_id, carries nothing of the first answer, and writes
  nothing (StartRun, TriggerRun, CreateTaskGraph, InstallProduct; ResumeRun, AddTasks and
  DecideToolCall answer alike, tests/integration);
- of concurrent requests under one new request_id that ask different things, one is made
  and every other is refused: none is handed the winner's answer.

(That a request_id of another project is another key is test_isolation's.)
"""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
from google.protobuf import json_format, struct_pb2

from agentfleet.gemini_stub import Reply, Script
from agentfleet.testing.checks.snapshots import table_rows
from agentfleet.testing.rpc_errors import assert_reused_request_id, rpc_error
from agentfleet.testing.waiting import wait_for_query
from agentfleet.v1 import (
    dispatcher_pb2,
    dispatcher_pb2_grpc,
    executor_pb2,
    registry_pb2,
    registry_pb2_grpc,
)
from tests.integration.approval_harness import PROJECT, Deployment, deployment

__all__ = ["deployment"]

SECRET = "the quarterly numbers are down 40%"
TABLES = (
    "agent_runs",
    "agent_run_events",
    "agent_run_messages",
    "agent_run_tool_calls",
    "graph_objects",
    "graph_relationships",
    "products",
    "agent_definitions",
    "product_install_requests",
)


async def _define_reporter(deployment: Deployment) -> None:
    await deployment.define("reporter", system_prompt="You report.")
    deployment.stub.add_script(
        Script(name="reporter", match_system="You report.", policy=lambda _r: Reply(text=SECRET))
    )


def _start(project: str = PROJECT, **fields: Any) -> executor_pb2.StartRunRequest:
    return executor_pb2.StartRunRequest(project_id=project, agent_name="reporter", **fields)


async def test_a_guessed_request_id_gets_nothing_of_the_first_run_and_writes_nothing(
    deployment: Deployment,
) -> None:
    await _define_reporter(deployment)
    victim = await deployment.executor("admin").TriggerRun(
        _start(input="report on Q3", request_id="nightly-report")
    )
    await wait_for_query(
        deployment.pool, "SELECT status = 'completed' FROM kb.agent_runs WHERE id = $1", victim.id
    )
    before = await table_rows(deployment.pool, TABLES)

    attacker = deployment.executor("member")
    mine = _start(input="anything", request_id="nightly-report")
    for call in (attacker.TriggerRun(mine), attacker.StartRun(mine)):
        refused = await rpc_error(call)
        assert_reused_request_id(refused)
        told = refused.details() or ""
        assert victim.id not in told
        assert SECRET not in told
        assert "Q3" not in told
    assert await table_rows(deployment.pool, TABLES) == before


async def test_concurrent_requests_under_one_request_id_never_get_the_winners_answer(
    deployment: Deployment,
) -> None:
    await _define_reporter(deployment)
    executor = deployment.executor("member")
    inputs = [f"report {i}" for i in range(8)]
    outcomes = await asyncio.gather(
        *(executor.TriggerRun(_start(input=i, request_id="race-1")) for i in inputs),
        return_exceptions=True,
    )
    made = [o for o in outcomes if not isinstance(o, BaseException)]
    refused = [o for o in outcomes if isinstance(o, grpc.aio.AioRpcError)]
    assert len(made) == 1, outcomes
    assert len(refused) == len(inputs) - 1, outcomes
    for error in refused:
        assert_reused_request_id(error)
    stored = await deployment.pool.fetch(
        "SELECT id::text, input FROM kb.agent_runs WHERE request_id = 'race-1'"
    )
    assert [(r["id"], r["input"]) for r in stored] == [(made[0].id, made[0].input)]


def _graph(title: str) -> dispatcher_pb2.CreateTaskGraphRequest:
    return dispatcher_pb2.CreateTaskGraphRequest(
        project_id=PROJECT,
        title=title,
        tasks=[dispatcher_pb2.TaskSpec(key="a", title="do a", assigned_agent="reporter")],
        request_id="graph-1",
        validate_only=True,
    )


async def test_a_guessed_request_id_gets_no_graph_nor_install_result(
    deployment: Deployment,
) -> None:
    await _define_reporter(deployment)
    token = deployment.tokens["admin"]
    dispatcher = dispatcher_pb2_grpc.DispatcherServiceStub(
        deployment.stack.channel("dispatcher", token=token)
    )
    registry = registry_pb2_grpc.AgentRegistryServiceStub(
        deployment.stack.channel("executor", token=token)
    )
    first = _graph("the board's plan")
    first.validate_only = False
    graph = (await dispatcher.CreateTaskGraph(first)).task_graph
    manifest = {"name": "kit", "version": "1.0.0", "agents": []}
    installed = await registry.InstallProduct(_install(manifest))
    before = await table_rows(deployment.pool, ("products", "product_install_requests"))

    for validate_only in (False, True):
        guess = _graph("mine")
        guess.validate_only = validate_only
        refused = await rpc_error(dispatcher.CreateTaskGraph(guess))
        assert_reused_request_id(refused)
        assert graph.id not in (refused.details() or "")
        other = await rpc_error(
            registry.InstallProduct(
                _install({**manifest, "version": "6.6.6"}, validate_only=validate_only)
            )
        )
        assert_reused_request_id(other)
        assert installed.product.version not in (other.details() or "")
    assert await table_rows(deployment.pool, ("products", "product_install_requests")) == before
    titles = await deployment.pool.fetch(
        "SELECT properties ->> 'title' AS title FROM kb.graph_objects WHERE type = 'TaskGraph'"
    )
    assert [t["title"] for t in titles] == ["the board's plan"]


def _install(manifest: dict[str, Any], **fields: Any) -> registry_pb2.InstallProductRequest:
    return registry_pb2.InstallProductRequest(
        project_id=PROJECT,
        manifest=json_format.ParseDict(manifest, struct_pb2.Struct()),
        request_id="install-1",
        **fields,
    )
