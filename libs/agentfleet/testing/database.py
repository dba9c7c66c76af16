"""pytest fixtures: database (placeholder until written)."""
