"""The shared limiter on real PostgreSQL against the stub in quota mode, through the real
google-genai client: two limiters stand for two processes on one database."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import asyncpg
import pytest
import uvloop
from google.genai import types

from agentfleet.gemini_stub import GeminiStub, Reply, Script
from agentfleet.gemini_stub.quota import parse_quota
from agentfleet.llm import GenaiModelClient, QuotaScope, QuotaWait, RetryPolicy
from agentfleet.llm.errors import QuotaWaitExceeded, QuotaWaitTooLong
from agentfleet.llm.limiter.quota import ModelQuotas, QuotaConfig
from agentfleet.llm.limiter.quota_budget import ModelBudget
from agentfleet.llm.limiter.quota_store import BudgetStore
from agentfleet.postgres import db
from agentfleet.settings.quota_settings import parse_model_quotas
from agentfleet.testing.gemini import stub_settings
from agentfleet.testing.waiting import wait_for

MODEL = "gemini-2.5-flash"


@pytest.fixture
async def quota_stub() -> AsyncIterator[GeminiStub]:
    stub = GeminiStub(record_requests=False)
    await stub.start()
    stub.add_script(Script(name="any", policy=lambda request: Reply(text="ok")))
    try:
        yield stub
    finally:
        await stub.stop()


def limited_client(
    stub: GeminiStub, pool: asyncpg.Pool, config: QuotaConfig, *, attempts: int = 1
) -> GenaiModelClient:
    quotas = ModelQuotas(BudgetStore(pool, credential="0123456789abcdef"), config)
    return GenaiModelClient.from_settings(
        stub_settings(stub), retry=RetryPolicy.for_tests(attempts), quotas=quotas
    )


async def ask(client: GenaiModelClient, project: str = "p", age: float = 0.0, **extra: object):
    return await client.generate(
        model=MODEL,
        system_instruction=None,
        contents=[types.Content(role="user", parts=[types.Part(text="hi")])],
        quota_scope=QuotaScope(project=project, age_key=age),
        **extra,  # type: ignore[arg-type]
    )


async def test_two_processes_share_a_declared_quota_without_429s(
    quota_stub: GeminiStub, db_pool: asyncpg.Pool
) -> None:
    quota_stub.set_quota(parse_quota("rpm=10/2s"))
    config = QuotaConfig(declared=parse_model_quotas("*:rpm=300"), grant_s=1.0)
    clients = [limited_client(quota_stub, db_pool, config) for _ in range(2)]
    started = time.monotonic()
    try:
        # One attempt each: a 429 not caused by the quota would fail the call.
        await asyncio.gather(*(ask(clients[i % 2]) for i in range(30)))
    finally:
        for client in clients:
            await client.aclose()
    elapsed = time.monotonic() - started
    assert quota_stub.quota is not None
    windows = [w for w in quota_stub.quota.windows() if w.kind == "requests_per_minute"]
    assert sum(w.accepted for w in windows) == 30
    assert max(w.accepted for w in windows) <= 10 + 4  # one grant's slack (1 s at 4.75/s)
    assert sum(w.refused for w in windows) <= 1  # rare: the windows' edges never line up
    assert elapsed < 30 / 5 + 2  # paced, not stalled
    rounds = sum(c.quotas.granted_rounds for c in clients if c.quotas)
    assert rounds < 30  # grants in batches: fewer round trips than calls


async def test_with_no_declared_limit_429s_teach_the_fleet_and_never_spend_retries(
    quota_stub: GeminiStub, db_pool: asyncpg.Pool
) -> None:
    quota_stub.set_quota(parse_quota("rpm=6/2s"))
    client = limited_client(quota_stub, db_pool, QuotaConfig(grant_s=0.5))
    try:
        replies = await asyncio.gather(*(ask(client) for i in range(20)))
        assert client.quotas is not None
        found = client.quotas.discovered_rpm()[MODEL]
    finally:
        await client.aclose()
    assert all(r.attempts == 1 for r in replies)  # a 429 never counted as an attempt
    # A limit was found (AIMD: first guessed from the burst, 1,200/min here) and lowered.
    assert found < 1000
    row = await db_pool.fetchrow(
        "SELECT discovered_rps, throttled_total FROM kb.model_quota_budgets"
    )
    assert row["discovered_rps"] is not None
    assert row["throttled_total"] >= 1


async def test_a_waiting_call_says_so_and_a_spent_day_fails_naming_model_and_limit(
    quota_stub: GeminiStub, db_pool: asyncpg.Pool
) -> None:
    config = QuotaConfig(declared=parse_model_quotas(f"{MODEL}:rpm=60,rpd=3"), max_wait_s=30)
    client = limited_client(quota_stub, db_pool, config)
    waits: list[QuotaWait] = []

    async def on_wait(wait: QuotaWait) -> None:
        waits.append(wait)

    try:
        await asyncio.gather(*(ask(client, on_wait=on_wait) for _ in range(3)))
        with pytest.raises(QuotaWaitExceeded) as spent:
            await ask(client, on_wait=on_wait)
    finally:
        await client.aclose()
    assert MODEL in str(spent.value)
    assert "requests_per_day" in str(spent.value)
    starts = [w for w in waits if w.waiting]
    ends = [w for w in waits if not w.waiting]
    assert len(starts) == len(ends) >= 2  # the calls paced at 1/s waited, and were told
    assert all(w.model == MODEL and w.limit == "requests_per_minute" for w in starts[:1])
    assert all(w.expected_wait_s >= 0 for w in waits)


async def test_a_second_project_is_not_stuck_behind_the_first_one_s_backlog(
    quota_stub: GeminiStub, db_pool: asyncpg.Pool
) -> None:
    config = QuotaConfig(declared=parse_model_quotas("*:rpm=600"), grant_s=0.2)  # 10/s
    client = limited_client(quota_stub, db_pool, config)
    done: list[str] = []
    flowing = asyncio.Event()

    async def one(project: str, age: float) -> None:
        await ask(client, project=project, age=age)
        done.append(project)
        if len(done) >= 3:
            flowing.set()

    try:
        backlog = [asyncio.create_task(one("big", float(i))) for i in range(40)]
        async with asyncio.timeout(30):
            await flowing.wait()  # the backlog is queued and flowing
        small = asyncio.create_task(one("small", 1e12))
        await small
        position = len(done)
        await asyncio.gather(*backlog)
    finally:
        await client.aclose()
    assert position <= 3 + 4  # served within a round or so, not after 37 queued calls


async def test_calls_with_a_fallback_leave_a_blocked_quota_instead_of_waiting(
    quota_stub: GeminiStub, db_pool: asyncpg.Pool
) -> None:
    # The stub takes 2 calls per 20 s window, the declared rate is 10/s: the third call is
    # refused with a retryDelay of up to 20 s, blocking the whole budget that long, while
    # the calls paced behind it wait in the queue.
    quota_stub.set_quota(parse_quota("rpm=2/20s"))
    config = QuotaConfig(declared=parse_model_quotas("*:rpm=600"), max_wait_s=60)
    client = limited_client(quota_stub, db_pool, config)
    try:
        # The stub's windows are fixed 20 s spans of the wall clock: the two calls and the
        # refused one go in the first half of one, so its retryDelay (the rest of the window)
        # is past the 3 s fallback wait.
        await wait_for(lambda: time.time() % 20 < 8, "the start of a stub quota window")
        await asyncio.gather(ask(client), ask(client))
        started = time.monotonic()
        # Queued behind the refused call, and the refused call itself: all leave at the 429.
        calls = [ask(client, quota_fallback_wait_s=3.0) for _ in range(4)]
        outcomes = await asyncio.gather(*calls, return_exceptions=True)
        elapsed = time.monotonic() - started
        # A call without a fallback waits for the block, as before.
        assert client.quotas is not None
        assert client.quotas.budget(MODEL).retry_at > asyncio.get_running_loop().time() + 3
    finally:
        await client.aclose()
    assert all(isinstance(o, QuotaWaitTooLong) for o in outcomes), outcomes
    assert all(o.expected_wait_s > 3 for o in outcomes if isinstance(o, QuotaWaitTooLong))
    assert "past the 3 s this call waits before its fallback model" in str(outcomes[0])
    assert elapsed < 3  # sent on at once, not after waiting for the bound
    windows = quota_stub.quota.windows() if quota_stub.quota else []
    assert sum(w.refused for w in windows) == 1  # the refused call was not retried


def test_a_waiting_call_is_woken_once_for_its_slot_on_uvloop(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The services run on uvloop, whose clock counts whole milliseconds: a timer armed for
    a slot fires when the loop's clock may still read a fraction of a millisecond short of
    it. The limiter takes the timer's word; waiting for the clock to agree re-armed it for
    that fraction, about 20 busy wake-ups per slot."""
    pumps = 0
    pump = ModelBudget.pump

    def counted(self: ModelBudget, *args: float) -> None:
        nonlocal pumps
        pumps += 1
        pump(self, *args)

    monkeypatch.setattr(ModelBudget, "pump", counted)

    async def scenario() -> int:
        pool = await db.create_pool(database_url, min_size=1, max_size=2)
        quotas = ModelQuotas(
            BudgetStore(pool, credential="0123456789abcdef"),
            QuotaConfig(declared=parse_model_quotas("*:rpm=1200"), grant_s=0.25),
        )

        async def one(i: int) -> None:
            slot = await quotas.acquire(MODEL, QuotaScope(project="p", age_key=float(i)))
            quotas.release(slot, tokens=1)

        try:
            await asyncio.gather(*(one(i) for i in range(30)))
        finally:
            await quotas.aclose()
            await pool.close()
        return 30

    calls = uvloop.run(scenario())
    # One when the call queues, one when its slot comes due, a few for grants.
    assert pumps <= 3 * calls, f"{pumps} wake-ups for {calls} calls"
