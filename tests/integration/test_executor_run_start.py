"""A run start reads its agent definition once (issue #17): StartRun/TriggerRun by name at
enqueue; the worker's claim brings the definition along with the run, so the loop reads none
-- also when the run is claimed by another replica than the one that queued it. And a run's
first execution sends only what it writes (issue #16: per-run round trips)."""

from __future__ import annotations

import asyncio

import asyncpg

from agentfleet.events import ANSWERED_MODEL
from agentfleet.gemini_stub import GeminiStub, Reply, Script
from agentfleet.postgres.db import Listener
from agentfleet.runs.run_watch import RunWatch
from agentfleet.testing.checks.statements import StatementCounter
from agentfleet.testing.gemini import model_client_for
from agentfleet.testing.waiting import wait_for_query
from agentfleet.v1 import executor_pb2
from services.executor.approvals.approval_store import SWEEP_BATCH
from services.executor.queue import RunQueue
from services.executor.registry.definitions import AgentDefinition, DefinitionRepository
from services.executor.registry.model_config import ModelConfig
from services.executor.run_path.loop import AgentLoop
from services.executor.run_server import ExecutorServicer
from services.executor.runs import StartRunParams
from services.executor.store.claim_sql import CLAIM_ANY
from services.executor.store.tool_calls import OVERDUE_RUNS
from services.executor.tools.tool_gateway import InMemoryToolGateway
from services.executor.worker import RunWorker

PROJECT = "proj"
OWNER = "replica-b"


def _definition_reads(counter: StatementCounter) -> list[str]:
    return [s for s in counter.statements if "kb.agent_definitions" in s and s != CLAIM_ANY]


async def _run_across_replicas(
    db_pool: asyncpg.Pool, database_url: str, gemini_stub: GeminiStub
) -> tuple[StatementCounter, StatementCounter]:
    """One run of "helper" (one model reply, no tools) queued by TriggerRun on replica A and
    run by replica B; the statements each replica's pool sent."""
    gemini_stub.add_script(Script(name="helper", replies=[Reply(text="done")]))
    await DefinitionRepository(db_pool).upsert(
        PROJECT,
        AgentDefinition(
            name="helper", system_prompt="You are helper.", model=ModelConfig(name="gemini-test")
        ),
    )
    api, worker = StatementCounter(), StatementCounter()
    api_pool, worker_pool = await api.pool(database_url), await worker.pool(database_url)
    model = model_client_for(gemini_stub)
    stopping = asyncio.Event()
    try:
        async with Listener(database_url) as api_listener, Listener(database_url) as listener:
            # Replica A serves TriggerRun; replica B, its own process as far as the database
            # can tell, runs the run.
            servicer = ExecutorServicer(
                pool=api_pool,
                queue=RunQueue(api_pool),
                definitions=DefinitionRepository(api_pool),
                watch=RunWatch(pool=api_pool, listener=api_listener),
            )
            loop = AgentLoop(
                pool=worker_pool,
                definitions=DefinitionRepository(worker_pool),
                tools=InMemoryToolGateway(tools={}),
                model=model,
                owner=OWNER,
            )
            runner = RunWorker(
                queue=RunQueue(worker_pool), executor=loop, listener=listener, owner=OWNER
            )
            work = asyncio.create_task(runner.run(stopping))
            try:
                run = await servicer.TriggerRun(
                    executor_pb2.StartRunRequest(
                        project_id=PROJECT, agent_name="helper", input="go"
                    ),
                    None,  # type: ignore[arg-type]  # TriggerRun does not use its context
                )
                await wait_for_query(
                    db_pool,
                    "SELECT status = 'completed' FROM kb.agent_runs WHERE id = $1::uuid",
                    run.id,
                )
            finally:
                stopping.set()
                await work
    finally:
        await model.aclose()
        await api_pool.close()
        await worker_pool.close()
    return api, worker


async def test_a_run_start_reads_its_definition_once_across_replicas(
    db_pool: asyncpg.Pool, database_url: str, gemini_stub: GeminiStub
) -> None:
    api, worker = await _run_across_replicas(db_pool, database_url, gemini_stub)

    assert len(_definition_reads(api)) == 1, api.statements  # the enqueue's, by name
    assert CLAIM_ANY in worker.statements
    assert _definition_reads(worker) == [], worker.statements


