"""The committed generated code matches the protos, and the protos keep DESIGN §2's contracts."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from google.protobuf.descriptor import Descriptor, FieldDescriptor, ServiceDescriptor

from agentfleet.v1 import (
    dispatcher_pb2,
    executor_pb2,
    history_pb2,
    registry_pb2,
    toolpool_pb2,
)

REPO_ROOT = Path(__file__).resolve().parents[2]
GENERATOR = REPO_ROOT / "protos" / "generate.py"
COMMITTED = REPO_ROOT / "libs" / "agentfleet" / "v1"

SERVICES: dict[str, ServiceDescriptor] = {
    name: module.DESCRIPTOR.services_by_name[name]
    for module, name in [
        (executor_pb2, "ExecutorService"),
        (registry_pb2, "AgentRegistryService"),
        (toolpool_pb2, "ToolPoolService"),
        (dispatcher_pb2, "DispatcherService"),
        (history_pb2, "HistoryService"),
    ]
}

# DESIGN §2, exactly: adding or removing an RPC is a contract change and must update this.
DESIGN_RPCS: dict[str, set[str]] = {
    "ExecutorService": {"StartRun", "TriggerRun", "CancelRun", "ResumeRun", "DecideToolCall"},
    "AgentRegistryService": {
        "InstallProduct",
        "UninstallProduct",
        "ListProducts",
        "ListAgentDefinitions",
        "GetAgentDefinition",
        "UpsertAgentDefinition",
        "DeleteAgentDefinition",
        "SetProjectBudget",
        "GetProjectBudget",
        "UpsertRemoteAgent",
        "ListRemoteAgents",
        "DeleteRemoteAgent",
    },
    "ToolPoolService": {
        "ListTools",
        "ResolveTools",
        "CallTool",
        "UpsertMcpServer",
        "ListMcpServers",
        "DeleteMcpServer",
        "TestMcpServer",
        "SetSecret",
        "ListSecrets",
        "DeleteSecret",
    },
    "DispatcherService": {
        "CreateTaskGraph",
        "AddTasks",
        "GetTaskGraph",
        "ListTaskGraphs",
        "CancelTaskGraph",
        "RetryTask",
        "WatchTaskGraph",
        "ListTaskSessions",
    },
    "HistoryService": {
        "ListRuns",
        "GetRun",
        "ListRunMessages",
        "GetRunMessage",
        "ListRunToolCalls",
        "GetRunToolCall",
        "WatchRun",
        "GetRunTree",
        "GetAgentStats",
        "PruneHistory",
        "SetHistoryRetention",
    },
}

# RPCs whose signature DESIGN §2 fixes; every other RPC uses <Rpc>Request / <Rpc>Response.
DESIGN_SIGNATURES: dict[str, tuple[str, str, bool]] = {
    "StartRun": ("StartRunRequest", "RunEvent", True),
    "TriggerRun": ("StartRunRequest", "AgentRun", False),
    "ResumeRun": ("ResumeRunRequest", "RunEvent", True),
    "WatchRun": ("WatchRunRequest", "RunEvent", True),
    "WatchTaskGraph": ("WatchTaskGraphRequest", "TaskEvent", True),
}

IDEMPOTENT_CREATES = ["StartRun", "TriggerRun", "CreateTaskGraph", "AddTasks", "InstallProduct"]


def all_methods() -> Iterator[tuple[str, str]]:
    for service_name, service in SERVICES.items():
        for method in service.methods:
            yield service_name, method.name


def method(service_name: str, method_name: str):
    return SERVICES[service_name].methods_by_name[method_name]


def field_of(message: Descriptor, name: str) -> FieldDescriptor:
    field = message.fields_by_name.get(name)
    assert field is not None, f"{message.full_name} has no field {name!r}"
    return field


def generated_files(package_dir: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(package_dir.iterdir()) if p.is_file()}


def test_committed_generated_code_is_current(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, str(GENERATOR), "--out", str(tmp_path)],
        check=True,
        capture_output=True,
        cwd=REPO_ROOT,
    )
    fresh = generated_files(tmp_path / "agentfleet" / "v1")
    committed = generated_files(COMMITTED)

    problems = {
        "missing": sorted(fresh.keys() - committed.keys()),
        "extra": sorted(committed.keys() - fresh.keys()),
        "differing": sorted(n for n in fresh.keys() & committed.keys() if fresh[n] != committed[n]),
    }
    stale = {kind: names for kind, names in problems.items() if names}
    assert not stale, f"libs/agentfleet/v1 is stale, run make proto: {stale}"


@pytest.mark.parametrize("service_name", sorted(DESIGN_RPCS))
def test_service_has_exactly_the_design_rpcs(service_name: str) -> None:
    actual = {m.name for m in SERVICES[service_name].methods}
    assert actual == DESIGN_RPCS[service_name]


@pytest.mark.parametrize(("service_name", "method_name"), sorted(all_methods()))
def test_rpc_signature(service_name: str, method_name: str) -> None:
    rpc = method(service_name, method_name)
    request, response, streams = DESIGN_SIGNATURES.get(
        method_name, (f"{method_name}Request", f"{method_name}Response", False)
    )
    assert rpc.input_type.name == request
    assert rpc.output_type.name == response
    assert rpc.server_streaming is streams
    assert rpc.client_streaming is False


@pytest.mark.parametrize(("service_name", "method_name"), sorted(all_methods()))
def test_every_request_names_its_project_first(service_name: str, method_name: str) -> None:
    project_id = field_of(method(service_name, method_name).input_type, "project_id")
    assert project_id.number == 1
    assert project_id.type == FieldDescriptor.TYPE_STRING


@pytest.mark.parametrize(
    ("service_name", "method_name"),
    sorted((s, m) for s, m in all_methods() if m.startswith("List")),
)
def test_list_rpcs_are_paginated(service_name: str, method_name: str) -> None:
    rpc = method(service_name, method_name)
    assert field_of(rpc.input_type, "page_size").type == FieldDescriptor.TYPE_INT32
    assert field_of(rpc.input_type, "page_token").type == FieldDescriptor.TYPE_STRING
    assert field_of(rpc.output_type, "next_page_token").type == FieldDescriptor.TYPE_STRING


@pytest.mark.parametrize("method_name", IDEMPOTENT_CREATES)
def test_idempotent_creates_take_a_request_id(method_name: str) -> None:
    service_name = next(s for s, m in all_methods() if m == method_name)
    request_id = field_of(method(service_name, method_name).input_type, "request_id")
    assert request_id.type == FieldDescriptor.TYPE_STRING


def reachable_messages(root: Descriptor) -> Iterator[Descriptor]:
    """Our messages reachable from root through message fields (map entries skipped)."""
    seen: set[str] = set()
    stack = [root]
    while stack:
        message = stack.pop()
        if message.full_name in seen or not message.full_name.startswith("agentfleet."):
            continue
        seen.add(message.full_name)
        if not message.GetOptions().map_entry:
            yield message
        stack.extend(f.message_type for f in message.fields if f.message_type is not None)


def test_no_response_can_carry_a_secret_value() -> None:
    leaks = [
        f"{service_name}.{method_name}: {message.full_name}"
        for service_name, method_name in all_methods()
        for message in reachable_messages(method(service_name, method_name).output_type)
        if "value" in message.fields_by_name
    ]
    assert not leaks
