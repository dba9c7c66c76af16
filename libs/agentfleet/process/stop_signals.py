"""The one rule for "stop on Ctrl-C or SIGTERM" of every long-running process we start."""

from __future__ import annotations

import asyncio
import signal

__all__ = ["stop_event"]


def stop_event() -> asyncio.Event:
    """An event set by SIGINT or SIGTERM (call inside the running loop)."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    return stop
