"""Hostile tenants and hostile remote peers of remote A2A children (issue 33, consume).

Tenants: only admins register (a remote agent receives the project's secrets), a member
sees no literal header value, another project's remote agent is out of reach, header and
URL abuse is refused naming the field, a missing secret is named, not guessed.
Peers (the small a2a-sdk agent of :mod:`agentfleet.testing.a2a_remote`): a card too large,
a redirect loop, a page that is no card are refused at registration; a flood of progress
becomes a bounded number of bounded events, and so does a peer flipping its task's state
without end; a peer asking for input without end fails the child after MAX_INPUT_ROUNDS
answers, and a long question is cut. Another project can neither answer nor cancel a
paused remote child.
All four services in-process, auth on.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import asyncpg
import grpc
import pytest

from agentfleet.gemini_stub import Call, GeminiStub, Reply, Script
from agentfleet.mcp.config import HIDDEN_VALUE
from agentfleet.testing.a2a_remote import RemoteAgentServer
from agentfleet.testing.rpc_errors import rpc_error
from agentfleet.testing.services import Stack
from agentfleet.testing.waiting import wait_for_query
from agentfleet.v1 import (
    common_pb2,
    executor_pb2,
    executor_pb2_grpc,
    registry_pb2,
    registry_pb2_grpc,
)
from services.executor.a2a_client import MAX_RESPONSE_BYTES
from services.executor.remote_runs import (
    MAX_EVENT_CHARS,
    MAX_INPUT_ROUNDS,
    MAX_PROGRESS_EVENTS,
    MAX_STATUS_EVENTS,
)


@pytest.fixture
async def remote() -> AsyncIterator[RemoteAgentServer]:
    async with RemoteAgentServer().serve() as server:
        yield server


def registry(stack: Stack, token: str) -> registry_pb2_grpc.AgentRegistryServiceStub:
    return registry_pb2_grpc.AgentRegistryServiceStub(stack.channel("executor", token=token))


def upsert(project_id: str, name: str, card_url: str, **fields: object):  # type: ignore[no-untyped-def]
    return registry_pb2.UpsertRemoteAgentRequest(
        project_id=project_id,
        remote_agent=registry_pb2.RemoteAgent(name=name, card_url=card_url, **fields),  # type: ignore[arg-type]
    )


async def spawned_child(
    stack: Stack, stub: GeminiStub, pool: asyncpg.Pool, project_id: str, token: str, prompt: str
) -> asyncpg.Record:
    """A coordinator of ``project_id`` spawns agent "echo" with ``prompt``; its child, ended."""
    marker = f"[{project_id}]"
    stub.add_script(
        Script(
            name=marker,
            match_system=marker,
            replies=[
                Reply(
                    calls=[
                        Call("spawn_agents", {"tasks": [{"agent_name": "echo", "prompt": prompt}]})
                    ]
                ),
                Reply(text="Done."),
            ],
        )
    )
    await registry(stack, token).UpsertAgentDefinition(
        registry_pb2.UpsertAgentDefinitionRequest(
            project_id=project_id,
            agent_definition=common_pb2.AgentDefinition(
                name="boss",
                system_prompt=f"boss {marker}",
                model=common_pb2.ModelConfig(name="gemini-e2e"),
                tools=["spawn_agents"],
            ),
        )
    )
    executor = executor_pb2_grpc.ExecutorServiceStub(stack.channel("executor", token=token))
    root = await executor.TriggerRun(
        executor_pb2.StartRunRequest(project_id=project_id, agent_name="boss", input="go")
    )
    await wait_for_query(
        pool,
        "SELECT completed_at IS NOT NULL FROM kb.agent_runs WHERE id = $1::uuid",
        root.id,
        timeout_s=30,
        what="the coordinator to end",
    )
    return await pool.fetchrow(
        "SELECT * FROM kb.agent_runs WHERE parent_run_id = $1::uuid", root.id
    )


async def test_only_admins_register_and_members_see_no_literal_header(
    stub_stack: Stack, remote: RemoteAgentServer
) -> None:
    project = f"remote-sec-{uuid.uuid4().hex[:8]}"
    admin = registry(stub_stack, await stub_stack.create_token(project, "admin"))
    member = registry(stub_stack, await stub_stack.create_token(project, "member"))
    headers = {"Authorization": "Bearer typed-in-literally", "X-Key": "${API_KEY}"}
    for call in (
        member.UpsertRemoteAgent(upsert(project, "echo", remote.card_url)),
        member.DeleteRemoteAgent(
            registry_pb2.DeleteRemoteAgentRequest(project_id=project, name="e")
        ),
    ):
        assert (await rpc_error(call)).code() == grpc.StatusCode.PERMISSION_DENIED
    # The admin's own registration: ${API_KEY} is not set, and the card fetch needs it.
    error = await rpc_error(
        admin.UpsertRemoteAgent(upsert(project, "echo", remote.card_url, headers=headers))
    )
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "project secret not set: ${API_KEY}" in (error.details() or "")
    del headers["X-Key"]
    headers["X-Ref"] = "${API_KEY_TWO}"
    await stub_stack.pool.execute(  # a plain row, as written before encryption: no key needed
        "INSERT INTO kb.project_secrets (project_id, name, value) VALUES ($1, 'API_KEY_TWO', 'v')",
        project,
    )
    await admin.UpsertRemoteAgent(upsert(project, "echo", remote.card_url, headers=headers))
    seen = await member.ListRemoteAgents(registry_pb2.ListRemoteAgentsRequest(project_id=project))
    assert dict(seen.remote_agents[0].headers) == {
        "Authorization": HIDDEN_VALUE,
        "X-Ref": "${API_KEY_TWO}",
    }
    # Another project's token reaches none of it.
    other = registry(stub_stack, await stub_stack.create_token(f"{project}-other", "admin"))
    error = await rpc_error(
        other.ListRemoteAgents(registry_pb2.ListRemoteAgentsRequest(project_id=project))
    )
    assert error.code() == grpc.StatusCode.PERMISSION_DENIED


async def test_another_projects_remote_agent_cannot_be_spawned(
    stub_stack: Stack, gemini_stub: GeminiStub, db_pool: asyncpg.Pool, remote: RemoteAgentServer
) -> None:
    owner = f"remote-own-{uuid.uuid4().hex[:8]}"
    await registry(stub_stack, await stub_stack.create_token(owner, "admin")).UpsertRemoteAgent(
        upsert(owner, "echo", remote.card_url)
    )
    thief = f"remote-thief-{uuid.uuid4().hex[:8]}"
    token = await stub_stack.create_token(thief, "admin")
    child = await spawned_child(stub_stack, gemini_stub, db_pool, thief, token, "answer mine")
    assert child is None  # no child run: the name is no agent of this project
    assert not [h for h in remote.seen_headers.get("/agent/", [])]


@pytest.mark.parametrize(
    ("fields", "field", "why"),
    [
        ({"headers": {"X-A": "ok\r\nX-Injected: 1"}}, "remote_agent.headers[X-A]", "one line"),
        ({"headers": {"Host": "internal"}}, "remote_agent.headers[Host]", "not a header"),
        ({"headers": {"traceparent": "00-x"}}, "remote_agent.headers[traceparent]", "not a header"),
        ({"headers": {"Bad Name": "v"}}, "remote_agent.headers[Bad Name]", "not a header"),
        ({"headers": {"X-A": "${oops"}}, "remote_agent.headers[X-A]", "malformed"),
        ({"headers": {f"X-{i}": "v" for i in range(33)}}, "remote_agent.headers", "at most 32"),
        ({"timeout_s": 90_000.0}, "remote_agent.timeout_s", "(0, 86400]"),
        ({"name": "no spaces"}, "remote_agent.name", "[A-Za-z0-9_.-]"),
        ({"card_url": "file:///etc/passwd"}, "remote_agent.card_url", "http(s) URL"),
        ({"card_url": "http://u:p@127.0.0.1/card"}, "remote_agent.card_url", "credentials"),
        ({"card_url": "http://[::1]/card"}, "remote_agent.card_url", "loopback"),
        ({"card_url": "http://metadata.google.internal/"}, "remote_agent.card_url", "metadata"),
    ],
)
async def test_header_and_url_abuse_is_refused_naming_the_field(
    stub_stack: Stack, fields: dict[str, object], field: str, why: str
) -> None:
    project = f"remote-abuse-{uuid.uuid4().hex[:8]}"
    admin = registry(stub_stack, await stub_stack.create_token(project, "admin"))
    request = {"name": "echo", "card_url": "http://127.0.0.1:9/card", **fields}
    error = await rpc_error(
        admin.UpsertRemoteAgent(
            registry_pb2.UpsertRemoteAgentRequest(
                project_id=project,
                remote_agent=registry_pb2.RemoteAgent(**request),  # type: ignore[arg-type]
            )
        )
    )
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert f"{field}: " in (error.details() or ""), error.details()
    assert why in (error.details() or ""), error.details()
    assert not await stub_stack.pool.fetchval(
        "SELECT count(*) FROM kb.remote_agents WHERE project_id = $1", project
    )


async def test_hostile_cards_are_refused_at_registration(
    stub_stack: Stack, remote: RemoteAgentServer
) -> None:
    project = f"remote-card-{uuid.uuid4().hex[:8]}"
    admin = registry(stub_stack, await stub_stack.create_token(project, "admin"))
    for path, why in (
        ("/huge/card.json", "larger than 262144 bytes"),
        ("/loop", "more than 3 redirects"),
        ("/not-a-card.json", "fetching the agent card"),
        ("/missing", "answered HTTP 404"),
    ):
        error = await rpc_error(
            admin.UpsertRemoteAgent(upsert(project, "echo", remote.base_url + path))
        )
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, path
        assert why in (error.details() or ""), (path, error.details())
    # A name a local definition holds is not taken over.
    await admin.UpsertAgentDefinition(
        registry_pb2.UpsertAgentDefinitionRequest(
            project_id=project,
            agent_definition=common_pb2.AgentDefinition(
                name="local", system_prompt="x", model=common_pb2.ModelConfig(name="gemini-e2e")
            ),
        )
    )
    error = await rpc_error(admin.UpsertRemoteAgent(upsert(project, "local", remote.card_url)))
    assert error.code() == grpc.StatusCode.ALREADY_EXISTS


async def test_a_flooding_remote_agent_gets_bounded_events(
    stub_stack: Stack, gemini_stub: GeminiStub, db_pool: asyncpg.Pool, remote: RemoteAgentServer
) -> None:
    project = f"remote-flood-{uuid.uuid4().hex[:8]}"
    token = await stub_stack.create_token(project, "admin")
    await registry(stub_stack, token).UpsertRemoteAgent(upsert(project, "echo", remote.card_url))
    child = await spawned_child(stub_stack, gemini_stub, db_pool, project, token, "flood 250")
    assert child["status"] == "completed", child["error_message"]
    assert child["summary"] == "flooded"
    texts = await db_pool.fetch(
        "SELECT length(payload->>'text') AS n FROM kb.agent_run_events"
        " WHERE run_id = $1 AND type = 'model_text'",
        child["id"],
    )
    assert len(texts) == MAX_PROGRESS_EVENTS
    assert max(t["n"] for t in texts) == MAX_EVENT_CHARS


async def test_one_endless_event_from_a_remote_agent_is_cut_at_the_response_bound(
    stub_stack: Stack, gemini_stub: GeminiStub, db_pool: asyncpg.Pool, remote: RemoteAgentServer
) -> None:
    """The SDK reads a server-sent event whole: a 12 MB one would sit in the executor's
    memory. The response is cut past MAX_RESPONSE_BYTES and the child fails saying so."""
    project = f"remote-huge-{uuid.uuid4().hex[:8]}"
    token = await stub_stack.create_token(project, "admin")
    await registry(stub_stack, token).UpsertRemoteAgent(upsert(project, "echo", remote.card_url))
    child = await spawned_child(stub_stack, gemini_stub, db_pool, project, token, "huge")
    assert child["status"] == "failed"
    assert f"passed {MAX_RESPONSE_BYTES} bytes" in child["error_message"]


def executor(stack: Stack, token: str) -> executor_pb2_grpc.ExecutorServiceStub:
    return executor_pb2_grpc.ExecutorServiceStub(stack.channel("executor", token=token))


async def answer(
    stack: Stack, token: str, project_id: str, run_id: str, text: str
) -> list[common_pb2.RunEvent]:
    """ResumeRun of the paused child with ``text``: its events until it stops."""
    return [
        e
        async for e in executor(stack, token).ResumeRun(
            executor_pb2.ResumeRunRequest(project_id=project_id, run_id=run_id, input=text)
        )
    ]


async def test_a_peer_asking_without_end_fails_the_child_after_the_bound(
    stub_stack: Stack, gemini_stub: GeminiStub, db_pool: asyncpg.Pool, remote: RemoteAgentServer
) -> None:
    project = f"remote-nag-{uuid.uuid4().hex[:8]}"
    token = await stub_stack.create_token(project, "admin")
    await registry(stub_stack, token).UpsertRemoteAgent(upsert(project, "echo", remote.card_url))
    child = await spawned_child(stub_stack, gemini_stub, db_pool, project, token, "nag")
    run_id = str(child["id"])
    for round_ in range(MAX_INPUT_ROUNDS):
        assert (
            await db_pool.fetchval("SELECT status FROM kb.agent_runs WHERE id = $1", child["id"])
            == "paused"
        ), round_
        await answer(stub_stack, token, project, run_id, f"answer {round_}")
    ended = await db_pool.fetchrow("SELECT * FROM kb.agent_runs WHERE id = $1", child["id"])
    assert ended["status"] == "failed"
    assert ended["error_message"] == (
        f"the remote agent asked for input again after {MAX_INPUT_ROUNDS} answers: which one?"
    )
    task_id = ended["remote_agent"]["task_id"]
    assert len([m for m in remote.messages if m[0] == task_id]) == MAX_INPUT_ROUNDS + 1
    error = await rpc_error(answer(stub_stack, token, project, run_id, "one more"))
    assert error.code() == grpc.StatusCode.FAILED_PRECONDITION


async def test_a_long_question_is_cut(
    stub_stack: Stack, gemini_stub: GeminiStub, db_pool: asyncpg.Pool, remote: RemoteAgentServer
) -> None:
    project = f"remote-long-{uuid.uuid4().hex[:8]}"
    token = await stub_stack.create_token(project, "admin")
    await registry(stub_stack, token).UpsertRemoteAgent(upsert(project, "echo", remote.card_url))
    child = await spawned_child(stub_stack, gemini_stub, db_pool, project, token, "ask 500000")
    assert child["status"] == "paused"
    prefix = "the remote agent asks for input: "
    assert child["summary"] == prefix + ("which one? " + "q" * 500_000)[:MAX_EVENT_CHARS]
    reasons = await db_pool.fetch(
        "SELECT length(payload->>'reason') AS n FROM kb.agent_run_events"
        " WHERE run_id = $1 AND type = 'status_changed'",
        child["id"],
    )
    assert max(r["n"] for r in reasons) <= 2000


async def test_a_peer_flipping_its_state_gets_bounded_status_events(
    stub_stack: Stack, gemini_stub: GeminiStub, db_pool: asyncpg.Pool, remote: RemoteAgentServer
) -> None:
    project = f"remote-flip-{uuid.uuid4().hex[:8]}"
    token = await stub_stack.create_token(project, "admin")
    await registry(stub_stack, token).UpsertRemoteAgent(upsert(project, "echo", remote.card_url))
    child = await spawned_child(stub_stack, gemini_stub, db_pool, project, token, "flip 300")
    assert child["status"] == "completed", child["error_message"]
    assert child["summary"] == "flipped"
    count = await db_pool.fetchval(
        "SELECT count(*) FROM kb.agent_run_events WHERE run_id = $1 AND type = 'remote_status'",
        child["id"],
    )
    assert count == MAX_STATUS_EVENTS


async def test_another_project_cannot_answer_a_paused_remote_child(
    stub_stack: Stack, gemini_stub: GeminiStub, db_pool: asyncpg.Pool, remote: RemoteAgentServer
) -> None:
    project = f"remote-ask-{uuid.uuid4().hex[:8]}"
    token = await stub_stack.create_token(project, "admin")
    await registry(stub_stack, token).UpsertRemoteAgent(upsert(project, "echo", remote.card_url))
    child = await spawned_child(stub_stack, gemini_stub, db_pool, project, token, "ask")
    assert child["status"] == "paused"
    run_id = str(child["id"])
    thief = f"remote-answer-{uuid.uuid4().hex[:8]}"
    thief_token = await stub_stack.create_token(thief, "admin")
    denied = await rpc_error(answer(stub_stack, thief_token, project, run_id, "mine"))
    assert denied.code() == grpc.StatusCode.PERMISSION_DENIED
    missing = await rpc_error(answer(stub_stack, thief_token, thief, run_id, "mine"))
    assert missing.code() == grpc.StatusCode.NOT_FOUND
    # Nor cancel it (which would hand it to an executor to cancel its remote task).
    for project_id, code in (
        (project, grpc.StatusCode.PERMISSION_DENIED),
        (thief, grpc.StatusCode.NOT_FOUND),
    ):
        error = await rpc_error(
            executor(stub_stack, thief_token).CancelRun(
                executor_pb2.CancelRunRequest(project_id=project_id, run_id=run_id)
            )
        )
        assert error.code() == code, project_id
    # Nothing reached the remote task, and the child still waits for its own project.
    task_id = child["remote_agent"]["task_id"]
    assert [m[2] for m in remote.messages if m[0] == task_id] == ["ask"]
    assert task_id not in remote.cancelled
    status = await db_pool.fetchval("SELECT status FROM kb.agent_runs WHERE id = $1", child["id"])
    assert status == "paused"
    events = await answer(stub_stack, token, project, run_id, "the green one")
    assert events[-1].run_finished.run.summary == "you chose the green one"
