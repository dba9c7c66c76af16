"""Query parameters of the console's API, parsed as the services' requests want them: a bad
one is a 400 naming it, never a failed call."""

from __future__ import annotations

from datetime import UTC, datetime

from google.protobuf.timestamp_pb2 import Timestamp
from starlette.requests import Request

from agentfleet.v1 import common_pb2
from services.console.app import BadRequest

MAX_ID_CHARS = 200


def page_size(request: Request, default: int = 50, limit: int = 200) -> int:
    raw = request.query_params.get("page_size")
    if raw is None or raw == "":
        return default
    if not raw.isdigit() or not 1 <= int(raw) <= limit:
        raise BadRequest("page_size", f"must be an integer from 1 to {limit}")
    return int(raw)


def text(request: Request, name: str, limit: int = MAX_ID_CHARS) -> str:
    value = request.query_params.get(name, "")
    if len(value) > limit:
        raise BadRequest(name, f"longer than {limit} characters")
    return value


def path_id(request: Request, name: str) -> str:
    value = request.path_params[name]
    if not value or len(value) > MAX_ID_CHARS:
        raise BadRequest(name, f"must be 1 to {MAX_ID_CHARS} characters")
    return value


def timestamp(request: Request, name: str) -> Timestamp | None:
    raw = request.query_params.get(name, "")
    if not raw:
        return None
    try:
        # datetime-local and date fields give no zone: read them as UTC.
        moment = datetime.fromisoformat(raw)
    except ValueError:
        raise BadRequest(name, "must be an ISO 8601 time, e.g. 2026-01-31T12:00:00Z") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    stamp = Timestamp()
    stamp.FromDatetime(moment)
    return stamp


def run_statuses(request: Request) -> list[int]:
    return _enum_list(request, "status", "RUN_STATUS_", common_pb2.RunStatus)


def _enum_list(request: Request, name: str, prefix: str, enum: object) -> list[int]:
    raw = request.query_params.get(name, "")
    values = []
    for part in filter(None, (p.strip().upper() for p in raw.split(","))):
        try:
            values.append(enum.Value(prefix + part.removeprefix(prefix)))  # type: ignore[attr-defined]
        except ValueError:
            raise BadRequest(name, f"unknown value {part[:40]!r}") from None
        if values[-1] == 0:
            raise BadRequest(name, f"unknown value {part[:40]!r}")
    return values


def flag(request: Request, name: str, default: bool) -> bool:
    raw = request.query_params.get(name, "")
    if raw == "":
        return default
    if raw not in ("true", "false", "1", "0"):
        raise BadRequest(name, "must be true or false")
    return raw in ("true", "1")


def labels(request: Request) -> dict[str, str]:
    """``label=key=value,key2=value2`` (the services bound how many and how long)."""
    raw = text(request, "label", 4000)
    pairs: dict[str, str] = {}
    for part in filter(None, (p.strip() for p in raw.split(","))):
        key, sep, value = part.partition("=")
        if not sep or not key.strip():
            raise BadRequest("label", f"{part[:40]!r} is not key=value")
        pairs[key.strip()] = value.strip()
    return pairs
