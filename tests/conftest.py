"""Fixtures come from agentfleet.testing, so other test suites (and bench/) can reuse them."""

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
