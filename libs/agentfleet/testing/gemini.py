"""pytest fixtures for the stub Gemini server.

``gemini_stub`` is a started :class:`GeminiStub` per test (a port-0 aiohttp server, cheap);
``gemini_model_client`` is a :class:`GenaiModelClient` pointed at it with millisecond
retries. Outside fixtures, :func:`model_client_for` builds the same client.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from agentfleet.config import Settings, load_settings
from agentfleet.gemini_stub import GeminiStub
from agentfleet.llm import GenaiModelClient, RetryPolicy


def stub_settings(stub: GeminiStub, settings: Settings | None = None) -> Settings:
    """``settings`` (default: an empty environment) sending model calls to ``stub``."""
    if stub.base_url is None:
        raise RuntimeError("start the gemini stub before asking for its settings")
    base = settings if settings is not None else load_settings({})
    return base.with_overrides(
        gemini_base_url=stub.base_url,
        gemini_api_key=None,
        gemini_use_vertex=False,
    )


def model_client_for(stub: GeminiStub, *, retry: RetryPolicy | None = None) -> GenaiModelClient:
    """A model client of its own on ``stub``, as services make it; ``aclose`` it."""
    return GenaiModelClient.from_settings(
        stub_settings(stub), retry=retry or RetryPolicy.for_tests()
    )


@pytest.fixture
async def gemini_stub() -> AsyncIterator[GeminiStub]:
    """A started stub Gemini server with no scripts; stopped after the test."""
    stub = GeminiStub()
    await stub.start()
    try:
        yield stub
    finally:
        await stub.stop()


@pytest.fixture
async def gemini_model_client(gemini_stub: GeminiStub) -> AsyncIterator[GenaiModelClient]:
    """A :class:`GenaiModelClient` on ``gemini_stub`` with 3 attempts and tiny waits."""
    client = model_client_for(gemini_stub)
    try:
        yield client
    finally:
        await client.aclose()
