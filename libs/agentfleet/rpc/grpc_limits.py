"""Limits every gRPC server applies: concurrency, connections, and calls per caller.

`agentfleet.settings.server_limits.ServerLimits` holds them (from the ``AGENTFLEET_GRPC_*`` and
``AGENTFLEET_MAX_STREAMS_PER_TOKEN`` / ``_PER_PROJECT`` and ``_MAX_UNARY_PER_TOKEN`` /
``_PER_PROJECT`` settings); :func:`server_options` turns them into the channel arguments of
``grpc.aio.server``; :class:`CallSlots` counts the response streams each token and project
holds open and the unary calls each token and project has in progress in this process, and
refuses one past a limit with RESOURCE_EXHAUSTED naming the limit.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Iterator
from typing import TYPE_CHECKING

from agentfleet.errors import ResourceExhausted
from agentfleet.settings.server_limits import ServerLimits

if TYPE_CHECKING:
    from agentfleet.auth import Principal


def server_options(limits: ServerLimits) -> list[tuple[str, int]]:
    """The ``grpc.aio.server`` channel arguments for ``limits`` (the RPC cap is separate:
    ``maximum_concurrent_rpcs``)."""
    return [
        ("grpc.max_concurrent_streams", limits.max_streams_per_connection),
        ("grpc.keepalive_time_ms", _ms(limits.keepalive_time_s)),
        ("grpc.keepalive_timeout_ms", _ms(limits.keepalive_timeout_s)),
        ("grpc.http2.min_ping_interval_without_data_ms", _ms(limits.min_client_ping_interval_s)),
        ("grpc.http2.max_ping_strikes", 2),
        ("grpc.max_connection_idle_ms", _ms(limits.max_connection_idle_s)),
        ("grpc.max_connection_age_ms", _ms(limits.max_connection_age_s)),
        ("grpc.max_connection_age_grace_ms", _ms(limits.max_connection_age_grace_s)),
    ]


def _ms(seconds: float) -> int:
    return max(1, round(seconds * 1000))


class Slots:
    """Calls one holder (a token id, a project id) has in progress in this process, at most
    ``limit`` each; one past it is refused with RESOURCE_EXHAUSTED naming the limit and the
    setting that holds it.

    A holder of None (authentication off, the local demo) is not counted: the server-wide
    RPC cap still bounds it.
    """

    def __init__(self, limit: int, *, holder: str, calls: str, variable: str, advice: str) -> None:
        self.limit = limit
        self._holder = holder
        self._calls = calls
        self._variable = variable
        self._advice = advice
        self._held: Counter[str] = Counter()

    def acquire(self, key: str | None) -> None:
        """Takes a slot for ``key`` or raises ResourceExhausted naming the limit."""
        if key is None:
            return
        if self._held[key] >= self.limit:
            holder = self._holder.format(key=key)
            raise ResourceExhausted(
                f"{holder} already has {self.limit} {self._calls}, the limit "
                f"({self._variable}); {self._advice}"
            )
        self._held[key] += 1

    def release(self, key: str | None) -> None:
        if key is None:
            return
        self._held[key] -= 1
        if self._held[key] <= 0:
            del self._held[key]

    def held(self, key: str) -> int:
        return self._held[key]

    @contextlib.contextmanager
    def holding(self, key: str | None) -> Iterator[None]:
        """A slot of ``key`` for the block (ResourceExhausted past the limit)."""
        self.acquire(key)
        try:
            yield
        finally:
            self.release(key)


class CallSlots:
    """Every per-caller cap of one server: open response streams and unary calls in progress,
    each per token and per project.

    Without the unary caps one member could take every slot of the server-wide RPC cap:
    a thousand ListTools waiting on its own MCP server that never answers (connect timeout
    up to 300 s), and every other project's calls, the executor's included, were refused.
    The project caps are there because a project may hold many tokens (the operator mints
    them on request), each with its own token cap: with streams capped per token only, a
    project's tokens could hold every slot of the server-wide cap open.

    Service identities (the executor's ResolveTools and CallTool for every project, the
    dispatcher's TriggerRun) are not counted in the unary caps, nor in the project's stream
    cap (the dispatcher's ResumeRun streams, held until their first event, still count
    against its token's stream cap): they call for all projects
    at once, so a tenant-sized cap would refuse work of projects that did nothing wrong;
    their volume is bounded by their own limits (executor concurrency, runs per project)
    and by the server-wide cap.
    """

    def __init__(self, limits: ServerLimits) -> None:
        self.streams = _cap(limits, "streams", "token")
        self.streams_per_project = _cap(limits, "streams", "project")
        self.unary_per_token = _cap(limits, "unary", "token")
        self.unary_per_project = _cap(limits, "unary", "project")

    @contextlib.contextmanager
    def stream(self, principal: Principal) -> Iterator[None]:
        """A stream slot of the principal's token, and of its project unless it is a service
        identity, for the block. The token is checked first, as for unary calls."""
        project = None if principal.role == "service" else principal.project_id
        with self.streams.holding(principal.token_id), self.streams_per_project.holding(project):
            yield

    @contextlib.contextmanager
    def unary(self, principal: Principal) -> Iterator[None]:
        """A unary slot of the principal's token and of its project for the block; none
        for a service identity. The token is checked first, so a token at its own cap is
        told so, not that its project is full."""
        if principal.role == "service" or principal.token_id is None:
            yield
            return
        with (
            self.unary_per_token.holding(principal.token_id),
            self.unary_per_project.holding(principal.project_id),
        ):
            yield


_COUNTED = {
    "streams": ("open streams", "close one first"),
    "unary": ("calls in progress", "wait for one to finish"),
}
_HOLDERS = {"token": "this token", "project": "project {key!r}"}


def _cap(limits: ServerLimits, counted: str, holder: str) -> Slots:
    """The cap of ``counted`` per ``holder``: :class:`ServerLimits`' field
    ``max_<counted>_per_<holder>``, set by the variable of the same name."""
    name = f"max_{counted}_per_{holder}"
    calls, advice = _COUNTED[counted]
    return Slots(
        getattr(limits, name),
        holder=_HOLDERS[holder],
        calls=calls,
        variable=f"AGENTFLEET_{name.upper()}",
        advice=advice,
    )
