"""Hostile callers of the a2a service's HTTP side (issue 33): bodies are bounded before they
are parsed, the card never carries the system prompt, and only external agents answer.

The service's real Starlette app on the in-process stack's executor and history, through
httpx's ASGI transport."""

from __future__ import annotations

from collections.abc import AsyncIterator

import asyncpg
import httpx
import pytest
from a2a.utils.constants import VERSION_HEADER

from agentfleet.a2a_settings import A2ASettings
from agentfleet.gemini_stub import GeminiStub, Reply, Script
from agentfleet.testing.services import Stack, free_port, start_stack
from agentfleet.v1 import common_pb2, registry_pb2, registry_pb2_grpc
from services.a2a.app import build_app
from services.a2a.backend import Backend

P = "a2a-sec"
LIMIT = 4096
PROMPT = "SYSTEM-PROMPT-NEVER-SHOWN-7f3a"


@pytest.fixture
async def a2a_http(stack: Stack) -> AsyncIterator[tuple[httpx.AsyncClient, str]]:
    backend = Backend(stack.settings)
    app = build_app(backend, A2ASettings(max_body_bytes=LIMIT))
    token = await stack.create_token(P, "admin")
    registry = registry_pb2_grpc.AgentRegistryServiceStub(stack.channel("executor", token=token))
    for name, visibility in (
        ("outside", common_pb2.VISIBILITY_EXTERNAL),
        ("inside", common_pb2.VISIBILITY_PROJECT),
        ("plumbing", common_pb2.VISIBILITY_INTERNAL),
    ):
        await registry.UpsertAgentDefinition(
            registry_pb2.UpsertAgentDefinitionRequest(
                project_id=P,
                agent_definition=common_pb2.AgentDefinition(
                    name=name,
                    description=f"The {name} agent.",
                    system_prompt=PROMPT,
                    model=common_pb2.ModelConfig(name="gemini-2.5-flash"),
                    tools=["create_entity"],
                    visibility=visibility,
                ),
            )
        )
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(
        transport=transport,
        base_url="http://a2a.test",
        headers={"authorization": f"Bearer {token}", VERSION_HEADER: "1.0"},
    ) as client:
        yield client, token
    await backend.close()


