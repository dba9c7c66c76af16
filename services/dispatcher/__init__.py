"""The dispatcher service."""
