"""structlog setup: JSON lines in deployment, readable lines on a terminal.

Request scope (rpc method, project_id, run_id, trace_id) lives in structlog's contextvars,
bound by the gRPC interceptor and by the executor per run, so every line carries it.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

import structlog

from agentfleet.config import Settings

_SECRET_KEYS = frozenset({"token", "authorization", "api_key", "password", "secret", "value"})


def _redact_secrets(_: Any, __: str, event_dict: dict[str, Any]) -> dict[str, Any]:
    # Defence in depth: a secret bound to a log call by mistake never reaches the output.
    for key in event_dict.keys() & _SECRET_KEYS:
        event_dict[key] = "[redacted]"
    return event_dict


def configure_logging(settings: Settings, *, service: str) -> None:
    """Configures structlog and the standard library logging for one process."""
    as_json = settings.log_format == "json" or (
        settings.log_format == "auto" and not sys.stderr.isatty()
    )
    level = getattr(logging, settings.log_level.upper())
    shared: list[structlog.types.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        _redact_secrets,
    ]
    renderer: structlog.types.Processor = (
        structlog.processors.JSONRenderer()
        if as_json
        else structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
    )
    structlog.configure(
        processors=[
            *shared,
            structlog.processors.format_exc_info if as_json else structlog.dev.set_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )
    structlog.contextvars.bind_contextvars(service=service)
    logging.basicConfig(level=max(level, logging.WARNING), stream=sys.stderr, format="%(message)s")


def get_logger(name: str | None = None) -> structlog.stdlib.BoundLogger:
    return structlog.get_logger(name)  # type: ignore[no-any-return]
