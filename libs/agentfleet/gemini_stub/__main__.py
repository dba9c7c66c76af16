"""``python -m agentfleet.gemini_stub --port N [--scripts file.json]``: run the stub alone."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
from pathlib import Path

from agentfleet.config import ConfigError, load_settings
from agentfleet.gemini_stub.codec import ScriptFormatError, scripts_from_json
from agentfleet.gemini_stub.quota import parse_quota
from agentfleet.gemini_stub.server import GeminiStub
from agentfleet.process.stop_signals import stop_event


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m agentfleet.gemini_stub",
        description="A scripted offline model speaking the Gemini REST API (not Gemini).",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--scripts", type=Path, help="JSON file of reply-sequence scripts")
    parser.add_argument(
        "--no-record-requests",
        action="store_true",
        help="keep no request once answered (GET /_stub/requests stays empty): for long "
        "benchmarks, whose recorded conversations would slow the stub's replies",
    )
    parser.add_argument(
        "--quota",
        default=None,
        help="quota mode, like rpm=20/10s,tpm=100000,rpd=1000 (per model; past it the real "
        "429 RESOURCE_EXHAUSTED with RetryInfo); default AGENTFLEET_STUB_QUOTA",
    )
    return parser.parse_args(argv)


async def _serve(args: argparse.Namespace) -> None:
    text = args.quota if args.quota is not None else load_settings().stub_quota
    quota = parse_quota(text) if text else None
    stub = GeminiStub(record_requests=not args.no_record_requests, quota=quota)
    if args.scripts is not None:
        for script in scripts_from_json(json.loads(args.scripts.read_text())):
            stub.add_script(script)
    base_url = await stub.start(args.host, args.port)
    print(
        f"gemini stub: scripted offline model (not Gemini) serving the Gemini REST API "
        f"at {base_url} with {len(stub.scripts())} script(s)"
        + (f", quota {quota.to_text()} per model" if quota is not None else ""),
        flush=True,
    )
    stopping = stop_event()
    try:
        await stopping.wait()
    finally:
        await stub.stop()


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    try:
        asyncio.run(_serve(args))
    except (OSError, ValueError, ScriptFormatError, ConfigError) as exc:
        print(f"gemini stub: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
