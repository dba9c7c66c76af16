"""Fixtures come from agentfleet.testing, so other test suites (and bench/) can reuse them."""

pytest_plugins = [
    "agentfleet.testing.database",
    "agentfleet.testing.gemini",
    "agentfleet.testing.services",
]
