"""The toolpool service."""
