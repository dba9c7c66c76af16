"""Fixtures come from agentfleet.testing, so other test suites (and bench/) can reuse them."""

import os

# One executor process per executor a test starts (the default is one worker per core): a
# test that means to run an executor host says so (tests/e2e/test_executor_host.py).
os.environ.setdefault("AGENTFLEET_EXECUTOR_PROCESSES", "1")

pytest_plugins = [
    "agentfleet.testing.database",
    "agentfleet.testing.gemini",
    "agentfleet.testing.services",
    "agentfleet.testing.tracing",
]


def pytest_collection_modifyitems(items: list) -> None:  # type: ignore[type-arg]
    import pytest

    for item in items:
        if "/tests/e2e/" in str(item.fspath):
            item.add_marker(pytest.mark.e2e)
