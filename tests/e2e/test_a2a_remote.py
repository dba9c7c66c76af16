"""Remote A2A agents as children (issue 33, consume), on real processes: a small remote agent
written with the official a2a-sdk server classes, on 127.0.0.1 in this process, spawned as a
child by a local coordinator (toolpool, history, executor processes; the stub model).

Result, failure, cancel, timeout, the SSRF guard on the card URL, a redirect and the endpoint
a card names, and the secret header: delivered to the remote agent, returned by no RPC.
"""

from __future__ import annotations

import asyncio
import os
import re
import sys
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import grpc
import pytest
import pytest_asyncio
from google.protobuf import json_format
from google.protobuf.struct_pb2 import Struct

from agentfleet.auth import TokenStore
from agentfleet.gemini_stub import Call, GeminiStub, Reply, Script, StubRequest
from agentfleet.postgres import db
from agentfleet.rpc.clients import open_channel
from agentfleet.testing.a2a_remote import RemoteAgentServer
from agentfleet.testing.database import DatabaseFactory
from agentfleet.testing.rpc_errors import rpc_error
from agentfleet.testing.services import (
    NO_METRICS_PORTS,
    TEST_EGRESS_AND_SECRETS,
    ProcessStack,
    create_service_tokens,
    start_process_stack,
)
from agentfleet.testing.stdio_allowlist import TEST_STDIO_ALLOWLIST
from agentfleet.testing.waiting import wait_for, wait_for_query
from agentfleet.v1 import (
    common_pb2,
    executor_pb2,
    executor_pb2_grpc,
    history_pb2,
    history_pb2_grpc,
    registry_pb2,
    registry_pb2_grpc,
    toolpool_pb2,
    toolpool_pb2_grpc,
)

NAMES = ("toolpool", "history", "executor")
SECRET = "s3cr3t-remote-token-" + uuid.uuid4().hex
TRACEPARENT = re.compile(r"00-([0-9a-f]{32})-[0-9a-f]{16}-[0-9a-f]{2}")
T = common_pb2.RunEventType


@dataclass(kw_only=True, slots=True)
class RemoteFleet:
    stack: ProcessStack
    stub: GeminiStub
    pool: Any
    remote: RemoteAgentServer
    channels: list[grpc.aio.Channel]
    executor_env: dict[str, str]
    """What a restarted executor is started with (as start_process_stack gave it)."""

    def channel(self, name: str, token: str) -> grpc.aio.Channel:
        channel = open_channel(self.stack.addresses[name], token=token)
        self.channels.append(channel)
        return channel


