"""The executor service: ExecutorService (runs) and AgentRegistryService (definitions)."""

from __future__ import annotations

import functools
import gc

from agentfleet.bounded.schema_pool import configure_schema_pool, schema_pool
from agentfleet.egress import EgressPolicy
from agentfleet.process.service_runtime import ServiceContext, ServiceParts
from agentfleet.rpc.grpc_server import Registration
from agentfleet.secrets.secrets_crypto import keyring_from
from agentfleet.secrets.values import resolve_secrets
from agentfleet.v1 import (
    executor_pb2,
    executor_pb2_grpc,
    registry_pb2,
    registry_pb2_grpc,
    triggers_pb2,
    triggers_pb2_grpc,
)
from services.executor.a2a_client import egress_policy
from services.executor.model.budgets import BudgetStore
from services.executor.registry.definitions import DefinitionRepository
from services.executor.registry.products import ProductRegistry
from services.executor.registry.remote_agents import RemoteAgentRepository
from services.executor.registry.remote_registry import RemoteAgentRegistry
from services.executor.registry.server import AgentRegistryServicer
from services.executor.run_server import build_executor_parts
from services.executor.triggers.schedules import ScheduleRepository
from services.executor.triggers.server import TriggerServicer

# Installing products and editing definitions changes what runs: administrators only.
REGISTRY_ADMIN_METHODS = (
    "InstallProduct",
    "UninstallProduct",
    "UpsertAgentDefinition",
    "DeleteAgentDefinition",
    # A project's budgets bound what its runs may spend: set by its administrators.
    "SetProjectBudget",
    # A remote agent is a destination the project's secrets are sent to.
    "UpsertRemoteAgent",
    "DeleteRemoteAgent",
)

# Deciding a held tool call lets a run do what its policy says a person must allow first.
EXECUTOR_ADMIN_METHODS = ("DecideToolCall",)


GC_THRESHOLDS = (10_000, 10, 100)
"""The collector's thresholds in the executor (CPython's default: 700, 10, 10). A run's
state lives as long as the run and forms almost no reference cycles: at 1,000 runs in flight
(bench/llm_latency.py, 10,000 steps) the default's 1,800 young, 160 middle and 15 full
collections freed about one object each, cost 0.53 ms of CPU per step (a quarter of the
executor's) and stopped the event loop for up to 320 ms at a time (the full ones, which walk
every run's state). With these, young collections run every 10,000 net allocations (about
10 ms each), full ones seldom, for about 0.1 ms per step; cycles are still freed."""


def settle_heap() -> None:
    """Puts what startup left alive (modules, google-genai, protobuf, pydantic: some 150,000
    objects) out of the garbage collector's reach (``gc.freeze``): a full collection then
    walks only what the runs made since. Each one otherwise walked them all, about 85 ms of
    CPU with the event loop stopped, every couple of hundred steps (bench/executor_steps.py).
    Then sets :data:`GC_THRESHOLDS`, for collections as rare as the runs' heap allows."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


async def build(context: ServiceContext) -> ServiceParts:
    configure_schema_pool(
        workers=context.settings.schema_workers, timeout_s=context.settings.schema_timeout_s
    )
    definitions = DefinitionRepository(context.pool)
    limits = context.settings.trigger_limits
    runs, loops, cleanups = await build_executor_parts(context)
    settle_heap()
    return ServiceParts(
        registrations=[
            Registration.of(
                executor_pb2,
                executor_pb2_grpc,
                "ExecutorService",
                runs,
                admin_methods=EXECUTOR_ADMIN_METHODS,
            ),
            Registration.of(
                registry_pb2,
                registry_pb2_grpc,
                "AgentRegistryService",
                AgentRegistryServicer(
                    ProductRegistry(
                        context.pool,
                        definitions,
                        stdio_allowlist=context.settings.mcp_stdio_allowlist,
                        # The toolpool's save-time URL check, on the product path too.
                        mcp_url_refusal=EgressPolicy(
                            allowed_networks=context.settings.mcp_allowed_networks
                        ).literal_refusal,
                        schedule_min_interval_s=limits.schedule_min_interval_s,
                    ),
                    definitions,
                    BudgetStore(context.pool),
                    RemoteAgentRegistry(
                        repository=RemoteAgentRepository(context.pool),
                        egress=egress_policy(context),
                        secrets=functools.partial(
                            resolve_secrets,
                            context.pool,
                            keyring_from(context.settings.secrets_keys),
                        ),
                    ),
                    schedule_min_interval_s=limits.schedule_min_interval_s,
                ),
                admin_methods=REGISTRY_ADMIN_METHODS,
            ),
            Registration.of(
                triggers_pb2,
                triggers_pb2_grpc,
                "TriggerService",
                TriggerServicer(
                    pool=context.pool,
                    definitions=definitions,
                    schedules=ScheduleRepository(context.pool, context.settings.trigger_limits),
                    limits=context.settings.trigger_limits,
                ),
            ),
        ],
        background=loops,
        on_stop=[*cleanups, schema_pool().aclose],
    )
