"""The a2a service: a project's ``external`` agents as A2A (Agent2Agent) agents."""
