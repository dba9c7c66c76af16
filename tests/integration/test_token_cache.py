"""The token verdict cache: a revoked token is refused at most REVOCATION_DELAY_S later."""

from __future__ import annotations

import asyncpg
import pytest

from agentfleet.auth import REVOCATION_DELAY_S, TokenAuthenticator, TokenStore
from agentfleet.errors import Unauthenticated


class Clock:
    """A monotonic clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def test_a_revoked_token_is_refused_once_its_cached_verdict_expires(
    db_pool: asyncpg.Pool,
) -> None:
    store = TokenStore(db_pool)
    created = await store.create(project_id="alpha", role="member")
    clock = Clock()
    authenticator = TokenAuthenticator(store, clock=clock)
    assert (await authenticator.authenticate(created.token)).project_id == "alpha"

    assert await store.revoke(created.token_id)
    clock.now += REVOCATION_DELAY_S - 0.1
    # Still inside the documented delay: the cached verdict stands.
    assert (await authenticator.authenticate(created.token)).project_id == "alpha"
    clock.now += 0.2
    with pytest.raises(Unauthenticated):
        await authenticator.authenticate(created.token)


async def test_a_zero_ttl_checks_the_database_on_every_call(db_pool: asyncpg.Pool) -> None:
    store = TokenStore(db_pool)
    created = await store.create(project_id="alpha", role="member")
    authenticator = TokenAuthenticator(store, ttl_s=0)
    await authenticator.authenticate(created.token)
    await store.revoke(created.token_id)
    with pytest.raises(Unauthenticated):
        await authenticator.authenticate(created.token)


async def test_max_age_reads_again_a_verdict_checked_longer_ago(db_pool: asyncpg.Pool) -> None:
    """An open stream's re-check: half the delay old at most, so it is refused in time."""
    store = TokenStore(db_pool)
    created = await store.create(project_id="alpha", role="member")
    clock = Clock()
    authenticator = TokenAuthenticator(store, clock=clock)
    await authenticator.authenticate(created.token)
    await store.revoke(created.token_id)
    half = REVOCATION_DELAY_S / 2
    clock.now += half - 0.1
    assert (await authenticator.authenticate(created.token, max_age_s=half)).role == "member"
    clock.now += 0.2
    # A new RPC would still be served from the cache; the stream's re-check reads again.
    with pytest.raises(Unauthenticated):
        await authenticator.authenticate(created.token, max_age_s=half)
