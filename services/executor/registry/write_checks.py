"""The write-time checks of definitions and manifests (UpsertAgentDefinition,
InstallProduct), run off the event loop when they may cost.

Checking a schema against the draft 2020-12 metaschema is slow in jsonschema: ~0.5 s for a
64 KiB output_schema, 7.6 s for a 1 MiB manifest of them, which held the executor's loop
(every project's RPCs and runs) as long. So a definition or manifest whose output schemas
pass :data:`INLINE_SCHEMA_BYTES` is checked in :mod:`agentfleet.bounded.schema_pool`, within
:data:`WRITE_CHECK_TIMEOUT_S`; one past it is refused, naming the field. Smaller ones (most:
no output_schema at all) are checked inline: 512 bytes of schema cost about a millisecond,
their expansion included (a 512-byte doubling schema is at most 2^8 nodes).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Collection, Mapping
from concurrent.futures.process import BrokenProcessPool
from typing import Any, TypeVar

from google.protobuf import struct_pb2

from agentfleet.bounded.schema_pool import SchemaCheckTimeout, schema_pool
from agentfleet.errors import FieldViolation, InvalidArgument
from agentfleet.structs import struct_dict
from services.executor.registry.definitions import AgentDefinition
from services.executor.registry.manifest import (
    Manifest,
    definition_violations,
    parse_manifest,
    semantic_violations,
)

INLINE_SCHEMA_BYTES = 512
"""Output schemas (their JSON, all of one request) checked on the event loop."""
INLINE_STRUCT_BYTES = 64 * 1024
"""A manifest's Struct converted to a dict on the event loop (a few ms)."""
WRITE_CHECK_TIMEOUT_S = 15.0
"""Longest the checks of one definition or manifest may take in a worker (a 1 MiB manifest
of 64 KiB output schemas takes ~8 s)."""

T = TypeVar("T")


async def manifest_document(manifest: struct_pb2.Struct) -> dict[str, Any]:
    """The manifest as a dict. ``MessageToDict`` walks a Struct in Python (100,000 empty
    tags, 400 KB: 0.34 s, seconds on a busy host), so a large one is converted in a worker
    from its bytes (decoded in C)."""
    if manifest.ByteSize() <= INLINE_STRUCT_BYTES:
        return struct_dict(manifest)
    try:
        return await schema_pool().run(
            _struct_bytes_to_dict, manifest.SerializeToString(), timeout_s=WRITE_CHECK_TIMEOUT_S
        )
    except (SchemaCheckTimeout, BrokenProcessPool) as exc:
        raise InvalidArgument.for_field("manifest", f"could not be read: {exc}") from exc


def _struct_bytes_to_dict(data: bytes) -> dict[str, Any]:
    return struct_dict(struct_pb2.Struct.FromString(data))


async def checked_definition(definition: AgentDefinition) -> list[FieldViolation]:
    """:func:`~services.executor.registry.manifest.definition_violations`, off the loop
    when its output_schema may cost."""
    return await _checked(
        "agent_definition", [definition.output_schema], definition_violations, definition
    )


async def checked_manifest(document: Mapping[str, Any]) -> Manifest:
    """:func:`~services.executor.registry.manifest.parse_manifest`, off the loop when its
    output schemas may cost; :class:`InvalidArgument` listing every violation."""
    found = await _checked("manifest", _output_schemas(document), _manifest_or_violations, document)
    if isinstance(found, list):
        raise InvalidArgument.for_fields(found)
    return found


async def manifest_semantics(
    manifest: Manifest, project_agents: Collection[str]
) -> list[FieldViolation]:
    """:func:`~services.executor.registry.manifest.semantic_violations` with the project's
    other definitions, off the loop when the manifest's output schemas may cost."""
    check = functools.partial(semantic_violations, project_agents=list(project_agents))
    return await _checked("manifest", [a.output_schema for a in manifest.agents], check, manifest)


def _manifest_or_violations(document: Mapping[str, Any]) -> Manifest | list[FieldViolation]:
    # An InvalidArgument raised in a worker would lose its violations when pickled back.
    try:
        return parse_manifest(document)
    except InvalidArgument as refused:
        return refused.violations


def _output_schemas(document: Mapping[str, Any]) -> list[Any]:
    agents = document.get("agents")
    if not isinstance(agents, list):
        return []
    return [agent.get("output_schema") for agent in agents if isinstance(agent, Mapping)]


async def _checked(field: str, schemas: list[Any], check: Callable[..., T], *args: Any) -> T:
    size = len(json.dumps(schemas, separators=(",", ":"), default=str))
    if size <= INLINE_SCHEMA_BYTES:
        return check(*args)
    try:
        return await schema_pool().run(check, *args, timeout_s=WRITE_CHECK_TIMEOUT_S)
    except SchemaCheckTimeout as exc:
        raise InvalidArgument.for_field(field, f"could not be checked: {exc}") from exc
    except BrokenProcessPool as exc:
        raise InvalidArgument.for_field(
            field, "could not be checked: the checking process died"
        ) from exc
