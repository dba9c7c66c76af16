"""StreamReauth: an open stream's token is re-checked on a timer, busy or idle."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest

from agentfleet.auth import AllowAll, Principal, TokenAuthenticator
from agentfleet.errors import Unauthenticated
from agentfleet.rpc.stream_reauth import END, StreamReauth

TTL_S = 0.2
SLACK_S = 1.0
"""Scheduling slack on a loaded machine, on top of the promised delay."""


class _Lookup:
    """A token table of one token, revocable, in memory."""

    def __init__(self) -> None:
        self.active = True

    async def find_active(self, token_hash: str) -> Principal | None:
        return Principal(token_id="t", project_id="alpha", role="member") if self.active else None


async def _drain(reauth: StreamReauth, responses: AsyncIterator[int], sent: list[int]) -> None:
    while (response := await reauth.next(responses)) is not END:
        sent.append(response)


async def _busy() -> AsyncIterator[int]:
    n = 0
    while True:
        n += 1
        yield n
        await asyncio.sleep(0.01)


async def _idle() -> AsyncIterator[int]:
    yield 1
    await asyncio.Event().wait()  # nothing more, ever
    yield 2


@pytest.mark.parametrize("stream", [_busy, _idle])
async def test_a_refused_token_ends_the_stream_within_the_delay(stream) -> None:  # type: ignore[no-untyped-def]
    lookup = _Lookup()
    authenticator = TokenAuthenticator(lookup, ttl_s=TTL_S)
    await authenticator.authenticate("af_t")  # the verdict of the stream's opening
    sent: list[int] = []
    responses = stream()
    async with StreamReauth(authenticator, "af_t") as reauth:
        assert await reauth.next(responses) == 1
        lookup.active = False
        revoked_at = time.monotonic()
        with pytest.raises(Unauthenticated, match="refused while this stream was open"):
            await _drain(reauth, responses, sent)
        assert time.monotonic() - revoked_at < TTL_S + SLACK_S
    await responses.aclose()


async def test_a_handlers_own_timeout_is_not_taken_for_a_refusal() -> None:
    authenticator = TokenAuthenticator(_Lookup(), ttl_s=TTL_S)

    async def times_out() -> AsyncIterator[int]:
        yield 1
        raise TimeoutError("the handler's own")

    async with StreamReauth(authenticator, "af_t") as reauth:
        responses = times_out()
        assert await reauth.next(responses) == 1
        with pytest.raises(TimeoutError, match="the handler's own"):
            await reauth.next(responses)


async def test_auth_off_streams_are_not_rechecked() -> None:
    async def two() -> AsyncIterator[int]:
        yield 1
        yield 2

    sent: list[int] = []
    async with StreamReauth(AllowAll(), None) as reauth:
        await _drain(reauth, two(), sent)
        assert reauth._task is None
    assert sent == [1, 2]
