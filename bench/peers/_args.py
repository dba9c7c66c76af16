"""The command line every peer script shares, so the runner drives them alike."""

from __future__ import annotations

import argparse
import os
from pathlib import Path


def parse(doc: str, argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--url", default=os.environ.get("DATABASE_URL"), help="server URL")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--agents", type=int, default=50)
    parser.add_argument("--concurrent-steps", type=int, default=10)
    parser.add_argument("--children", type=int, default=10)
    parser.add_argument("--fanout-repeats", type=int, default=3)
    parser.add_argument("--parts", default="single,concurrent,fanout")
    # The same for every system, printed in RESULTS: database pool size and how many runs
    # the system drives at once (agentfleet's executor concurrency; the peers' gather).
    parser.add_argument("--pool-size", type=int, default=20)
    parser.add_argument("--model-delay", type=float, default=0.0, help="stub answers after s")
    parser.add_argument(
        "--durability", choices=("sync", "async"), default="sync", help="LangGraph only"
    )
    parser.add_argument(
        "--builtin-tools",
        choices=("inprocess", "toolpool"),
        default="inprocess",
        help="agentfleet only: AGENTFLEET_EXECUTOR_BUILTIN_TOOLS (toolpool: the gRPC hop)",
    )
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)
    args.parts = set(args.parts.split(","))
    if not args.url:
        parser.error("--url (or DATABASE_URL) is required: a PostgreSQL server URL")
    return args
