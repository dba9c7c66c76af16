"""CallSlots: which callers the per-token and per-project stream and unary caps count."""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import pytest

from agentfleet.auth import UNRESTRICTED, Principal
from agentfleet.config import _SERVER_LIMITS
from agentfleet.errors import ResourceExhausted
from agentfleet.rpc.grpc_limits import CallSlots
from agentfleet.settings.server_limits import ServerLimits

P = "alpha"


def _hold(
    slots: CallSlots, principal: Principal, n: int, *, streams: bool = False
) -> contextlib.ExitStack:
    """``n`` unary (or stream) slots of ``principal`` held together until the stack closes."""
    held = contextlib.ExitStack()
    for _ in range(n):
        held.enter_context(slots.stream(principal) if streams else slots.unary(principal))
    return held


def test_a_token_past_its_cap_is_refused_naming_the_setting() -> None:
    slots = CallSlots(ServerLimits(max_unary_per_token=2, max_unary_per_project=10))
    member = Principal(token_id="m", project_id=P, role="member")
    with _hold(slots, member, 2):
        with pytest.raises(ResourceExhausted, match="AGENTFLEET_MAX_UNARY_PER_TOKEN"):
            _hold(slots, member, 1)
        # The refused call took nothing: neither the token's slot nor the project's.
        assert (slots.unary_per_token.held("m"), slots.unary_per_project.held(P)) == (2, 2)
    assert (slots.unary_per_token.held("m"), slots.unary_per_project.held(P)) == (0, 0)


def test_a_projects_tokens_share_its_cap() -> None:
    slots = CallSlots(ServerLimits(max_unary_per_token=2, max_unary_per_project=3))
    first = Principal(token_id="a", project_id=P, role="member")
    second = Principal(token_id="b", project_id=P, role="admin")
    other = Principal(token_id="c", project_id="beta", role="member")
    with _hold(slots, first, 2), _hold(slots, second, 1):
        with pytest.raises(ResourceExhausted, match=r"project 'alpha' .*_PER_PROJECT"):
            _hold(slots, second, 1)
        assert slots.unary_per_token.held("b") == 1  # the token's slot was given back
        with _hold(slots, other, 2):
            pass


def test_service_identities_and_auth_off_are_not_counted() -> None:
    slots = CallSlots(ServerLimits(max_unary_per_token=1, max_unary_per_project=1))
    executor = Principal(token_id="svc", project_id=None, role="service", service="executor")
    with _hold(slots, executor, 50), _hold(slots, UNRESTRICTED, 50):
        assert slots.unary_per_token.held("svc") == 0


def test_a_projects_tokens_share_its_stream_cap() -> None:
    slots = CallSlots(ServerLimits(max_streams_per_token=2, max_streams_per_project=3))
    first = Principal(token_id="a", project_id=P, role="member")
    second = Principal(token_id="b", project_id=P, role="admin")
    other = Principal(token_id="c", project_id="beta", role="member")
    with _hold(slots, first, 2, streams=True), _hold(slots, second, 1, streams=True):
        with pytest.raises(
            ResourceExhausted,
            match=r"project 'alpha' already has 3 open streams.*AGENTFLEET_MAX_STREAMS_PER_PROJECT",
        ):
            _hold(slots, second, 1, streams=True)
        assert slots.streams.held("b") == 1  # the token's slot was given back
        with _hold(slots, other, 2, streams=True):
            pass
        # The token's own cap is still the one a token at it is told about.
        with pytest.raises(ResourceExhausted, match="AGENTFLEET_MAX_STREAMS_PER_TOKEN"):
            _hold(slots, first, 1, streams=True)
    assert (slots.streams.held("a"), slots.streams_per_project.held(P)) == (0, 0)


def test_service_identities_hold_no_project_stream_slot() -> None:
    slots = CallSlots(ServerLimits(max_streams_per_token=50, max_streams_per_project=1))
    dispatcher = Principal(token_id="svc", project_id=None, role="service", service="dispatcher")
    with _hold(slots, dispatcher, 50, streams=True), _hold(slots, UNRESTRICTED, 50, streams=True):
        # Its token's own stream cap still applies; no project is charged.
        assert slots.streams.held("svc") == 50
        with pytest.raises(ResourceExhausted, match="AGENTFLEET_MAX_STREAMS_PER_TOKEN"):
            _hold(slots, dispatcher, 1, streams=True)


@pytest.mark.parametrize(
    ("field", "hold"),
    [
        ("max_streams_per_token", lambda s, p: s.streams.holding(p.token_id)),
        ("max_streams_per_project", lambda s, p: s.streams_per_project.holding(p.project_id)),
        ("max_unary_per_token", lambda s, p: s.unary_per_token.holding(p.token_id)),
        ("max_unary_per_project", lambda s, p: s.unary_per_project.holding(p.project_id)),
    ],
)
def test_each_cap_is_its_fields_value_and_names_the_variable_that_sets_it(
    field: str, hold: Callable[[CallSlots, Principal], contextlib.AbstractContextManager[None]]
) -> None:
    slots = CallSlots(ServerLimits(**{field: 1}))
    member = Principal(token_id="m", project_id=P, role="member")
    variable, _ = _SERVER_LIMITS[field]
    with (
        hold(slots, member),
        pytest.raises(ResourceExhausted, match=f"already has 1 .*\\({variable}\\)"),
        hold(slots, member),
    ):
        pass
