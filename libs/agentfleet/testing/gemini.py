"""pytest fixtures: gemini (placeholder until written)."""
