"""Values a fuzz review found answered with INTERNAL, each now INVALID_ARGUMENT naming its
field: NaN and infinite numbers (in Structs and in plain float fields), run timeouts under a
millisecond, run and task ids in forms uuid.UUID() reads but PostgreSQL does not, WatchRun
after_seq past the int32 seqs. Each is sent over real gRPC to the four services on
loopback, as a project's member or admin would.
"""

from __future__ import annotations

from typing import Any

import asyncpg
import grpc
import pytest
from google.protobuf import duration_pb2, struct_pb2

from agentfleet.graph import GraphRepository
from agentfleet.testing import factories as f
from agentfleet.testing.services import Stack
from agentfleet.v1 import (
    common_pb2,
    dispatcher_pb2,
    dispatcher_pb2_grpc,
    executor_pb2,
    executor_pb2_grpc,
    history_pb2,
    history_pb2_grpc,
    registry_pb2,
    registry_pb2_grpc,
)

P = "alpha"
NON_FINITE = [float("nan"), float("inf"), float("-inf")]


async def finished(call: Any) -> None:
    """Awaits a unary ``call`` or reads a streaming one to its end."""
    if hasattr(call, "__aiter__"):
        async for _ in call:
            pass
    else:
        await call


async def refusal(call: Any) -> str:
    """The details of the INVALID_ARGUMENT ``call`` (unary or streaming) answers."""
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await finished(call)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT, caught.value.details()
    return caught.value.details() or ""


def struct(document: dict[str, Any]) -> struct_pb2.Struct:
    message = struct_pb2.Struct()
    message.update(document)
    return message


@pytest.fixture
async def member(stack: Stack) -> str:
    return await stack.create_token(P, "member")


@pytest.fixture
async def admin(stack: Stack) -> str:
    return await stack.create_token(P, "admin")


# -- F1, F2: NaN and infinities ------------------------------------------------------------


@pytest.mark.parametrize("number", NON_FINITE)
async def test_non_finite_numbers_in_task_properties_are_refused(
    stack: Stack, member: str, number: float
) -> None:
    dispatcher = dispatcher_pb2_grpc.DispatcherServiceStub(
        stack.channel("dispatcher", token=member)
    )
    task = dispatcher_pb2.TaskSpec(
        key="a", title="a", assigned_agent="helper", properties=struct({"deep": [{"x": number}]})
    )
    details = await refusal(
        dispatcher.CreateTaskGraph(
            dispatcher_pb2.CreateTaskGraphRequest(project_id=P, tasks=[task])
        )
    )
    assert details.startswith("tasks[0].properties.")
    assert details.endswith("number_value: must be a finite number")


async def test_non_finite_numbers_in_registry_documents_are_refused(
    stack: Stack, admin: str
) -> None:
    registry = registry_pb2_grpc.AgentRegistryServiceStub(stack.channel("executor", token=admin))
    details = await refusal(
        registry.InstallProduct(
            registry_pb2.InstallProductRequest(
                project_id=P, manifest=struct({"name": "p", "version": float("nan")})
            )
        )
    )
    assert details == "manifest.fields['version'].number_value: must be a finite number"
    for where, definition in {
        "agent_definition.config": common_pb2.AgentDefinition(config=struct({"k": float("inf")})),
        "agent_definition.output_schema": common_pb2.AgentDefinition(
            output_schema=struct({"maximum": float("-inf")})
        ),
        "agent_definition.model.extra": common_pb2.AgentDefinition(
            model=common_pb2.ModelConfig(extra=struct({"top_p": float("nan")}))
        ),
    }.items():
        definition.name, definition.model.name = "helper", "gemini-test"
        details = await refusal(
            registry.UpsertAgentDefinition(
                registry_pb2.UpsertAgentDefinitionRequest(project_id=P, agent_definition=definition)
            )
        )
        assert details.startswith(where + ".fields[")
        assert details.endswith("number_value: must be a finite number")


