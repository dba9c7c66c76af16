"""The run limits live in :mod:`agentfleet.run_limits`; the manifest schema, being JSON,
repeats two of them and must say the same."""

from __future__ import annotations

from agentfleet.run_limits import MAX_TIMEOUT_S, MAX_TOTAL_STEPS, MIN_TIMEOUT_S
from services.executor.registry.manifest_schema import manifest_schema


def test_manifest_schema_caps_are_the_run_limits() -> None:
    agent = manifest_schema()["$defs"]["agent"]["properties"]
    assert agent["default_timeout_s"]["maximum"] == MAX_TIMEOUT_S
    assert agent["default_timeout_s"]["minimum"] == MIN_TIMEOUT_S
    assert agent["max_steps"]["maximum"] == MAX_TOTAL_STEPS
