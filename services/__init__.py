"""The four agentfleet services, each run as ``python -m services.<name>``."""