@pytest.mark.parametrize("number", NON_FINITE)
async def test_a_non_finite_temperature_is_refused(stack: Stack, admin: str, number: float) -> None:
    """A plain float field, not a Struct: json.dumps wrote NaN, which jsonb refuses."""
    registry = registry_pb2_grpc.AgentRegistryServiceStub(stack.channel("executor", token=admin))
    definition = common_pb2.AgentDefinition(
        name="helper", model=common_pb2.ModelConfig(name="gemini-test", temperature=number)
    )
    details = await refusal(
        registry.UpsertAgentDefinition(
            registry_pb2.UpsertAgentDefinitionRequest(project_id=P, agent_definition=definition)
        )
    )
    assert details == "agent_definition.model.temperature: must be a finite number"


async def test_non_finite_tool_call_arguments_are_refused(stack: Stack, admin: str) -> None:
    executor = executor_pb2_grpc.ExecutorServiceStub(stack.channel("executor", token=admin))
    request = executor_pb2.DecideToolCallRequest(
        project_id=P,
        run_id="00000000-0000-0000-0000-000000000001",
        tool_call_id="c1",
        decision=executor_pb2.TOOL_CALL_DECISION_APPROVE,
        arguments=struct({"n": float("nan")}),
    )
    details = await refusal(executor.DecideToolCall(request))
    assert details == "arguments.fields['n'].number_value: must be a finite number"


# -- F3: timeouts under the minimum ----------------------------------------------------------


async def define_helper(stack: Stack, admin: str) -> None:
    registry = registry_pb2_grpc.AgentRegistryServiceStub(stack.channel("executor", token=admin))
    definition = common_pb2.AgentDefinition(
        name="helper", model=common_pb2.ModelConfig(name="gemini-test")
    )
    await registry.UpsertAgentDefinition(
        registry_pb2.UpsertAgentDefinitionRequest(project_id=P, agent_definition=definition)
    )


@pytest.mark.parametrize("nanos", [1, 999, 999_999])
async def test_run_timeouts_under_a_millisecond_are_refused(
    stack: Stack, admin: str, db_pool: asyncpg.Pool, nanos: int
) -> None:
    """PostgreSQL rounded a timeout of nanoseconds to a 0 interval and CHECK (timeout > 0)
    failed; the rule is now 1 ms to 24 h for every run timeout."""
    await define_helper(stack, admin)
    paused = await f.insert_run(db_pool, project_id=P, agent_name="helper", status="paused")
    executor = executor_pb2_grpc.ExecutorServiceStub(stack.channel("executor", token=admin))
    timeout = duration_pb2.Duration(nanos=nanos)
    start = executor_pb2.StartRunRequest(
        project_id=P, agent_name="helper", input="hi", timeout=timeout
    )
    resume = executor_pb2.ResumeRunRequest(
        project_id=P, run_id=str(paused["id"]), input="go on", timeout=timeout
    )
    for call in (executor.StartRun(start), executor.TriggerRun(start), executor.ResumeRun(resume)):
        assert await refusal(call) == "timeout: must be at least 0.001s and at most 86400s"
    assert await db_pool.fetchval("SELECT count(*) FROM kb.agent_runs") == 1


async def test_default_timeouts_follow_the_run_timeout_rule(stack: Stack, admin: str) -> None:
    registry = registry_pb2_grpc.AgentRegistryServiceStub(stack.channel("executor", token=admin))

    def upsert(timeout: duration_pb2.Duration) -> Any:
        definition = common_pb2.AgentDefinition(
            name="helper", model=common_pb2.ModelConfig(name="gemini-test"), default_timeout=timeout
        )
        return registry.UpsertAgentDefinition(
            registry_pb2.UpsertAgentDefinitionRequest(project_id=P, agent_definition=definition)
        )

    for nanos in (1, 999_999):
        details = await refusal(upsert(duration_pb2.Duration(nanos=nanos)))
        assert details.startswith("agent_definition.default_timeout: ")
    stored = await upsert(duration_pb2.Duration(nanos=1_000_000))
    assert stored.agent_definition.default_timeout.ToMilliseconds() == 1


