"""The ``agentfleet`` command line."""
