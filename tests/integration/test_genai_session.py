"""Model calls against the real stub server (issues #4, #17): with no proxy variable and no
``.netrc``, a call makes no thread hand-off (the model client's own aiohttp session, handed
to google-genai through ``HttpOptions(aiohttp_client=...)``, does not trust the
environment); with a proxy variable set, the session trusts it, as the SDK's would. And a
stub made for benchmarks keeps no requests."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from google.genai import types

from agentfleet.gemini_stub import GeminiStub, Reply, Script
from agentfleet.testing.gemini import model_client_for

_PROXY_VARIABLES = [
    name
    for scheme in ("http", "https", "ws", "wss", "all", "no")
    for name in (f"{scheme}_proxy", f"{scheme.upper()}_PROXY")
]


def _clean_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in _PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("NETRC", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.netrc


def _count_thread_hops(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Every function the running loop hands to its executor (they still run)."""
    loop = asyncio.get_running_loop()
    handed: list[Any] = []
    run_in_executor = loop.run_in_executor

    def counting(executor: Any, func: Any, *args: Any) -> Any:
        handed.append(func)
        return run_in_executor(executor, func, *args)

    monkeypatch.setattr(loop, "run_in_executor", counting)
    return handed


async def _three_calls(stub: GeminiStub) -> Any:
    stub.add_script(Script(name="s", replies=[Reply(text=t) for t in "abc"]))
    client = model_client_for(stub)
    try:
        for _ in range(3):
            reply = await client.generate(
                model="m",
                system_instruction=None,
                contents=[types.Content(role="user", parts=[types.Part(text="hi")])],
            )
        return reply
    finally:
        await client.aclose()


async def test_no_thread_hand_off_per_call_without_proxy_or_netrc(
    gemini_stub: GeminiStub, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _clean_environment(monkeypatch, tmp_path)
    handed = _count_thread_hops(monkeypatch)
    reply = await _three_calls(gemini_stub)
    assert reply.text == "c"
    assert handed == []


async def test_a_proxy_variable_keeps_the_environment_lookups(
    gemini_stub: GeminiStub, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _clean_environment(monkeypatch, tmp_path)
    # A proxy is configured, but not for the stub's address: calls still reach it.
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    handed = _count_thread_hops(monkeypatch)
    reply = await _three_calls(gemini_stub)
    assert reply.text == "c"
    # aiohttp looked up .netrc and the proxy for each call, as the SDK's session does.
    assert len(handed) == 6


async def test_a_stub_that_records_nothing_still_answers() -> None:
    stub = GeminiStub(record_requests=False)
    await stub.start()
    try:
        reply = await _three_calls(stub)
        assert reply.text == "c"
        assert stub.requests == []
        assert stub.used("s") == 3
        with pytest.raises(RuntimeError):
            await stub.wait_for_requests(1)
    finally:
        await stub.stop()
