"""External agents over A2A (issue 33, Serve): the official a2a-sdk client against the a2a
service on real processes (toolpool, history, executor, a2a), auth on, on the stub model."""

from __future__ import annotations

import asyncio
import sys
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import httpx
import pytest
import pytest_asyncio
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.types import a2a_pb2 as a2a
from a2a.types import a2a_pb2_grpc
from a2a.utils.errors import InvalidParamsError, TaskNotFoundError
from google.protobuf import json_format
from google.protobuf.struct_pb2 import Value

from agentfleet.auth import TokenStore
from agentfleet.gemini_stub import Call, GeminiStub, Reply, Script
from agentfleet.postgres import db
from agentfleet.rpc.clients import open_channel
from agentfleet.testing.database import DatabaseFactory
from agentfleet.testing.services import ProcessStack, create_service_tokens, start_process_stack
from agentfleet.testing.waiting import wait_for, wait_for_query
from agentfleet.v1 import common_pb2, registry_pb2, registry_pb2_grpc

NAMES = ("toolpool", "history", "executor", "a2a")


@dataclass(kw_only=True, slots=True)
class A2AFleet:
    stack: ProcessStack
    stub: GeminiStub
    pool: object

    async def project(self, prefix: str) -> tuple[str, str]:
        project_id = f"{prefix}-{uuid.uuid4().hex[:8]}"
        created = await TokenStore(self.pool).create(  # type: ignore[arg-type]
            project_id=project_id, role="admin", name="e2e"
        )
        return project_id, created.token

    async def define(
        self,
        project_id: str,
        token: str,
        name: str,
        *,
        system_prompt: str,
        visibility: int = common_pb2.VISIBILITY_EXTERNAL,
        description: str = "",
        tools: tuple[str, ...] = (),
        config: dict | None = None,
        max_steps: int | None = None,
        output_schema: dict | None = None,
    ) -> None:
        definition = common_pb2.AgentDefinition(
            name=name,
            description=description,
            system_prompt=system_prompt,
            model=common_pb2.ModelConfig(name="gemini-e2e"),
            visibility=visibility,  # type: ignore[arg-type]
            tools=list(tools),
            max_steps=max_steps,
        )
        if config:
            definition.config.update(config)
        if output_schema:
            definition.output_schema.update(output_schema)
        async with open_channel(self.stack.addresses["executor"], token=token) as channel:
            await registry_pb2_grpc.AgentRegistryServiceStub(channel).UpsertAgentDefinition(
                registry_pb2.UpsertAgentDefinitionRequest(
                    project_id=project_id, agent_definition=definition
                )
            )

    def agent_url(self, project_id: str, agent: str) -> str:
        return f"{self.stack.a2a_url}/{project_id}/agents/{agent}/"


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def fleet(
    database_factory: DatabaseFactory, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[A2AFleet]:
    database_url = await database_factory.create_database()
    pool = await db.create_pool(database_url, min_size=1, max_size=4)
    stub = GeminiStub()
    await stub.start()
    stack = await start_process_stack(
        database_url=database_url,
        log_dir=tmp_path_factory.mktemp("a2a"),
        environ={"AGENTFLEET_GEMINI_BASE_URL": stub.base_url or ""},
        names=NAMES,
        service_tokens=await create_service_tokens(pool, label="e2e"),
    )
    try:
        async with httpx.AsyncClient() as http:

            async def http_up() -> bool:
                reply = await http.get(f"{stack.a2a_url}/p/agents")
                return reply.status_code == 401

            await wait_for(http_up, "the A2A HTTP port", transient=(httpx.TransportError,))
        yield A2AFleet(stack=stack, stub=stub, pool=pool)
    finally:
        codes = await stack.stop(grace_s=5.0)
        await stub.stop()
        await pool.close()
        await database_factory.drop_database(database_url)
        assert all(code == 0 for code in codes.values()), codes


def user_message(text: str, **fields: str) -> a2a.SendMessageRequest:
    return a2a.SendMessageRequest(
        message=a2a.Message(
            message_id=uuid.uuid4().hex, role=a2a.ROLE_USER, parts=[a2a.Part(text=text)], **fields
        )
    )


@pytest_asyncio.fixture(loop_scope="session")
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=30) as client:
        yield client