@dataclass(kw_only=True, slots=True)
class Project:
    fleet: RemoteFleet
    project_id: str
    token: str

    def registry(self) -> registry_pb2_grpc.AgentRegistryServiceStub:
        return registry_pb2_grpc.AgentRegistryServiceStub(
            self.fleet.channel("executor", self.token)
        )

    def executor(self) -> executor_pb2_grpc.ExecutorServiceStub:
        return executor_pb2_grpc.ExecutorServiceStub(self.fleet.channel("executor", self.token))

    def history(self) -> history_pb2_grpc.HistoryServiceStub:
        return history_pb2_grpc.HistoryServiceStub(self.fleet.channel("history", self.token))

    def toolpool(self) -> toolpool_pb2_grpc.ToolPoolServiceStub:
        return toolpool_pb2_grpc.ToolPoolServiceStub(self.fleet.channel("toolpool", self.token))

    async def register(self, name: str, card_url: str, **fields: Any) -> registry_pb2.RemoteAgent:
        reply = await self.registry().UpsertRemoteAgent(
            registry_pb2.UpsertRemoteAgentRequest(
                project_id=self.project_id,
                remote_agent=registry_pb2.RemoteAgent(name=name, card_url=card_url, **fields),
            )
        )
        return reply.remote_agent

    async def coordinator(self, tasks: list[dict[str, Any]], *, first: list[Call] = ()) -> str:
        """A local agent that spawns ``tasks`` (after ``first`` calls), then answers; the
        root run's id, queued."""
        marker = f"[{self.project_id}]"
        replies = [Reply(calls=list(first))] if first else []
        replies += [Reply(calls=[Call("spawn_agents", {"tasks": tasks})]), Reply(text="Done.")]
        self.fleet.stub.add_script(
            Script(name=f"boss{marker}", match_system=f"boss {marker}", replies=replies)
        )
        await self.registry().UpsertAgentDefinition(
            registry_pb2.UpsertAgentDefinitionRequest(
                project_id=self.project_id,
                agent_definition=common_pb2.AgentDefinition(
                    name="boss",
                    system_prompt=f"boss {marker}",
                    model=common_pb2.ModelConfig(name="gemini-e2e"),
                    tools=["spawn_agents", "list_available_agents"],
                ),
            )
        )
        run = await self.executor().TriggerRun(
            executor_pb2.StartRunRequest(project_id=self.project_id, agent_name="boss", input="go")
        )
        return run.id

    async def child_of(self, root: str) -> dict[str, Any]:
        await wait_for_query(
            self.fleet.pool,
            "SELECT count(*) = 1 FROM kb.agent_runs WHERE parent_run_id = $1::uuid",
            root,
            what="the remote child",
        )
        row = await self.fleet.pool.fetchrow(
            "SELECT * FROM kb.agent_runs WHERE parent_run_id = $1::uuid", root
        )
        return {**dict(row), "id": str(row["id"])}

    async def finished(self, run_id: str) -> common_pb2.AgentRun:
        await wait_for_query(
            self.fleet.pool,
            "SELECT completed_at IS NOT NULL FROM kb.agent_runs WHERE id = $1::uuid",
            run_id,
            timeout_s=30,
            what=f"run {run_id} to end",
        )
        reply = await self.history().GetRun(
            history_pb2.GetRunRequest(project_id=self.project_id, run_id=run_id)
        )
        return reply.run


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def fleet(
    database_factory: DatabaseFactory, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[RemoteFleet]:
    database_url = await database_factory.create_database()
    pool = await db.create_pool(database_url, min_size=1, max_size=4)
    stub = GeminiStub()
    await stub.start()
    environ = {
        "AGENTFLEET_GEMINI_BASE_URL": stub.base_url or "",
        # Short leases: a killed executor's runs are recovered within seconds.
        "AGENTFLEET_EXECUTOR_LEASE_S": "3",
        "AGENTFLEET_EXECUTOR_HEARTBEAT_S": "1",
    }
    tokens = await create_service_tokens(pool, label="e2e")
    stack = await start_process_stack(
        database_url=database_url,
        log_dir=tmp_path_factory.mktemp("a2a-remote"),
        environ=environ,
        names=NAMES,
        service_tokens=tokens,
    )
    executor_env = {
        "DATABASE_URL": database_url,
        "AGENTFLEET_LOG_FORMAT": "json",
        "AGENTFLEET_MCP_STDIO_ALLOWLIST": TEST_STDIO_ALLOWLIST,
        **TEST_EGRESS_AND_SECRETS,
        **NO_METRICS_PORTS,
        **environ,
        "AGENTFLEET_SERVICE_TOKEN": tokens["executor"],
    }
    channels: list[grpc.aio.Channel] = []
    try:
        async with RemoteAgentServer().serve() as remote:
            yield RemoteFleet(
                stack=stack,
                stub=stub,
                pool=pool,
                remote=remote,
                channels=channels,
                executor_env=executor_env,
            )
    finally:
        for channel in channels:
            await channel.close()
        codes = await stack.stop(grace_s=5.0)
        await stub.stop()
        await pool.close()
        await database_factory.drop_database(database_url)
        assert all(code == 0 for code in codes.values()), codes


async def cli(fleet: RemoteFleet, project: Project, *args: str) -> str:
    """``agentfleet ARGS`` against the fleet on the project's token; its output."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "agentfleet.cli.entry",
        *args,
        "--project",
        project.project_id,
        "--token",
        project.token,
        "--executor-addr",
        fleet.stack.addresses["executor"],
        "--history-addr",
        fleet.stack.addresses["history"],
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "COLUMNS": "200"},
    )
    out, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 0, err.decode()
    return out.decode()


async def project_of(fleet: RemoteFleet, prefix: str) -> Project:
    project_id = f"{prefix}-{uuid.uuid4().hex[:8]}"
    created = await TokenStore(fleet.pool).create(project_id=project_id, role="admin", name="e2e")
    return Project(fleet=fleet, project_id=project_id, token=created.token)


async def test_a_remote_child_answers_with_the_secret_header_and_trace_context(
    fleet: RemoteFleet,
) -> None:
    project = await project_of(fleet, "remote-ok")
    await project.toolpool().SetSecret(
        toolpool_pb2.SetSecretRequest(
            project_id=project.project_id, name="REMOTE_TOKEN", value=SECRET
        )
    )
    stored = await project.register(
        "echo", fleet.remote.card_url, headers={"Authorization": "Bearer ${REMOTE_TOKEN}"}
    )
    assert stored.card_name == "remote-echo"
    assert stored.description == "Echoes what it is asked, written with the a2a-sdk."
    assert stored.headers["Authorization"] == "Bearer ${REMOTE_TOKEN}"

    root = await project.coordinator(
        [{"agent_name": "echo", "prompt": "answer forty-two"}],
        first=[Call("list_available_agents", {})],
    )
    child_row = await project.child_of(root)
    child = await project.finished(child_row["id"])
    assert child.status == common_pb2.RUN_STATUS_COMPLETED, child.error_message
    assert child.summary == "forty-two"
    assert dict(child.output) == {"echo": "forty-two"}
    assert child.remote.name == "echo"
    assert child.remote.card_url == fleet.remote.card_url
    assert child.remote.url == f"{fleet.remote.base_url}/agent/"
    assert child.remote.card_name == "remote-echo"
    assert child.remote.task_id
    assert child.remote.context_id
    assert not child.agent_definition_id
    parent = await project.finished(root)
    assert parent.status == common_pb2.RUN_STATUS_COMPLETED, parent.error_message

    # The remote agent got the secret, filled at connect time, and our trace context.
    calls = fleet.remote.seen_headers["/agent/"]
    ours = [h for h in calls if h.get("authorization") == f"Bearer {SECRET}"]
    assert ours, "the remote agent never received the secret header"
    match = TRACEPARENT.fullmatch(ours[-1].get("traceparent", ""))
    assert match is not None, ours[-1]
    assert match.group(1) == child.trace_id

    # The child's own events: its remote progress and answer.
    events = [
        e
        for run_id in (root, child.id)
        async for e in project.history().WatchRun(
            history_pb2.WatchRunRequest(
                project_id=project.project_id, run_id=run_id, include_internal=True
            )
        )
    ]
    texts = [e.model_text.text for e in events if e.run_id == child.id and e.model_text.text]
    assert texts == ["working on it", "forty-two"]
    listed = [
        json_format.MessageToDict(e.tool_response.result)
        for e in events
        if e.run_id == root and e.tool_response.tool_name == "list_available_agents"
    ]
    assert listed, "no list_available_agents response"
    agents = {a["name"]: a for a in listed[0]["output"]["agents"]}
    assert agents["echo"]["flow_type"] == "remote_a2a"
    assert agents["echo"]["remote"]["card_url"] == fleet.remote.card_url

    listed_runs = await project.history().ListRuns(
        history_pb2.ListRunsRequest(project_id=project.project_id, parent_run_id=root)
    )
    assert [(r.id, r.remote.name) for r in listed_runs.runs] == [(child.id, "echo")]
    shown = await cli(fleet, project, "show", child.id)
    assert f"A2A echo at {fleet.remote.base_url}/agent/" in shown
    assert f"remote A2A {fleet.remote.base_url}/agent/" in await cli(fleet, project, "tree", root)
    tree = await project.history().GetRunTree(
        history_pb2.GetRunTreeRequest(project_id=project.project_id, run_id=root)
    )
    remote_nodes = [n for n in tree.nodes if n.remote.name]
    assert [(n.run_id, n.remote.card_url) for n in remote_nodes] == [
        (child.id, fleet.remote.card_url)
    ]

    # No RPC returns the secret's value.
    answers: list[bytes] = [
        (
            await project.registry().ListRemoteAgents(
                registry_pb2.ListRemoteAgentsRequest(project_id=project.project_id)
            )
        ).SerializeToString(),
        stored.SerializeToString(),
        child.SerializeToString(),
        tree.SerializeToString(),
        *(e.SerializeToString() for e in events),
        (
            await project.history().ListRunMessages(
                history_pb2.ListRunMessagesRequest(project_id=project.project_id, run_id=child.id)
            )
        ).SerializeToString(),
        (
            await project.toolpool().ListSecrets(
                toolpool_pb2.ListSecretsRequest(project_id=project.project_id)
            )
        ).SerializeToString(),
    ]
    assert not [a for a in answers if SECRET.encode() in a]


async def test_a_remote_failure_fails_the_child_with_its_reason(fleet: RemoteFleet) -> None:
    project = await project_of(fleet, "remote-fail")
    await project.register("echo", fleet.remote.card_url)
    root = await project.coordinator([{"agent_name": "echo", "prompt": "fail the disk is full"}])
    child = await project.finished((await project.child_of(root))["id"])
    assert child.status == common_pb2.RUN_STATUS_FAILED
    assert "the remote task ended failed: the disk is full" in child.error_message
    parent = await project.finished(root)
    assert parent.status == common_pb2.RUN_STATUS_COMPLETED


async def test_cancelling_the_parent_cancels_the_remote_task(fleet: RemoteFleet) -> None:
    project = await project_of(fleet, "remote-cancel")
    await project.register("echo", fleet.remote.card_url)
    root = await project.coordinator([{"agent_name": "echo", "prompt": "hang"}])
    child_id = (await project.child_of(root))["id"]
    task_id = await wait_for(
        lambda: fleet.pool.fetchval(
            "SELECT remote_agent->>'task_id' FROM kb.agent_runs WHERE id = $1::uuid", child_id
        ),
        "the remote task id on the child",
    )
    await wait_for(lambda: task_id in fleet.remote.hanging, "the remote task to hang")
    await project.executor().CancelRun(
        executor_pb2.CancelRunRequest(project_id=project.project_id, run_id=root)
    )
    child = await project.finished(child_id)
    assert child.status == common_pb2.RUN_STATUS_CANCELLED
    assert task_id in fleet.remote.cancelled
    assert (await project.finished(root)).status == common_pb2.RUN_STATUS_CANCELLED


async def test_a_remote_child_past_its_timeout_fails_and_cancels_the_task(
    fleet: RemoteFleet,
) -> None:
    project = await project_of(fleet, "remote-timeout")
    await project.register("echo", fleet.remote.card_url)
    root = await project.coordinator([{"agent_name": "echo", "prompt": "hang", "timeout_s": 2}])
    child = await project.finished((await project.child_of(root))["id"])
    assert child.status == common_pb2.RUN_STATUS_FAILED
    assert child.error_message == "the remote agent did not finish within 2 s"
    assert child.remote.task_id in fleet.remote.cancelled
    kinds = [
        e.safety.kind
        async for e in project.history().WatchRun(
            history_pb2.WatchRunRequest(project_id=project.project_id, run_id=child.id)
        )
        if e.type == T.RUN_EVENT_TYPE_SAFETY
    ]
    assert kinds == [common_pb2.SAFETY_KIND_TIMEOUT]


async def test_internal_addresses_are_refused_before_connecting(fleet: RemoteFleet) -> None:
    project = await project_of(fleet, "remote-ssrf")
    port = fleet.remote.port
    executor_port = fleet.stack.addresses["executor"].rpartition(":")[2]
    refused = {
        # A literal address outside AGENTFLEET_MCP_ALLOWED_NETWORKS (127.0.0.1/32 here).
        f"http://127.0.0.2:{port}/agent/.well-known/agent-card.json": "127.0.0.2 is a loopback",
        "http://169.254.169.254/latest/meta-data/": "cloud metadata",
        # An allowed card URL that redirects inward: the hop is checked like the first.
        f"{fleet.remote.base_url}/redirect?to=http://10.1.2.3/card": "10.1.2.3 is a private",
        f"{fleet.remote.base_url}/redirect?to=http://127.0.0.1:{executor_port}/": "platform",
    }
    for url, reason in refused.items():
        error = await rpc_error(project.register("inward", url))
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, (url, error)
        message = error.details() or ""
        assert "remote_agent.card_url" in message, (url, message)
        assert reason in message, (url, message)
    assert not await fleet.pool.fetchval(
        "SELECT count(*) FROM kb.remote_agents WHERE project_id = $1", project.project_id
    )

    # A card that names an inward endpoint: the card is fine, the task's connect is refused.
    await project.register("inward", f"{fleet.remote.base_url}/inward/card.json")
    root = await project.coordinator([{"agent_name": "inward", "prompt": "answer hi"}])
    child = await project.finished((await project.child_of(root))["id"])
    assert child.status == common_pb2.RUN_STATUS_FAILED
    assert "refused to connect to 169.254.169.254" in child.error_message, child.error_message


async def test_a_manifest_installs_remote_agents_and_the_cli_manages_them(
    fleet: RemoteFleet,
) -> None:
    project = await project_of(fleet, "remote-manifest")
    manifest = {
        "name": "with-remote",
        "version": "1.0.0",
        "remote_agents": [
            {
                "name": "echo",
                "card_url": fleet.remote.card_url,
                "headers": {"Authorization": "Bearer ${REMOTE_TOKEN}"},
                "timeout_s": 30,
            }
        ],
    }
    await project.registry().InstallProduct(
        registry_pb2.InstallProductRequest(
            project_id=project.project_id, manifest=json_format.ParseDict(manifest, Struct())
        )
    )
    listed = await project.registry().ListRemoteAgents(
        registry_pb2.ListRemoteAgentsRequest(project_id=project.project_id)
    )
    assert [(a.name, a.product_name, a.timeout_s) for a in listed.remote_agents] == [
        ("echo", "with-remote", 30.0)
    ]
    bad = {**manifest, "remote_agents": [{"name": "x", "card_url": "http://10.0.0.7/card"}]}
    error = await rpc_error(
        project.registry().InstallProduct(
            registry_pb2.InstallProductRequest(
                project_id=project.project_id, manifest=json_format.ParseDict(bad, Struct())
            )
        )
    )
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "manifest.remote_agents[0].card_url" in (error.details() or "")

    added = await cli(
        fleet, project, "remote-agent", "add", "other", fleet.remote.card_url, "--timeout", "5"
    )
    assert "registered remote agent other (card: remote-echo)" in added
    table = await cli(fleet, project, "remote-agent", "list")
    assert "echo" in table
    assert "other" in table
    await cli(fleet, project, "remote-agent", "remove", "other")
    assert "other" not in await cli(fleet, project, "remote-agent", "list")


async def test_a_remote_child_recovered_after_a_crash_follows_its_remote_task(
    fleet: RemoteFleet,
) -> None:
    """The executor running a remote child is killed: the next one recovers the child,
    follows the remote task it had started (tasks/get, then subscribe) instead of sending
    the message again, and a cancel still reaches that task."""
    project = await project_of(fleet, "remote-crash")
    await project.register("echo", fleet.remote.card_url)
    root = await project.coordinator([{"agent_name": "echo", "prompt": "hang"}])
    child_id = (await project.child_of(root))["id"]
    task_id = await wait_for(
        lambda: fleet.pool.fetchval(
            "SELECT remote_agent->>'task_id' FROM kb.agent_runs WHERE id = $1::uuid", child_id
        ),
        "the remote task id on the child",
    )
    await wait_for(lambda: task_id in fleet.remote.hanging, "the remote task to hang")
    hanging_before = set(fleet.remote.hanging)

    executor = fleet.stack.processes["executor"]
    executor.kill()
    await executor.wait()
    await fleet.stack.restart("executor", fleet.executor_env)
    await wait_for_query(
        fleet.pool,
        "SELECT count(*) = 1 FROM kb.agent_run_events WHERE run_id = $1::uuid"
        " AND type = 'run_started' AND (payload->>'recovered')::boolean",
        child_id,
        timeout_s=30,
        what="the child recovered by the new executor",
    )
    await project.executor().CancelRun(
        executor_pb2.CancelRunRequest(project_id=project.project_id, run_id=root)
    )
    child = await project.finished(child_id)
    assert child.status == common_pb2.RUN_STATUS_CANCELLED, child.error_message
    assert task_id in fleet.remote.cancelled
    assert set(fleet.remote.hanging) == hanging_before  # no second remote task
    assert child.remote.task_id == task_id


async def test_a_remote_agent_on_the_http_json_binding_answers(fleet: RemoteFleet) -> None:
    """A card offering only HTTP+JSON: the child speaks that binding, on the same guard."""
    project = await project_of(fleet, "remote-rest")
    stored = await project.register("rest", f"{fleet.remote.base_url}/rest/card.json")
    assert stored.card_name == "remote-echo"
    root = await project.coordinator([{"agent_name": "rest", "prompt": "answer over rest"}])
    child = await project.finished((await project.child_of(root))["id"])
    assert child.status == common_pb2.RUN_STATUS_COMPLETED, child.error_message
    assert child.summary == "over rest"
    assert child.remote.url == f"{fleet.remote.base_url}/rest"


async def test_the_parent_answers_a_remote_agent_that_asks_for_input(fleet: RemoteFleet) -> None:
    """The remote task asks "which one?": the child pauses with the question, the parent's
    model answers it with spawn_agents' resume_run_id, the answer goes to the same remote
    task (same task and context id) and the task completes with it."""
    project = await project_of(fleet, "remote-ask")
    await project.register("echo", fleet.remote.card_url)
    outputs: list[dict[str, Any]] = []
    marker = f"[{project.project_id}]"

    def boss(request: StubRequest) -> Reply:
        if request.turn == 0:
            return Reply(
                calls=[Call("spawn_agents", {"tasks": [{"agent_name": "echo", "prompt": "ask"}]})]
            )
        outputs.append(request.function_responses()[-1]["response"]["output"])
        if request.turn == 1:
            paused = outputs[0]["results"][0]
            resume = {
                "agent_name": "echo",
                "prompt": "the blue one",
                "resume_run_id": paused["run_id"],
            }
            return Reply(calls=[Call("spawn_agents", {"tasks": [resume]})])
        return Reply(text="Done.")

    fleet.stub.add_script(Script(name=f"boss{marker}", match_system=f"boss {marker}", policy=boss))
    await project.registry().UpsertAgentDefinition(
        registry_pb2.UpsertAgentDefinitionRequest(
            project_id=project.project_id,
            agent_definition=common_pb2.AgentDefinition(
                name="boss",
                system_prompt=f"boss {marker}",
                model=common_pb2.ModelConfig(name="gemini-e2e"),
                tools=["spawn_agents"],
            ),
        )
    )
    root = await project.executor().TriggerRun(
        executor_pb2.StartRunRequest(project_id=project.project_id, agent_name="boss", input="go")
    )
    parent = await project.finished(root.id)
    assert parent.status == common_pb2.RUN_STATUS_COMPLETED, parent.error_message
    asked, answered = (o["results"][0] for o in outputs)
    assert (asked["status"], asked["summary"]) == (
        "paused",
        "the remote agent asks for input: which one?",
    )
    assert (answered["status"], answered["summary"]) == ("completed", "you chose the blue one")

    child = await project.finished(asked["run_id"])
    assert child.status == common_pb2.RUN_STATUS_COMPLETED
    assert child.resume_count == 1
    sent = [m for m in fleet.remote.messages if m[0] == child.remote.task_id]
    assert sent == [
        (child.remote.task_id, child.remote.context_id, "ask"),
        (child.remote.task_id, child.remote.context_id, "the blue one"),
    ]
    states = [
        e.remote_status.state
        async for e in project.history().WatchRun(
            history_pb2.WatchRunRequest(project_id=project.project_id, run_id=child.id)
        )
        if e.type == T.RUN_EVENT_TYPE_REMOTE_STATUS
    ]
    assert states[:2] == ["submitted", "input_required"]
    assert states[-1] == "completed"
