"""pytest fixtures: services (placeholder until written)."""