async def client_for(fleet: A2AFleet, project_id: str, agent: str, token: str, *, streaming: bool):  # type: ignore[no-untyped-def]
    """The SDK's card discovery, then the SDK client the card describes."""
    http = httpx.AsyncClient(timeout=30, headers={"authorization": f"Bearer {token}"})
    card = await A2ACardResolver(http, fleet.agent_url(project_id, agent)).get_agent_card()
    return card, ClientFactory(ClientConfig(httpx_client=http, streaming=streaming)).create(card)


async def answering_agent(fleet: A2AFleet, answer: str, **reply: float) -> tuple[str, str, str]:
    project_id, token = await fleet.project("a2a")
    marker = f"[{project_id}]"
    fleet.stub.add_script(
        Script(name=marker, match_system=marker, replies=[Reply(text=answer, **reply)])
    )
    await fleet.define(
        project_id,
        token,
        "helper",
        system_prompt=f"You help. SECRET-PROMPT {marker}",
        description="Answers questions briefly.",
    )
    return project_id, token, "helper"


async def last_task(responses: AsyncIterator[a2a.StreamResponse]) -> tuple[a2a.Task, list]:
    seen = []
    task = None
    async with asyncio.timeout(30):
        async for response in responses:
            seen.append(response)
            if response.HasField("task"):
                task = response.task
    assert task is not None, seen
    return task, seen


async def test_card_send_and_get(fleet: A2AFleet) -> None:
    project_id, token, agent = await answering_agent(fleet, "Forty-two.")
    card, client = await client_for(fleet, project_id, agent, token, streaming=False)
    assert card.name == "helper"
    assert card.description == "Answers questions briefly."
    assert card.capabilities.streaming
    assert "bearer" in card.security_schemes
    assert card.supported_interfaces[0].url == fleet.agent_url(project_id, agent)

    task, _ = await last_task(client.send_message(user_message("What is it?")))
    assert task.status.state == a2a.TASK_STATE_COMPLETED
    assert [p.text for a in task.artifacts for p in a.parts if a.name == "answer"] == ["Forty-two."]
    fetched = await client.get_task(a2a.GetTaskRequest(id=task.id))
    assert fetched.status.state == a2a.TASK_STATE_COMPLETED
    assert fetched.context_id == task.context_id
    assert fetched.context_id
    await client.close()


async def test_stream_to_the_end_then_resubscribe(fleet: A2AFleet) -> None:
    project_id, token, agent = await answering_agent(fleet, "Streamed answer.", delay_s=0.2)
    _, client = await client_for(fleet, project_id, agent, token, streaming=True)
    updates = []
    task_id = ""
    async with asyncio.timeout(30):
        async for response in client.send_message(user_message("Go")):
            updates.append(response)
            if response.HasField("task"):
                task_id = response.task.id
    states = [u.status_update.status.state for u in updates if u.HasField("status_update")]
    assert states[-1] == a2a.TASK_STATE_COMPLETED, updates
    assert a2a.TASK_STATE_WORKING in states
    answers = [
        p.text
        for u in updates
        if u.HasField("artifact_update")
        for p in u.artifact_update.artifact.parts
    ]
    assert answers == ["Streamed answer."]

    replay = []
    async with asyncio.timeout(30):
        async for response in client.subscribe(a2a.SubscribeToTaskRequest(id=task_id)):
            replay.append(response)
    assert replay[0].task.status.state == a2a.TASK_STATE_COMPLETED
    assert [p.text for a in replay[0].task.artifacts for p in a.parts] == ["Streamed answer."]
    await client.close()


