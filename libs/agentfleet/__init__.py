"""agentfleet: the shared library of the four services (executor, toolpool, dispatcher, history)."""

__version__ = "0.1.0"
