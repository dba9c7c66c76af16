"""History retention attacks, on the real history service with auth on (issue #36).

- A member may count what retention would delete (dry run) but not delete it, nor change
  how long the project keeps its history: PERMISSION_DENIED, nothing deleted.
- An admin of one project cannot prune or set another project's history (the token's
  project is checked); pruning its own never touches another project's rows, even when the
  other project's rows are older and its own retention is shorter; the same for trigger
  firings, which PruneHistory counts and deletes with the runs.
- Hostile values: a negative or huge keep_days or max_runs is INVALID_ARGUMENT naming the
  field.
- A service identity (the dispatcher's) may call neither RPC.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import asyncpg
import grpc
import pytest

from agentfleet.auth import TokenStore
from agentfleet.testing.services import Stack, start_stack
from agentfleet.v1 import history_pb2, history_pb2_grpc
from tests.integration.retention_rows import finished_tree, surviving

PROJECT = "tenant-a"
OTHER = "tenant-b"


@dataclass(kw_only=True, slots=True)
class Deployment:
    stack: Stack
    tokens: dict[str, str] = field(default_factory=dict)

    def history(self, caller: str) -> history_pb2_grpc.HistoryServiceStub:
        channel = self.stack.channel("history", token=self.tokens[caller])
        return history_pb2_grpc.HistoryServiceStub(channel)


@pytest.fixture
async def deployment(database_url: str, db_pool: asyncpg.Pool) -> AsyncIterator[Deployment]:
    environ = {
        "AGENTFLEET_HISTORY_RETENTION_DAYS": "30",
        # No background pass during the test: every deletion is one the test asked for.
        "AGENTFLEET_HISTORY_PRUNE_INTERVAL_S": "86400",
    }
    stack = await start_stack(
        database_url=database_url, pool=db_pool, environ=environ, names=("history",)
    )
    try:
        deployment = Deployment(stack=stack)
        deployment.tokens["member"] = await stack.create_token(PROJECT, "member")
        deployment.tokens["admin"] = await stack.create_token(PROJECT, "admin")
        deployment.tokens["other-admin"] = await stack.create_token(OTHER, "admin")
        dispatcher = await TokenStore(db_pool).create(
            project_id=None, role="service", name="dispatcher", service="dispatcher"
        )
        deployment.tokens["dispatcher"] = dispatcher.token
        yield deployment
    finally:
        await stack.close()


async def _code(call: object) -> grpc.StatusCode:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call  # type: ignore[misc]
    return caught.value.code()


async def test_a_member_counts_but_cannot_prune_or_set_retention(
    deployment: Deployment, db_pool: asyncpg.Pool
) -> None:
    old = await finished_tree(db_pool, PROJECT, age_days=40, children=1)
    member = deployment.history("member")
    dry = await member.PruneHistory(
        history_pb2.PruneHistoryRequest(project_id=PROJECT, dry_run=True)
    )
    assert (dry.runs, dry.keep_days) == (2, 30)
    denied = member.PruneHistory(history_pb2.PruneHistoryRequest(project_id=PROJECT))
    assert await _code(denied) == grpc.StatusCode.PERMISSION_DENIED
    denied = member.SetHistoryRetention(
        history_pb2.SetHistoryRetentionRequest(project_id=PROJECT, keep_days=0)
    )
    assert await _code(denied) == grpc.StatusCode.PERMISSION_DENIED
    assert await surviving(db_pool, old) == set(old)
    assert await db_pool.fetchval("SELECT count(*) FROM kb.project_retention") == 0

    admin = deployment.history("admin")
    done = await admin.PruneHistory(history_pb2.PruneHistoryRequest(project_id=PROJECT))
    assert done.runs == 2
    assert done.HasField("cutoff")
    assert await surviving(db_pool, old) == set()


async def test_one_projects_admin_never_reaches_anothers_history(
    deployment: Deployment, db_pool: asyncpg.Pool
) -> None:
    theirs = await finished_tree(db_pool, OTHER, age_days=400, children=1)
    mine = await finished_tree(db_pool, PROJECT, age_days=3)
    admin = deployment.history("admin")
    for request in (
        admin.PruneHistory(history_pb2.PruneHistoryRequest(project_id=OTHER)),
        admin.SetHistoryRetention(
            history_pb2.SetHistoryRetentionRequest(project_id=OTHER, keep_days=1)
        ),
    ):
        assert await _code(request) == grpc.StatusCode.PERMISSION_DENIED
    # Its own retention shortened to 1 day: its own 3-day-old run goes, the other
    # project's 400-day-old rows stay.
    reply = await admin.SetHistoryRetention(
        history_pb2.SetHistoryRetentionRequest(project_id=PROJECT, keep_days=1)
    )
    assert (reply.keep_days, reply.project_setting) == (1, True)
    pruned = await admin.PruneHistory(history_pb2.PruneHistoryRequest(project_id=PROJECT))
    assert pruned.runs == 1
    assert await surviving(db_pool, mine) == set()
    assert await surviving(db_pool, theirs) == set(theirs)
    # The other project's retention is still the deployment's.
    other = deployment.history("other-admin")
    dry = await other.PruneHistory(history_pb2.PruneHistoryRequest(project_id=OTHER, dry_run=True))
    assert (dry.keep_days, dry.runs) == (30, 2)


@pytest.mark.parametrize(
    ("request_", "field_"),
    [
        (history_pb2.SetHistoryRetentionRequest(project_id=PROJECT, keep_days=-1), "keep_days"),
        (
            history_pb2.SetHistoryRetentionRequest(project_id=PROJECT, keep_days=2**31 - 1),
            "keep_days",
        ),
        (history_pb2.PruneHistoryRequest(project_id=PROJECT, max_runs=-5), "max_runs"),
        (history_pb2.PruneHistoryRequest(project_id=PROJECT, max_runs=10**9), "max_runs"),
    ],
)
async def test_hostile_values_are_invalid_argument_naming_the_field(
    deployment: Deployment, request_: object, field_: str
) -> None:
    admin = deployment.history("admin")
    method = (
        admin.SetHistoryRetention
        if isinstance(request_, history_pb2.SetHistoryRetentionRequest)
        else admin.PruneHistory
    )
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await method(request_)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert field_ in (caught.value.details() or "")


async def test_a_service_identity_may_call_neither(deployment: Deployment) -> None:
    service = deployment.history("dispatcher")
    for call in (
        service.PruneHistory(history_pb2.PruneHistoryRequest(project_id=PROJECT, dry_run=True)),
        service.SetHistoryRetention(history_pb2.SetHistoryRetentionRequest(project_id=PROJECT)),
    ):
        assert await _code(call) == grpc.StatusCode.PERMISSION_DENIED


async def _firing(pool: asyncpg.Pool, project: str, age_days: int) -> None:
    await pool.execute(
        """
        INSERT INTO kb.trigger_firings (project_id, outbox_id, agent_name, trigger, outcome,
                                        reason, created_at)
        VALUES ($1, 1, gen_random_uuid()::text, 'on_event:e', 'skipped', 'rate_cap: x',
                now() - make_interval(days => $2::integer))
        """,
        project,
        age_days,
    )


async def test_trigger_firings_are_pruned_in_the_callers_project_only(
    deployment: Deployment, db_pool: asyncpg.Pool
) -> None:
    # PruneHistory counts and deletes trigger firings too: a member counts its own only, and
    # an admin's prune with a shorter retention leaves another project's older firings.
    await _firing(db_pool, PROJECT, 3)
    await _firing(db_pool, OTHER, 400)
    await _firing(db_pool, OTHER, 400)
    member = deployment.history("member")
    dry = await member.PruneHistory(
        history_pb2.PruneHistoryRequest(project_id=PROJECT, dry_run=True)
    )
    assert dry.trigger_firings == 0  # 3 days old, inside the default 30
    denied = member.PruneHistory(history_pb2.PruneHistoryRequest(project_id=OTHER, dry_run=True))
    assert await _code(denied) == grpc.StatusCode.PERMISSION_DENIED
    admin = deployment.history("admin")
    await admin.SetHistoryRetention(
        history_pb2.SetHistoryRetentionRequest(project_id=PROJECT, keep_days=1)
    )
    pruned = await admin.PruneHistory(history_pb2.PruneHistoryRequest(project_id=PROJECT))
    assert pruned.trigger_firings == 1
    left = await db_pool.fetch("SELECT project_id FROM kb.trigger_firings")
    assert [r["project_id"] for r in left] == [OTHER, OTHER]
