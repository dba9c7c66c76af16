"""Parsers of setting values: each turns one raw string into a value or raises ValueError
with the reason, which :mod:`agentfleet.config` prefixes with the variable's name.

Pure functions of their argument; only :mod:`agentfleet.config` reads the environment.
"""

from __future__ import annotations

import base64
import ipaddress
import re
import shlex
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar
from urllib.parse import urlsplit

from agentfleet.run_limits import TIMEOUT_RANGE, timeout_allowed

N = TypeVar("N", int, float)


def nonempty(raw: str) -> str:
    return raw


def directory(raw: str) -> Path:
    return _existing(raw, Path.is_dir, "is not a directory")


def readable_file(raw: str) -> Path:
    return _existing(raw, Path.is_file, "is not a file")


def _existing(raw: str, is_kind: Callable[[Path], bool], otherwise: str) -> Path:
    path = Path(raw)
    if not is_kind(path):
        raise ValueError(otherwise)
    return path


def int_range(low: int, high: int) -> Callable[[str], int]:
    def parse(raw: str) -> int:
        value = _number(int, raw, "must be an integer")
        if not low <= value <= high:
            raise ValueError(f"must be between {low} and {high}")
        return value

    return parse


port_number = int_range(1, 65535)


def positive_float(raw: str) -> float:
    value = _number(float, raw, "must be a number")
    if value <= 0:
        raise ValueError("must be greater than 0")
    return value


def timeout_seconds(raw: str) -> float:
    """A run or task timeout in seconds, within the bounds every timeout has."""
    value = _number(float, raw, "must be a number of seconds")
    if not timeout_allowed(value):
        raise ValueError(f"must be {TIMEOUT_RANGE}")
    return value


def float_range(low: float, high: float) -> Callable[[str], float]:
    def parse(raw: str) -> float:
        value = _number(float, raw, "must be a number")
        if not low <= value <= high:
            raise ValueError(f"must be between {low:g} and {high:g}")
        return value

    return parse


def _number(kind: Callable[[str], N], raw: str, otherwise: str) -> N:
    """``kind(raw)``; when ``raw`` is not one, a ValueError with ``otherwise`` as its reason."""
    try:
        return kind(raw)
    except ValueError:
        raise ValueError(otherwise) from None


def choice(*choices: str) -> Callable[[str], str]:
    def parse(raw: str) -> str:
        if raw.lower() not in choices:
            raise ValueError(f"must be one of {', '.join(choices)}")
        return raw.lower()

    return parse


def true_false(raw: str) -> bool:
    lowered = raw.lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise ValueError("must be true or false")


def on_off(raw: str) -> bool:
    lowered = raw.lower()
    if lowered not in ("on", "off"):
        raise ValueError("must be on or off")
    return lowered == "on"


def command_lines(raw: str) -> tuple[tuple[str, ...], ...]:
    """Command lines separated by ';' or newlines, each split the way a shell would."""
    entries = []
    for line in raw.replace(";", "\n").splitlines():
        try:
            argv = tuple(shlex.split(line))
        except ValueError as exc:
            raise ValueError(f"cannot split {line.strip()!r}: {exc}") from None
        if argv:
            entries.append(argv)
    return tuple(entries)


def networks(raw: str) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
    """Comma-separated CIDRs; a bare address is its /32 or /128."""
    networks = []
    for part in filter(None, (p.strip() for p in raw.split(","))):
        try:
            networks.append(ipaddress.ip_network(part, strict=False))
        except ValueError:
            raise ValueError(f"{part!r} is not a CIDR network such as 10.1.0.0/16") from None
    return tuple(networks)


def parse_secrets_keys(raw: str) -> tuple[tuple[str, bytes], ...]:
    """Comma-separated ``id:base64key`` entries, each key 32 bytes (AES-256); unique ids."""
    keys: list[tuple[str, bytes]] = []
    for part in filter(None, (p.strip() for p in raw.split(","))):
        key_id, sep, encoded = part.partition(":")
        if not sep or not re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", key_id):
            raise ValueError("each entry must be id:base64key, id of letters, digits, _ . -")
        try:
            key = base64.b64decode(encoded, validate=True)
        except ValueError:
            raise ValueError(f"key {key_id!r} is not valid base64") from None
        if len(key) != 32:
            raise ValueError(f"key {key_id!r} must be 32 bytes (AES-256), got {len(key)}")
        if any(key_id == known for known, _ in keys):
            raise ValueError(f"key id {key_id!r} appears twice")
        keys.append((key_id, key))
    return tuple(keys)


def address(raw: str) -> str:
    host, sep, port = raw.rpartition(":")
    if not sep or not host:
        raise ValueError("must be host:port")
    port_number(port)
    return raw


def database_url(raw: str) -> str:
    """Validates a PostgreSQL URL the way asyncpg will read it, with a readable reason."""
    parts = urlsplit(raw)
    if parts.scheme not in ("postgres", "postgresql"):
        raise ValueError("must be a postgresql:// URL")
    try:
        port = parts.port
    except ValueError:
        raise ValueError("has an invalid port") from None
    if port is not None and not 1 <= port <= 65535:
        raise ValueError("has an invalid port")
    if not parts.hostname and "host=" not in parts.query:
        raise ValueError("names no host")
    return raw


def http_url(raw: str) -> str:
    parts = urlsplit(raw)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError("must be an http:// or https:// URL")
    return raw.rstrip("/")
