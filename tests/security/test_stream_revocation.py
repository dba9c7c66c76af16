"""A token revoked while its response stream is open is cut off within the revocation delay.

Streams are authenticated when they open; before, a WatchRun (or WatchTaskGraph, StartRun)
opened with a token kept receiving the project's events after the token was revoked, until
the connection was recycled (up to an hour), while SECURITY.md section 2 promises a revoked
token is refused everywhere within AGENTFLEET_TOKEN_CACHE_TTL_S. Now the stream ends
UNAUTHENTICATED within it, idle or not, and the streams of other tokens go on.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import asyncpg
import grpc

from agentfleet.auth import TokenStore
from agentfleet.testing import factories as f
from agentfleet.testing.services import start_stack
from agentfleet.v1 import history_pb2, history_pb2_grpc

P = "alpha"
TTL_S = 1.0
"""AGENTFLEET_TOKEN_CACHE_TTL_S for these tests: the promised revocation delay."""
SLACK_S = 1.0
"""Scheduling slack on a loaded two-core machine, on top of the promised delay."""


async def _end_of(call: Any) -> tuple[grpc.StatusCode, str]:
    """Reads the stream to its end: its status code and details."""
    try:
        async for _ in call:
            pass
    except grpc.aio.AioRpcError as exc:
        return exc.code(), exc.details() or ""
    return grpc.StatusCode.OK, ""


async def test_a_revoked_tokens_idle_watch_ends_within_the_delay(
    database_url: str, db_pool: asyncpg.Pool
) -> None:
    stack = await start_stack(
        database_url=database_url,
        pool=db_pool,
        environ={"AGENTFLEET_TOKEN_CACHE_TTL_S": str(TTL_S)},
        names=("history",),
    )
    try:
        run = await f.insert_run(db_pool, project_id=P, agent_name="slow", status="running")
        await f.append(db_pool, run=run, events=f.start_events(run))
        request = history_pb2.WatchRunRequest(project_id=P, run_id=str(run["id"]))
        created = await TokenStore(db_pool).create(project_id=P, role="member", name="leaver")
        kept = await stack.create_token(P, "member")
        watches = [
            history_pb2_grpc.HistoryServiceStub(stack.channel("history", token=token)).WatchRun(
                request
            )
            for token in (created.token, kept)
        ]
        for watch in watches:  # admitted: the run's first event has arrived
            await asyncio.wait_for(watch.read(), 10)
        ended = asyncio.ensure_future(_end_of(watches[0]))

        assert await TokenStore(db_pool).revoke(created.token_id)
        revoked_at = time.monotonic()
        # The run stays running and silent: only the re-check can end this stream.
        code, details = await asyncio.wait_for(ended, TTL_S + SLACK_S)
        assert code == grpc.StatusCode.UNAUTHENTICATED, (code, details)
        assert "revoked" in details
        assert time.monotonic() - revoked_at < TTL_S + SLACK_S
        # The other token's stream of the same run is still open.
        assert not watches[1].done()
        watches[1].cancel()
    finally:
        await stack.close()