async def test_cancel_a_running_task(fleet: A2AFleet) -> None:
    project_id, token, agent = await answering_agent(fleet, "never", hang=True)
    _, client = await client_for(fleet, project_id, agent, token, streaming=False)
    request = user_message("Take your time")
    request.configuration.return_immediately = True
    task, _ = await last_task(client.send_message(request))
    assert task.status.state in (a2a.TASK_STATE_SUBMITTED, a2a.TASK_STATE_WORKING)

    await client.cancel_task(a2a.CancelTaskRequest(id=task.id))

    async def cancelled() -> bool:
        got = await client.get_task(a2a.GetTaskRequest(id=task.id))
        return got.status.state == a2a.TASK_STATE_CANCELED

    await wait_for(cancelled, "the task cancelled", timeout_s=30)
    await client.close()


async def test_refusals(fleet: A2AFleet, http: httpx.AsyncClient) -> None:
    project_id, token, agent = await answering_agent(fleet, "Hidden.")
    other_project, other_token = await fleet.project("other")
    card_url = fleet.agent_url(project_id, agent) + ".well-known/agent-card.json"
    assert (await http.get(card_url)).status_code == 401
    assert (await http.get(card_url, headers={"authorization": "Bearer nope"})).status_code == 401
    refused = await http.get(card_url, headers={"authorization": f"Bearer {other_token}"})
    assert refused.status_code == 403
    no_token = await http.post(
        fleet.agent_url(project_id, agent),
        json={"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {}},
    )
    assert no_token.status_code == 401

    # A project agent that is not external is not reachable at all.
    await fleet.define(
        project_id,
        token,
        "inner",
        system_prompt="internal only",
        visibility=common_pb2.VISIBILITY_PROJECT,
    )
    headers = {"authorization": f"Bearer {token}"}
    inner_url = fleet.agent_url(project_id, "inner")
    assert (
        await http.get(inner_url + ".well-known/agent-card.json", headers=headers)
    ).status_code == 404
    sent = await http.post(
        inner_url,
        headers=headers,
        json={"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "x"}},
    )
    assert sent.status_code == 404
    index = (await http.get(f"{fleet.stack.a2a_url}/{project_id}/agents", headers=headers)).json()
    assert [a["name"] for a in index["agents"]] == ["helper"]

    # Another project's task is not found, even through an external agent of the same name.
    _, client = await client_for(fleet, project_id, agent, token, streaming=False)
    task, _ = await last_task(client.send_message(user_message("hi")))
    await fleet.define(other_project, other_token, "helper", system_prompt="other")
    _, other_client = await client_for(fleet, other_project, "helper", other_token, streaming=False)
    with pytest.raises(TaskNotFoundError):
        await other_client.get_task(a2a.GetTaskRequest(id=task.id))
    with pytest.raises(TaskNotFoundError):
        await other_client.cancel_task(a2a.CancelTaskRequest(id=task.id))
    await client.close()
    await other_client.close()


async def test_input_required_then_resumed_through_an_approval(fleet: A2AFleet) -> None:
    project_id, token = await fleet.project("a2a-approve")
    marker = f"[{project_id}]"
    fleet.stub.add_script(
        Script(
            name=marker,
            match_system=marker,
            replies=[
                Reply(calls=[Call("create_entity", {"type": "Note", "key": "n1"})]),
                Reply(text="Noted."),
            ],
        )
    )
    await fleet.define(
        project_id,
        token,
        "noter",
        system_prompt=f"You take notes. {marker}",
        tools=("create_entity",),
        config={"approvals": {"rules": [{"tools": ["create_entity"], "deadline_s": 3600}]}},
    )
    _, client = await client_for(fleet, project_id, "noter", token, streaming=False)
    task, _ = await last_task(client.send_message(user_message("Note this")))
    assert task.status.state == a2a.TASK_STATE_INPUT_REQUIRED, task
    assert "approve" in task.status.message.parts[0].text

    # A plain text reply is refused: the task waits for a decision, not for text.
    with pytest.raises(InvalidParamsError, match="approval"):
        await last_task(client.send_message(user_message("please", task_id=task.id)))

    decision = a2a.SendMessageRequest(
        message=a2a.Message(
            message_id=uuid.uuid4().hex,
            task_id=task.id,
            role=a2a.ROLE_USER,
            parts=[a2a.Part(data=json_format.ParseDict({"decision": "approve"}, Value()))],
        )
    )
    resumed, _ = await last_task(client.send_message(decision))
    assert resumed.id == task.id
    assert resumed.status.state == a2a.TASK_STATE_COMPLETED, resumed
    assert [p.text for a in resumed.artifacts for p in a.parts] == ["Noted."]
    await client.close()


async def test_the_readme_a2a_example_works_as_written(fleet: A2AFleet) -> None:
    readme = (Path(__file__).parents[2] / "README.md").read_text()
    section = readme.split("## Agents for other systems (A2A)", 1)[1]
    script = section.split("<<'PY'\n", 1)[1].split("\nPY\n", 1)[0]
    project_id, token, agent = await answering_agent(fleet, "Use PostgreSQL.")
    demo_url = "http://127.0.0.1:50055/demo/agents/research-assistant/"
    assert demo_url in script
    script = script.replace(demo_url, fleet.agent_url(project_id, agent))
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        script,
        token,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 0, err.decode()
    lines = out.decode().splitlines()
    assert lines[0] == "helper - Answers questions briefly."
    assert "status: TASK_STATE_WORKING" in lines
    assert lines[-2:] == ["Use PostgreSQL.", "status: TASK_STATE_COMPLETED"]


async def test_cancel_reaches_the_whole_tree_and_a_child_is_no_task(fleet: A2AFleet) -> None:
    project_id, token = await fleet.project("a2a-tree")
    marker = f"[{project_id}]"
    tasks = [{"agent_name": "sleeper", "prompt": f"wait {i}"} for i in range(2)]
    fleet.stub.add_script(
        Script(
            name=f"boss{marker}",
            match_system=f"boss {marker}",
            replies=[Reply(calls=[Call("spawn_agents", {"tasks": tasks})])],
        )
    )
    fleet.stub.add_script(
        Script(
            name=f"sleeper{marker}", match_system=f"sleeper {marker}", replies=[Reply(hang=True)]
        )
    )
    await fleet.define(
        project_id, token, "boss", system_prompt=f"boss {marker}", tools=("spawn_agents",)
    )
    await fleet.define(
        project_id,
        token,
        "sleeper",
        system_prompt=f"sleeper {marker}",
        visibility=common_pb2.VISIBILITY_PROJECT,
    )
    _, client = await client_for(fleet, project_id, "boss", token, streaming=False)
    request = user_message("Delegate")
    request.configuration.return_immediately = True
    task, _ = await last_task(client.send_message(request))
    await wait_for_query(
        fleet.pool,
        "SELECT count(*) = 2 FROM kb.agent_runs WHERE parent_run_id = $1 AND status = 'running'",
        task.id,
    )
    child = await fleet.pool.fetchval(  # type: ignore[attr-defined]
        "SELECT id::text FROM kb.agent_runs WHERE parent_run_id = $1 LIMIT 1", task.id
    )
    # A child run is not a task of the agent: only top-level runs are.
    with pytest.raises(TaskNotFoundError):
        await client.get_task(a2a.GetTaskRequest(id=child))

    cancelled = await client.cancel_task(a2a.CancelTaskRequest(id=task.id))
    assert cancelled.id == task.id
    await wait_for_query(
        fleet.pool,
        "SELECT bool_and(status = 'cancelled') AND count(*) = 3 FROM kb.agent_runs"
        " WHERE root_run_id = $1",
        task.id,
    )
    got = await client.get_task(a2a.GetTaskRequest(id=task.id))
    assert got.status.state == a2a.TASK_STATE_CANCELED
    await client.close()


async def test_a_paused_task_is_input_required_and_a_message_resumes_it(fleet: A2AFleet) -> None:
    project_id, token = await fleet.project("a2a-pause")
    member = (
        await TokenStore(fleet.pool).create(  # type: ignore[arg-type]
            project_id=project_id, role="member", name="e2e"
        )
    ).token
    marker = f"[{project_id}]"
    fleet.stub.add_script(
        Script(
            name=marker,
            match_system=marker,
            replies=[
                Reply(calls=[Call("create_entity", {"type": "Note", "key": "p1"})]),
                Reply(text="Partial summary."),
                Reply(text="Finished after resume."),
            ],
        )
    )
    await fleet.define(
        project_id,
        token,
        "stepper",
        system_prompt=f"You step. {marker}",
        tools=("create_entity",),
        max_steps=1,
    )
    # A member token may send, as it may start runs.
    _, client = await client_for(fleet, project_id, "stepper", member, streaming=True)
    first = None
    states = []
    async with asyncio.timeout(30):
        async for response in client.send_message(user_message("Start")):
            if response.HasField("status_update"):
                states.append(response.status_update.status.state)
            if response.HasField("task"):
                first = response.task
    assert states[-1] == a2a.TASK_STATE_INPUT_REQUIRED, states
    assert first is not None

    resumed_states = []
    answers = []
    async with asyncio.timeout(30):
        async for response in client.send_message(
            user_message("Carry on", task_id=first.id, context_id=first.context_id)
        ):
            if response.HasField("status_update"):
                resumed_states.append(response.status_update.status.state)
            if response.HasField("artifact_update"):
                answers += [p.text for p in response.artifact_update.artifact.parts]
    assert resumed_states[-1] == a2a.TASK_STATE_COMPLETED, resumed_states
    assert answers == ["Finished after resume."]
    await client.close()


async def test_the_v0_3_method_names_are_served(fleet: A2AFleet, http: httpx.AsyncClient) -> None:
    project_id, token, agent = await answering_agent(fleet, "Old clients welcome.")
    reply = await http.post(
        fleet.agent_url(project_id, agent),
        headers={"authorization": f"Bearer {token}"},
        json={
            "jsonrpc": "2.0",
            "id": 7,
            "method": "message/send",
            "params": {
                "message": {
                    "kind": "message",
                    "messageId": uuid.uuid4().hex,
                    "role": "user",
                    "parts": [{"kind": "text", "text": "hello"}],
                }
            },
        },
    )
    result = reply.json()["result"]
    assert result["status"]["state"] == "completed", result
    assert result["artifacts"][0]["parts"][0]["text"] == "Old clients welcome."


async def test_a_structured_output_is_the_output_artifact(fleet: A2AFleet) -> None:
    project_id, token = await fleet.project("a2a-typed")
    marker = f"[{project_id}]"
    answer = '{"title": "Use PostgreSQL", "score": 9}'
    fleet.stub.add_script(
        Script(name=marker, match_system=marker, replies=[Reply(text=answer), Reply(text=answer)])
    )
    await fleet.define(
        project_id,
        token,
        "typed",
        system_prompt=f"You are typed. {marker}",
        output_schema={
            "type": "object",
            "properties": {"title": {"type": "string"}, "score": {"type": "integer"}},
            "required": ["title", "score"],
        },
    )
    _, client = await client_for(fleet, project_id, "typed", token, streaming=False)
    task, _ = await last_task(client.send_message(user_message("Decide")))
    assert task.status.state == a2a.TASK_STATE_COMPLETED, task
    artifacts = {a.name: a for a in task.artifacts}
    assert set(artifacts) == {"answer", "output"}
    (part,) = artifacts["output"].parts
    assert part.media_type == "application/json"
    assert json_format.MessageToDict(part.data) == {"title": "Use PostgreSQL", "score": 9}
    await client.close()


async def test_a_callers_trace_context_is_the_runs_trace(fleet: A2AFleet) -> None:
    """W3C trace context in: the traceparent of the A2A request is the trace the run joins."""
    project_id, token, agent = await answering_agent(fleet, "Traced.")
    trace_id = uuid.uuid4().hex
    http = httpx.AsyncClient(
        timeout=30,
        headers={
            "authorization": f"Bearer {token}",
            "traceparent": f"00-{trace_id}-{uuid.uuid4().hex[:16]}-01",
        },
    )
    card = await A2ACardResolver(http, fleet.agent_url(project_id, agent)).get_agent_card()
    client = ClientFactory(ClientConfig(httpx_client=http, streaming=False)).create(card)
    task, _ = await last_task(client.send_message(user_message("Traced?")))
    assert task.status.state == a2a.TASK_STATE_COMPLETED
    stored = await fleet.pool.fetchval(  # type: ignore[attr-defined]
        "SELECT trace_id FROM kb.agent_runs WHERE id = $1::uuid", task.id
    )
    assert stored == trace_id
    await client.close()


async def test_the_grpc_binding_sends_and_refuses_like_json_rpc(fleet: A2AFleet) -> None:
    """The card's GRPC interface (tenant = project/agent) with the SDK's gRPC client."""
    for streaming in (False, True):
        project_id, token, agent = await answering_agent(fleet, "Over gRPC.")
        card, _ = await client_for(fleet, project_id, agent, token, streaming=False)
        grpc_interface = [i for i in card.supported_interfaces if i.protocol_binding == "GRPC"]
        assert [i.tenant for i in grpc_interface] == [f"{project_id}/{agent}"]
        target = grpc_interface[0].url
        config = ClientConfig(
            streaming=streaming,
            supported_protocol_bindings=["GRPC"],
            grpc_channel_factory=lambda url, token=token: open_channel(url, token=token),
        )
        client = ClientFactory(config).create(card)
        task, seen = await last_task(client.send_message(user_message("Which binding?")))
        if streaming:
            states = [u.status_update.status.state for u in seen if u.HasField("status_update")]
            assert states[-1] == a2a.TASK_STATE_COMPLETED, seen
            artifacts = [u.artifact_update.artifact for u in seen if u.HasField("artifact_update")]
        else:
            assert task.status.state == a2a.TASK_STATE_COMPLETED
            artifacts = list(task.artifacts)
        answers = [p.text for a in artifacts for p in a.parts if a.name == "answer"]
        assert answers == ["Over gRPC."]
        fetched = await client.get_task(a2a.GetTaskRequest(id=task.id))
        assert fetched.status.state == a2a.TASK_STATE_COMPLETED
        await client.close()

    other_id, other_token = await fleet.project("a2a-grpc-other")
    refusals = {
        # no token, another project's token, a tenant that is no agent, a bad tenant
        (f"{project_id}/{agent}", ""): grpc.StatusCode.UNAUTHENTICATED,
        (f"{project_id}/{agent}", other_token): grpc.StatusCode.PERMISSION_DENIED,
        (f"{project_id}/nobody", token): grpc.StatusCode.NOT_FOUND,
        ("no-slash", token): grpc.StatusCode.INVALID_ARGUMENT,
    }
    for (tenant, bearer), code in refusals.items():
        async with open_channel(target, token=bearer or None) as channel:
            stub = a2a_pb2_grpc.A2AServiceStub(channel)
            request = a2a.GetTaskRequest(tenant=tenant, id=str(uuid.uuid4()))
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await stub.GetTask(request)
            assert caught.value.code() == code, (tenant, caught.value)
    assert other_id
