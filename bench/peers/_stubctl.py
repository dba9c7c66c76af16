"""Talking to the shared stub Gemini server (``python -m agentfleet.gemini_stub``, started
by the runner in its own process): every system's scripts go there, so every system's
model call is the same HTTP round trip. Stdlib only: both venvs import it."""

from __future__ import annotations

import json
import os
import urllib.request
from collections.abc import Sequence
from typing import Any


def stub_url() -> str:
    url = os.environ.get("BENCH_STUB_URL", "")
    if not url:
        raise SystemExit("BENCH_STUB_URL is required: the shared stub model's base URL")
    return url.rstrip("/")


def _post(path: str, body: Any, base_url: str | None) -> None:
    request = urllib.request.Request(
        (base_url or stub_url()).rstrip("/") + path,
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=10) as answer:
        answer.read()


def install_scripts(scripts: Sequence[dict[str, Any]], base_url: str | None = None) -> None:
    """Forgets earlier scripts and recorded requests (memory stays flat over rounds), then
    adds these; ``base_url`` defaults to BENCH_STUB_URL."""
    _post("/_stub/reset", {}, base_url)
    _post("/_stub/scripts", list(scripts), base_url)


def stepper(marker: str, steps: int, ids: Sequence[str], delay_s: float = 0.0) -> dict[str, Any]:
    """``steps`` model turns per conversation: ``get_entity`` (another id each turn: the
    executor stops a run repeating one call) on all but the last, then ``done``."""
    replies: list[dict[str, Any]] = [
        {
            "calls": [{"name": "get_entity", "args": {"id": ids[turn % len(ids)]}}],
            "delay_s": delay_s,
        }
        for turn in range(steps - 1)
    ]
    replies.append({"text": "done", "delay_s": delay_s})
    return {"name": marker, "match_system": marker, "per_conversation": True, "replies": replies}


def answer(marker: str, text: str = "ok") -> dict[str, Any]:
    return {
        "name": marker,
        "match_system": marker,
        "per_conversation": True,
        "replies": [{"text": text}],
    }