async def test_the_claim_brings_the_definition_the_repository_reads(db_pool: asyncpg.Pool) -> None:
    """What the loop would have read by id; nothing for a run that names no definition or
    whose definition is gone (the loop then reads by name, or reports it missing)."""
    definitions = DefinitionRepository(db_pool)
    helper = AgentDefinition(
        name="helper",
        system_prompt="You are helper.",
        model=ModelConfig(name="gemini-test", temperature=0.2),
        tools=["echo"],
        config={"note": "kept"},
        output_schema={"type": "object"},
        streaming=True,
    )
    kept = (await definitions.upsert(PROJECT, helper)).definition
    gone = (await definitions.upsert(PROJECT, AgentDefinition(name="gone"))).definition
    queue = RunQueue(db_pool)
    for name, definition_id in (("helper", kept.id), ("gone", gone.id), ("helper", None)):
        await queue.enqueue(
            StartRunParams(
                project_id=PROJECT,
                agent_name=name,
                agent_definition_id=str(definition_id) if definition_id else None,
                input=f"{name} {definition_id is not None}",
            )
        )
    await definitions.delete(PROJECT, "gone")

    claims = {c.run.input: c.definition for c in await queue.claim("w", 30.0, limit=5)}

    assert claims == {
        "helper True": await definitions.get_by_id(PROJECT, kept.id),
        "gone True": None,
        "helper False": None,
    }


async def test_a_run_never_started_before_reads_no_position_and_starts_in_one_statement(
    db_pool: asyncpg.Pool, database_url: str, gemini_stub: GeminiStub
) -> None:
    """A run the claim takes from the queue for its first execution has nothing persisted to
    continue from: the loop does not read its messages and calls (a recovered or resumed run
    does). Its statements: the start (messages, trace and events in one statement), the
    reply (one statement), the finish (one statement: the run row and its events); and, after
    each has committed, their notifications (one send for all three, or up to three). Before
    its model call, the project budget's read (services.executor.model.budgets: one statement
    per call). No transaction block at all."""
    _api, worker = await _run_across_replicas(db_pool, database_url, gemini_stub)

    statements = [s for s in worker.statements if s not in _POLLS and not _setup(s)]
    notifications = [s for s in statements if "pg_notify(channel, payload)" in s]
    assert 1 <= len(notifications) <= 3, statements
    run_statements = [s for s in statements if s not in notifications]
    # The finish names the model of the latest reply (ANSWERED_MODEL); nothing else reads
    # the run's messages.
    reads = [
        s for s in run_statements if "FROM kb.agent_run_messages" in s.replace(ANSWERED_MODEL, "")
    ]
    assert not reads, run_statements
    assert not [s for s in run_statements if "BEGIN" in s], run_statements
    assert len([s for s in run_statements if "kb.project_budgets" not in s]) == 3
    assert len([s for s in run_statements if "LEFT JOIN kb.project_budgets" in s]) == 1


_POLLS = {CLAIM_ANY, OVERDUE_RUNS}
"""What a worker sends whether or not it has runs: its claims and the approval deadline sweep."""


def _setup(statement: str) -> bool:
    # asyncpg's one-time type introspection of a new connection (jit off, typeinfo, jit back)
    return "typeinfo_tree" in statement or "set_config('jit'" in statement


async def _statements_of_claims(database_url: str, claims: int) -> list[str]:
    """The statements one worker's queue sends for ``claims`` claims in a row."""
    counter = StatementCounter()
    pool = await counter.pool(database_url)
    try:
        queue = RunQueue(pool)
        for _ in range(claims):
            await queue.claim(OWNER, 30.0, limit=1)
        return counter.statements
    finally:
        await pool.close()


async def test_claims_apply_approval_deadlines_at_most_once_a_second(database_url: str) -> None:
    """A worker claims after every run queued; the deadline sweep rides on the first claim
    of each APPROVAL_SWEEP_INTERVAL_S, not on every one (a statement per run under load)."""
    statements = await _statements_of_claims(database_url, 5)
    assert statements.count(OVERDUE_RUNS) == 1, statements
    assert statements.count(CLAIM_ANY) == 5


async def test_a_full_sweep_sweeps_again_on_the_next_claim(
    db_pool: asyncpg.Pool, database_url: str
) -> None:
    """A flood of overdue calls (one project's, say) does not wait a second per batch: a
    sweep that found a full batch runs again on the next claim, until one finds fewer."""
    runs = await db_pool.fetch(
        "INSERT INTO kb.agent_runs (project_id, agent_name, input, status, waiting_since) "
        "SELECT $1, 'agent', 'go', 'waiting', now() FROM generate_series(1, $2) "
        "RETURNING id",
        PROJECT,
        SWEEP_BATCH + 1,
    )
    await db_pool.executemany(
        "INSERT INTO kb.agent_run_tool_calls (run_id, tool_call_id, tool_name, "
        "step_number, status, source, input, approval_on_deadline, approval_deadline) "
        "VALUES ($1, 'c1', 'create_entity', 1, 'awaiting_approval', 'builtin', '{}', "
        "'reject', now() - interval '1 second')",
        [(r["id"],) for r in runs],
    )
    statements = await _statements_of_claims(database_url, 3)
    # Full batch, then the one left (fewer: the interval starts), then none.
    assert statements.count(OVERDUE_RUNS) == 2, statements
    left = await db_pool.fetchval(
        "SELECT count(*) FROM kb.agent_run_tool_calls WHERE status = 'awaiting_approval'"
    )
    assert left == 0
