"""Open response streams re-check their token, so a revoked one stops receiving.

A stream is authenticated when it opens; WatchRun, WatchTaskGraph and StartRun may stay
open until the connection is recycled (up to an hour), so without a re-check a token
revoked meanwhile kept receiving the project's events, while a new RPC with it was refused
within the revocation delay. :class:`StreamReauth` re-checks the token on a timer, whether
messages flow or the stream is idle, and the stream ends with UNAUTHENTICATED within that
same delay.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from types import TracebackType
from typing import Any, Final

import structlog

from agentfleet.auth import Authenticator
from agentfleet.errors import Unauthenticated

log = structlog.get_logger(__name__)

END: Final = object()
"""What :meth:`StreamReauth.next` returns when the responses are exhausted."""

MIN_INTERVAL_S = 0.05
"""No stream re-checks more often than this, whatever the revocation delay."""


class StreamReauth:
    """Re-checks one open stream's token every half revocation delay, accepting only
    verdicts checked at most that long ago: a revoked token is then refused within the
    delay (a verdict up to half of it old, found up to half of it late), as a new RPC is.

    The check runs in its own task so an idle stream is closed too: once the token is
    refused, the wait for the next response is cut (an ``asyncio.timeout`` rescheduled to
    now, so the cancellation is the stream's own and nothing else is cancelled) and
    :meth:`next` raises Unauthenticated; no response is handed on after that. Checks go
    through the authenticator's cache, so the streams of one token cost one database read
    per interval between them.
    """

    def __init__(self, authenticator: Authenticator, token: str | None) -> None:
        self._authenticator = authenticator
        self._token = token
        delay = authenticator.revocation_delay_s
        self._interval_s = None if delay is None else max(MIN_INTERVAL_S, delay / 2)
        self._refused: Unauthenticated | None = None
        self._cut: asyncio.Timeout | None = None
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> StreamReauth:
        if self._interval_s is not None:
            self._task = asyncio.create_task(self._recheck(self._interval_s))
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def next(self, responses: AsyncIterator[Any]) -> Any:
        """The next response, :data:`END`, or Unauthenticated once the token is refused."""
        self._raise_if_refused()
        try:
            async with asyncio.timeout(None) as cut:
                self._cut = cut
                try:
                    response = await anext(responses)
                except StopAsyncIteration:
                    return END
                finally:
                    self._cut = None
        except TimeoutError:
            if self._refused is None or not cut.expired():
                raise  # the handler's own timeout, not our cut
            self._raise_if_refused()
        # Refused while the response was being made (its cut came too late): not sent.
        self._raise_if_refused()
        return response

    def _raise_if_refused(self) -> None:
        if self._refused is not None:
            raise Unauthenticated(
                f"{self._refused.message}: the token was refused while this stream was open"
            )

    async def _recheck(self, interval_s: float) -> None:
        while True:
            await asyncio.sleep(interval_s)
            try:
                await self._authenticator.authenticate(self._token, max_age_s=interval_s)
            except Unauthenticated as refused:
                self._refused = refused
                if self._cut is not None:
                    self._cut.reschedule(asyncio.get_running_loop().time())
                return
            except Exception as exc:  # the next round tries again
                # The token table could not be read (the database is restarting): the
                # stream stays open, as new RPCs cannot be checked either; its token is
                # checked again next round.
                log.warning("stream_recheck_failed", error=f"{type(exc).__name__}: {exc}")