# -- F4: ids uuid.UUID() takes but PostgreSQL does not ------------------------------------


def loose_forms(value: str) -> list[str]:
    """``value`` as uuid.UUID() reads it but asyncpg does not (or not as the same text)."""
    bare = value.replace("-", "")
    return [
        "{" + value + "}",
        "urn:uuid:" + value,
        bare,
        "-".join(bare[i : i + 4] for i in range(0, 32, 4)),
        value + "\n",
    ]


async def test_run_ids_must_be_canonical_uuids(
    stack: Stack, admin: str, db_pool: asyncpg.Pool
) -> None:
    run = await f.insert_run(db_pool, project_id=P, agent_name="helper", status="paused")
    executor = executor_pb2_grpc.ExecutorServiceStub(stack.channel("executor", token=admin))
    for run_id in loose_forms(str(run["id"])):
        calls = {
            "CancelRun": executor.CancelRun(
                executor_pb2.CancelRunRequest(project_id=P, run_id=run_id)
            ),
            "ResumeRun": executor.ResumeRun(
                executor_pb2.ResumeRunRequest(project_id=P, run_id=run_id, input="go on")
            ),
            "DecideToolCall": executor.DecideToolCall(
                executor_pb2.DecideToolCallRequest(
                    project_id=P,
                    run_id=run_id,
                    tool_call_id="c1",
                    decision=executor_pb2.TOOL_CALL_DECISION_APPROVE,
                )
            ),
        }
        for rpc, call in calls.items():
            assert await refusal(call) == "run_id: must be a run id (UUID)", (rpc, run_id)
    assert await db_pool.fetchval("SELECT status FROM kb.agent_runs") == "paused"


async def test_task_ids_of_runs_must_be_canonical_uuids(
    stack: Stack, admin: str, db_pool: asyncpg.Pool
) -> None:
    await define_helper(stack, admin)
    # An existing object: the run's task_id is checked to exist before the run is written.
    task = await GraphRepository(db_pool).create_object(P, type="SpecTask", properties={})
    executor = executor_pb2_grpc.ExecutorServiceStub(stack.channel("executor", token=admin))
    for task_id in loose_forms(task.id):
        start = executor_pb2.StartRunRequest(
            project_id=P, agent_name="helper", input="hi", task_id=task_id
        )
        for call in (executor.StartRun(start), executor.TriggerRun(start)):
            assert await refusal(call) == "task_id: must be a UUID", task_id
    assert await db_pool.fetchval("SELECT count(*) FROM kb.agent_runs") == 0


# -- F8: after_seq past the int32 seqs -----------------------------------------------------


@pytest.mark.parametrize("after_seq", [-1, 2**31, 2**63 - 1])
async def test_watch_run_after_seq_outside_the_seqs_is_refused(
    stack: Stack, member: str, db_pool: asyncpg.Pool, after_seq: int
) -> None:
    run = await f.insert_run(db_pool, project_id=P, agent_name="helper")
    history = history_pb2_grpc.HistoryServiceStub(stack.channel("history", token=member))
    request = history_pb2.WatchRunRequest(project_id=P, run_id=str(run["id"]), after_seq=after_seq)
    assert await refusal(history.WatchRun(request)) == "after_seq: must be 0 to 2147483647"


async def test_watch_run_after_the_last_possible_seq_sends_nothing(
    stack: Stack, member: str, db_pool: asyncpg.Pool
) -> None:
    run = await f.insert_run(db_pool, project_id=P, agent_name="helper")
    history = history_pb2_grpc.HistoryServiceStub(stack.channel("history", token=member))
    request = history_pb2.WatchRunRequest(project_id=P, run_id=str(run["id"]), after_seq=2**31 - 1)
    assert [event async for event in history.WatchRun(request, timeout=10)] == []
