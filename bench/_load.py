"""A fixed load of scripted runs queued with TriggerRun, shared by llm_latency.py and
scale_out.py: one agent whose every step is one model call and one ``get_entity`` through
ToolPool, the executor environment that measures the executor (not a project's fairness
caps), and TriggerRun sent as a well-behaved client sends it: a bounded number in flight."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import grpc

from agentfleet.auth import TokenStore
from agentfleet.postgres import db
from agentfleet.v1 import executor_pb2
from services.executor.registry.definitions import (
    AgentDefinition,
    DefinitionRepository,
    ModelConfig,
)

PROJECT = "bench"
ENTITIES = 16
"""Distinct entities the scripted steps read (the executor stops a run repeating a call)."""
IN_FLIGHT = 16
"""TriggerRun RPCs in flight at once, as a well-behaved client bounds them: under the
server's per-connection stream limit (AGENTFLEET_GRPC_MAX_STREAMS_PER_CONNECTION, 100; a
burst of 1,000 on one connection is refused with RST_STREAM REFUSED_STREAM, UNAVAILABLE);
``--in-flight`` raises it (issue #36 measures 64)."""
FINISH_TIMEOUT_S = 600.0
ENDED = ("completed", "failed", "cancelled")


@dataclass(frozen=True, slots=True)
class Seeded:
    entities: list[str]
    admin: str
    """A project admin's token: the client's."""
    service: str
    """The executor's service token (it calls the toolpool with it)."""


async def seed(url: str, agent: str, marker: str, project: str = PROJECT) -> Seeded:
    """The agent (``marker`` in its prompt selects the stub's script), the entities its
    steps read and the tokens, in ``project``."""
    pool = await db.create_pool(url, min_size=1, max_size=2)
    try:
        await DefinitionRepository(pool).upsert(
            project,
            AgentDefinition(
                name=agent,
                system_prompt=f"{marker} use get_entity",
                model=ModelConfig(name="stub"),
                tools=["get_entity"],
            ),
        )
        entities = [
            await pool.fetchval(
                "INSERT INTO kb.graph_objects (project_id, type, properties) "
                "VALUES ($1, 'Note', $2) RETURNING id::text",
                project,
                {"title": f"benchmark {i}"},
            )
            for i in range(ENTITIES)
        ]
        tokens = TokenStore(pool)
        admin = (await tokens.create(project_id=project, role="admin")).token
        service = (await tokens.create(project_id=None, role="service", service="executor")).token
        return Seeded(entities=entities, admin=admin, service=service)
    finally:
        await pool.close()


def executor_environ(
    seeded: Seeded, stub_url: str, *, runs: int, concurrency: int, pool_size: int
) -> dict[str, str]:
    """The executor's (and toolpool's) settings for ``runs`` runs of one project: its
    concurrency and pool as given, the project's fairness caps lifted to ``runs``, one
    process (AGENTFLEET_EXECUTOR_PROCESSES=1)."""
    return {
        # One process per executor (the default, 0, runs a host of a worker per core): the
        # figures are one process's, and its pid the one whose CPU and RSS are read.
        "AGENTFLEET_EXECUTOR_PROCESSES": "1",
        "AGENTFLEET_SERVICE_TOKEN": seeded.service,
        "AGENTFLEET_LOG_LEVEL": "warning",
        "AGENTFLEET_GEMINI_BASE_URL": stub_url,
        "GEMINI_API_KEY": "bench",
        "AGENTFLEET_DB_POOL_MAX": str(pool_size),
        "AGENTFLEET_EXECUTOR_CONCURRENCY": str(concurrency),
        # One project here: its caps on running and queued top-level runs are fairness
        # limits between projects, not the executor's; lifted so the executor is measured.
        "AGENTFLEET_MAX_RUNNING_PER_PROJECT": str(runs),
        "AGENTFLEET_MAX_QUEUED_PER_PROJECT": str(runs + 1),
    }


def request(agent: str, project: str = PROJECT) -> executor_pb2.StartRunRequest:
    return executor_pb2.StartRunRequest(project_id=project, agent_name=agent, input="go")


@dataclass(frozen=True, slots=True)
class Answer:
    """One TriggerRun as the client saw it."""

    run_id: str | None
    """The queued run; None when the call was refused."""
    code: grpc.StatusCode
    sent: float
    """Wall clock (``time.time``) when the call was sent (after its wait for a turn)."""
    latency_s: float
    """From sent to answered."""


async def trigger_each(
    apis: Sequence[Any],
    agent: str,
    runs: int,
    *,
    in_flight: int = IN_FLIGHT,
    project: str = PROJECT,
) -> list[Answer]:
    """Sends ``runs`` TriggerRun, round robin over ``apis`` (one per channel), at most
    ``in_flight`` RPCs at once in all; each answer, a refusal too (its code), in order."""
    gate = asyncio.Semaphore(in_flight)
    message = request(agent, project)

    async def trigger(index: int) -> Answer:
        async with gate:
            sent, began = time.time(), time.perf_counter()
            try:
                run_id, code = (await apis[index].TriggerRun(message)).id, grpc.StatusCode.OK
            except grpc.aio.AioRpcError as exc:
                run_id, code = None, exc.code()
            return Answer(run_id, code, sent, time.perf_counter() - began)

    turns = itertools.islice(itertools.cycle(range(len(apis))), runs)
    return list(await asyncio.gather(*(trigger(i) for i in turns)))


async def trigger_all(
    apis: Sequence[Any], agent: str, runs: int, *, in_flight: int = IN_FLIGHT
) -> dict[str, float]:
    """Queues ``runs`` runs (:func:`trigger_each`); each run's id with the wall clock when
    its own TriggerRun was sent. Any refusal is an error: these loads expect every run."""
    answers = await trigger_each(apis, agent, runs, in_flight=in_flight)
    refused = Counter(a.code.name for a in answers if a.run_id is None)
    if refused:
        raise RuntimeError(f"TriggerRun refused {sum(refused.values())} of {runs}: {refused}")
    return {a.run_id: a.sent for a in answers if a.run_id is not None}


async def wait_finished(pool: Any, ids: Sequence[str]) -> None:
    """Until every run in ``ids`` has ended (polls the database, not 1,000 streams)."""
    deadline = time.monotonic() + FINISH_TIMEOUT_S
    while time.monotonic() < deadline:
        left = await pool.fetchval(
            "SELECT count(*) FROM kb.agent_runs WHERE id = ANY($1::uuid[]) "
            "AND status <> ALL($2::text[])",
            list(ids),
            list(ENDED),
        )
        if left == 0:
            return
        await asyncio.sleep(0.05)
    raise TimeoutError(f"runs not finished after {FINISH_TIMEOUT_S:.0f} s")


async def statuses(pool: Any, ids: Sequence[str]) -> dict[str, int]:
    rows = await pool.fetch(
        "SELECT status, count(*) AS n FROM kb.agent_runs WHERE id = ANY($1::uuid[]) GROUP BY 1",
        list(ids),
    )
    return {r["status"]: r["n"] for r in rows}


SAMPLE_S = 0.01
_BUSY = """
SELECT coalesce(wait_event_type || ':' || wait_event, 'CPU') AS wait, count(*) AS n
FROM pg_stat_activity
WHERE datname = current_database() AND state IN ('active', 'idle in transaction')
  AND pid <> pg_backend_pid() AND backend_type = 'client backend'
GROUP BY 1
"""
_NOTIFY_LOCK_WAITERS = """
SELECT count(*) FROM pg_locks
WHERE locktype = 'object' AND classid = 'pg_database'::regclass AND objid = 0 AND NOT granted
"""
TRANSACTIONS = "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"
COMMITS = "SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint"
"""The next transaction id, which only a transaction that writes takes (reading it takes
none): its growth over a span is the writing transactions (commits to the WAL) in it, in
every database of the server, where TRANSACTIONS also counts every read."""


@dataclass(slots=True)
class Backends:
    """PostgreSQL's client backends of this database, sampled every SAMPLE_S while the load
    runs: how many are busy (in a statement or a transaction: connections the pools hold),
    on what they wait ("CPU": not waiting), and the waiters of the NOTIFY commit lock
    (AccessExclusiveLock on object 0 of pg_database). The sampler's own backend is left
    out of the counts (its CPU is not)."""

    waits: Counter[str] = field(default_factory=Counter)
    busy: list[int] = field(default_factory=list)
    lock_waiters: list[int] = field(default_factory=list)

    async def sample(self, url: str, stop: asyncio.Event) -> None:
        conn = await db.connect(url)
        try:
            while not stop.is_set():
                rows = await conn.fetch(_BUSY)
                for row in rows:
                    self.waits[row["wait"]] += row["n"]
                self.busy.append(sum(row["n"] for row in rows))
                self.lock_waiters.append(int(await conn.fetchval(_NOTIFY_LOCK_WAITERS)))
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), SAMPLE_S)
        finally:
            await conn.close()

    def figures(self) -> dict[str, Any]:
        busy = sorted(self.busy) or [0]
        return {
            "waits": dict(self.waits),
            "samples": len(self.busy),
            "busy_p50": busy[len(busy) // 2],
            "busy_p99": busy[min(len(busy) - 1, round(0.99 * (len(busy) - 1)))],
            "busy_max": busy[-1],
            "lock_waiters_mean": sum(self.lock_waiters) / max(1, len(self.lock_waiters)),
            "lock_waiters_max": max(self.lock_waiters, default=0),
        }


@contextlib.asynccontextmanager
async def sampled_backends(url: str) -> AsyncIterator[Backends]:
    """Samples the backends for the block's duration (read ``figures()`` after it)."""
    found, stop = Backends(), asyncio.Event()
    task = asyncio.create_task(found.sample(url, stop))
    try:
        yield found
    finally:
        stop.set()
        await task