def send_body(text: str) -> dict[str, object]:
    return {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "SendMessage",
        "params": {"message": {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": text}]}},
    }


async def test_a_body_over_the_limit_is_refused_before_parsing_and_runs_nothing(
    a2a_http: tuple[httpx.AsyncClient, str], db_pool: asyncpg.Pool
) -> None:
    client, _ = a2a_http
    url = f"/{P}/agents/outside/"
    huge = send_body("x" * (LIMIT * 4))
    refused = await client.post(url, json=huge)
    assert refused.status_code == 413
    assert str(LIMIT) in refused.json()["error"]

    # Without a Content-Length (chunked), the reader stops at the limit all the same.
    async def chunks() -> AsyncIterator[bytes]:
        for _ in range(64):
            yield b" " * 1024

    chunked = await client.post(url, content=chunks(), headers={"content-type": "application/json"})
    assert chunked.status_code == 413
    assert await db_pool.fetchval("SELECT count(*) FROM kb.agent_runs") == 0


async def test_the_card_never_shows_the_system_prompt(
    a2a_http: tuple[httpx.AsyncClient, str],
) -> None:
    client, _ = a2a_http
    reply = await client.get(f"/{P}/agents/outside/.well-known/agent-card.json")
    assert reply.status_code == 200
    card = reply.json()
    assert card["name"] == "outside"
    assert card["description"] == "The outside agent."
    assert [s["name"] for s in card["skills"]] == ["outside", "create_entity"]
    assert PROMPT not in reply.text
    assert "gemini-2.5-flash" not in reply.text


@pytest.mark.parametrize("agent", ["inside", "plumbing", "missing"])
async def test_agents_that_are_not_external_are_not_served(
    a2a_http: tuple[httpx.AsyncClient, str], db_pool: asyncpg.Pool, agent: str
) -> None:
    client, _ = a2a_http
    card = await client.get(f"/{P}/agents/{agent}/.well-known/agent-card.json")
    assert card.status_code == 404
    assert PROMPT not in card.text
    sent = await client.post(f"/{P}/agents/{agent}/", json=send_body("hello"))
    assert sent.status_code == 404
    assert await db_pool.fetchval("SELECT count(*) FROM kb.agent_runs") == 0
    index = await client.get(f"/{P}/agents")
    assert [a["name"] for a in index.json()["agents"]] == ["outside"]


async def test_a_member_token_of_another_project_is_refused(
    a2a_http: tuple[httpx.AsyncClient, str], stack: Stack
) -> None:
    client, _ = a2a_http
    other = await stack.create_token("someone-else", "member")
    headers = {"authorization": f"Bearer {other}"}
    card = await client.get(f"/{P}/agents/outside/.well-known/agent-card.json", headers=headers)
    assert card.status_code == 403
    index = await client.get(f"/{P}/agents", headers=headers)
    assert index.status_code == 403
    sent = await client.post(f"/{P}/agents/outside/", json=send_body("hi"), headers=headers)
    assert sent.status_code == 403


def rpc(method: str, params: dict[str, object]) -> dict[str, object]:
    return {"jsonrpc": "2.0", "id": 3, "method": method, "params": params}


@pytest.mark.parametrize(
    "part",
    [{"url": "http://169.254.169.254/latest/meta-data"}, {"raw": "aGVsbG8="}],
)
async def test_file_parts_are_refused_naming_the_field_and_run_nothing(
    a2a_http: tuple[httpx.AsyncClient, str], db_pool: asyncpg.Pool, part: dict[str, str]
) -> None:
    client, _ = a2a_http
    message = {"messageId": "m2", "role": "ROLE_USER", "parts": [{"text": "see"}, part]}
    reply = await client.post(
        f"/{P}/agents/outside/", json=rpc("SendMessage", {"message": message})
    )
    error = reply.json()["error"]
    assert error["code"] == -32602  # invalid params
    assert "message.parts" in error["message"]
    assert await db_pool.fetchval("SELECT count(*) FROM kb.agent_runs") == 0


@pytest.mark.parametrize("task_id", ["not-a-uuid", "00000000-0000-0000-0000-000000000000", "'; --"])
async def test_unknown_task_ids_are_task_not_found(
    a2a_http: tuple[httpx.AsyncClient, str], task_id: str
) -> None:
    client, _ = a2a_http
    for method in ("GetTask", "CancelTask"):
        reply = await client.post(f"/{P}/agents/outside/", json=rpc(method, {"id": task_id}))
        assert reply.json()["error"]["code"] == -32001, (method, reply.text)  # task not found


async def test_the_streams_per_token_cap_applies_to_a2a_streams(
    database_url: str,
    db_pool: asyncpg.Pool,
    gemini_stub: GeminiStub,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each A2A stream (and each blocking send) holds a WatchRun on the caller's token, so
    AGENTFLEET_MAX_STREAMS_PER_TOKEN bounds what one token holds open through this service."""
    http_port = free_port()
    monkeypatch.setenv("AGENTFLEET_A2A_HTTP_PORT", str(http_port))
    stack = await start_stack(
        database_url=database_url,
        pool=db_pool,
        names=("toolpool", "history", "executor", "a2a"),
        environ={
            "AGENTFLEET_GEMINI_BASE_URL": gemini_stub.base_url or "",
            "AGENTFLEET_MAX_STREAMS_PER_TOKEN": "1",
        },
    )
    try:
        token = await stack.create_token(P, "admin")
        registry = registry_pb2_grpc.AgentRegistryServiceStub(
            stack.channel("executor", token=token)
        )
        await registry.UpsertAgentDefinition(
            registry_pb2.UpsertAgentDefinitionRequest(
                project_id=P,
                agent_definition=common_pb2.AgentDefinition(
                    name="slow",
                    system_prompt="slow [cap]",
                    model=common_pb2.ModelConfig(name="gemini-2.5-flash"),
                    visibility=common_pb2.VISIBILITY_EXTERNAL,
                ),
            )
        )
        gemini_stub.add_script(Script(name="cap", match_system="[cap]", replies=[Reply(hang=True)]))
        headers = {"authorization": f"Bearer {token}", VERSION_HEADER: "1.0"}
        url = f"http://127.0.0.1:{http_port}/{P}/agents/slow/"
        async with httpx.AsyncClient(timeout=30, headers=headers) as client:
            started = await client.post(
                url,
                json=rpc(
                    "SendMessage",
                    {
                        "message": {
                            "messageId": "c1",
                            "role": "ROLE_USER",
                            "parts": [{"text": "go"}],
                        },
                        "configuration": {"returnImmediately": True},
                    },
                ),
            )
            task_id = started.json()["result"]["task"]["id"]
            subscribe = rpc("SubscribeToTask", {"id": task_id})
            async with client.stream("POST", url, json=subscribe) as first:
                lines = first.aiter_lines()
                async for line in lines:
                    if line.startswith("data:"):
                        break  # the task; its WatchRun is open now
                second = await client.post(url, json=subscribe)
                assert "MAX_STREAMS_PER_TOKEN" in second.text, second.text
    finally:
        await stack.close()
