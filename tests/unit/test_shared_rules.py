"""The one definition of each shared rule and format: the depth rule, the request-id limit,
timestamps on the wire, and the tests' wait helper."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime

import pytest

from agentfleet.errors import InvalidArgument
from agentfleet.request_ids import (
    MAX_REQUEST_ID_CHARS,
    REUSED_REQUEST_ID,
    check_same_request,
    checked_request_id,
    request_fingerprint,
    request_id_violations,
)
from agentfleet.run_limits import MAX_SPAWN_DEPTH, may_spawn, spawn_tool_refusal
from agentfleet.testing.waiting import wait_for
from agentfleet.timestamps import timestamp_proto


def test_spawn_tools_by_depth() -> None:
    assert spawn_tool_refusal("spawn_agents", depth=0, named_exactly=False) is None
    assert spawn_tool_refusal("spawn_agents", depth=1, named_exactly=True) is None
    glob_only = spawn_tool_refusal("spawn_agents", depth=1, named_exactly=False)
    assert glob_only is not None
    assert "names it exactly" in glob_only
    at_cap = spawn_tool_refusal("list_available_agents", depth=MAX_SPAWN_DEPTH, named_exactly=True)
    assert at_cap is not None
    assert f"the cap is {MAX_SPAWN_DEPTH}" in at_cap
    assert spawn_tool_refusal("search", depth=MAX_SPAWN_DEPTH, named_exactly=False) is None
    assert may_spawn(MAX_SPAWN_DEPTH - 1)
    assert not may_spawn(MAX_SPAWN_DEPTH)


def test_request_id_limit() -> None:
    fits = "r" * MAX_REQUEST_ID_CHARS
    assert request_id_violations(fits) == []
    assert checked_request_id(fits) == fits
    assert [v.field for v in request_id_violations(fits + "r")] == ["request_id"]
    with pytest.raises(InvalidArgument, match=f"request_id: is longer than {MAX_REQUEST_ID_CHARS}"):
        checked_request_id(fits + "r")


def test_request_fingerprint_is_canonical_and_keeps_decide_tool_calls_digests() -> None:
    assert request_fingerprint({"b": 1, "a": [2]}) == request_fingerprint({"a": [2], "b": 1})
    assert request_fingerprint({"a": 1}) != request_fingerprint({"a": 2})
    # DecideToolCall's digest before the shared helper, stored in rows that must still match.
    body = json.dumps(["call-1", True, "", {"k": "é"}], sort_keys=True)
    assert request_fingerprint(["call-1", True, "", {"k": "é"}]) == (
        hashlib.sha256(body.encode()).hexdigest()
    )


def test_a_request_id_repeated_with_another_request_is_refused_naming_it() -> None:
    check_same_request("same", "same")
    check_same_request(None, "new")  # stored before fingerprints: replayed as always
    check_same_request("stored", None)  # a key the service derives: replayed as always
    with pytest.raises(InvalidArgument) as refused:
        check_same_request("first", "second")
    assert [(v.field, v.description) for v in refused.value.violations] == [
        ("request_id", REUSED_REQUEST_ID)
    ]


def test_timestamps_on_the_wire() -> None:
    when = datetime(2026, 3, 1, 12, 30, 5, 250_000, tzinfo=UTC)
    assert timestamp_proto(None) is None
    assert timestamp_proto("") is None
    assert timestamp_proto(when).ToDatetime(tzinfo=UTC) == when  # type: ignore[union-attr]
    assert timestamp_proto(when.isoformat()) == timestamp_proto(when)


async def test_wait_for_returns_the_first_truthy_value() -> None:
    calls: list[int] = []

    async def third_time() -> str | None:
        calls.append(1)
        return "ready" if len(calls) >= 3 else None

    assert await wait_for(third_time, "three calls", interval_s=0) == "ready"
    assert len(calls) == 3


async def test_wait_for_fails_naming_what_it_waited_for() -> None:
    with pytest.raises(AssertionError, match=r"not within 0\.05s: the impossible"):
        await wait_for(lambda: False, "the impossible", timeout_s=0.05, interval_s=0.01)


async def test_wait_for_treats_transient_errors_as_not_yet() -> None:
    attempts: list[int] = []

    def flaky() -> bool:
        attempts.append(1)
        if len(attempts) < 3:
            raise ConnectionError("restarting")
        return True

    assert await wait_for(flaky, "recovery", interval_s=0, transient=(ConnectionError,))
    with pytest.raises(ConnectionError):
        await wait_for(_raise, "no transient", timeout_s=1)


def _raise() -> bool:
    raise ConnectionError("not declared transient: it propagates")
