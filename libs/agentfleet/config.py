"""Settings read from the environment — the only module that touches ``os.environ``.

Every value is parsed and validated here, so a bad setting stops a process at start with one
line naming the variable (:class:`ConfigError`), never deep inside a request.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TypeVar
from urllib.parse import urlsplit

T = TypeVar("T")

SERVICE_NAMES = ("executor", "toolpool", "dispatcher", "history")
DEFAULT_PORTS = {"executor": 50051, "toolpool": 50052, "dispatcher": 50053, "history": 50054}


class ConfigError(ValueError):
    """A setting is missing or malformed; ``variable`` names it."""

    def __init__(self, variable: str, message: str) -> None:
        super().__init__(f"{variable}: {message}")
        self.variable = variable


@dataclass(frozen=True, kw_only=True, slots=True)
class Settings:
    database_url: str | None
    """DATABASE_URL; None means the embedded PostgreSQL under ``data_dir``."""
    data_dir: Path
    """AGENTFLEET_DATA_DIR: embedded PostgreSQL data and other local state."""
    listen_host: str
    """AGENTFLEET_LISTEN_HOST: the address every gRPC server binds."""
    ports: Mapping[str, int]
    """AGENTFLEET_<SERVICE>_PORT for each service."""
    addresses: Mapping[str, str]
    """AGENTFLEET_<SERVICE>_ADDR: where the other services are reached (host:port)."""
    auth_enabled: bool
    """AGENTFLEET_AUTH=on|off. Off only for the local demo; a warning says so."""
    service_token: str | None
    """AGENTFLEET_SERVICE_TOKEN: bearer token services present to each other."""
    db_pool_min: int
    db_pool_max: int
    shutdown_grace_s: float
    """AGENTFLEET_SHUTDOWN_GRACE_S: how long SIGTERM waits for in-flight work."""
    executor_concurrency: int
    """AGENTFLEET_EXECUTOR_CONCURRENCY: runs one executor process executes at once."""
    max_running_per_project: int
    """AGENTFLEET_MAX_RUNNING_PER_PROJECT: top-level runs one project may have running."""
    executor_lease_s: float
    """AGENTFLEET_EXECUTOR_LEASE_S: how long a run's lease lasts without a heartbeat."""
    executor_heartbeat_s: float
    """AGENTFLEET_EXECUTOR_HEARTBEAT_S: how often an executor renews its leases."""
    timeout_grace_s: float
    """AGENTFLEET_TIMEOUT_GRACE_S: time the model gets to summarize after a run's deadline."""
    dispatcher_slots: int
    """AGENTFLEET_DISPATCHER_SLOTS: tasks one dispatcher process runs at once."""
    dispatcher_lease_s: float
    """AGENTFLEET_DISPATCHER_LEASE_S: how long a dispatcher's claim on a task lasts."""
    dispatcher_selector_model: str | None
    """AGENTFLEET_DISPATCHER_SELECTOR_MODEL: model for the LLM agent choice; unset = off."""
    dispatcher_evaluator_model: str | None
    """AGENTFLEET_DISPATCHER_EVALUATOR_MODEL: model judging task outputs; unset = off."""
    log_format: str
    """AGENTFLEET_LOG_FORMAT=auto|json|console (auto: console on a terminal)."""
    log_level: str
    gemini_api_key: str | None = field(repr=False)
    """GEMINI_API_KEY or GOOGLE_API_KEY."""
    gemini_use_vertex: bool
    google_cloud_project: str | None
    google_cloud_location: str | None
    model_max_attempts: int
    """AGENTFLEET_MODEL_MAX_ATTEMPTS: model calls per step before a transient error fails it."""
    model_retry_base_s: float
    """AGENTFLEET_MODEL_RETRY_BASE_S: first backoff before a retry; doubles each time."""
    gemini_base_url: str | None
    """AGENTFLEET_GEMINI_BASE_URL: send model calls here (the stub server)."""
    migrations_dir: Path | None
    """AGENTFLEET_MIGRATIONS_DIR: the migrations folder (default: the repository's)."""
    client_token: str | None = field(repr=False)
    """AGENTFLEET_TOKEN: the bearer token the CLI presents."""
    client_project: str | None
    """AGENTFLEET_PROJECT: the project the CLI acts on."""
    otlp_endpoint: str | None
    """OTEL_EXPORTER_OTLP_ENDPOINT: export spans by OTLP when set."""
    otel_service_name: str | None

    @property
    def uses_real_gemini(self) -> bool:
        return self.gemini_base_url is None and (
            self.gemini_api_key is not None or self.gemini_use_vertex
        )

    def with_overrides(self, **changes: object) -> Settings:
        return replace(self, **changes)  # type: ignore[arg-type]


def load_settings(environ: Mapping[str, str] | None = None) -> Settings:
    """Reads and validates every setting; raises :class:`ConfigError` naming the variable."""
    env = _Env(os.environ if environ is None else environ)
    ports = {
        name: env.get(f"AGENTFLEET_{name.upper()}_PORT", DEFAULT_PORTS[name], _port)
        for name in SERVICE_NAMES
    }
    addresses = {
        name: env.get(f"AGENTFLEET_{name.upper()}_ADDR", f"127.0.0.1:{ports[name]}", _address)
        for name in SERVICE_NAMES
    }
    lease_s = env.get("AGENTFLEET_EXECUTOR_LEASE_S", 30.0, _positive_float)
    heartbeat_s = env.get("AGENTFLEET_EXECUTOR_HEARTBEAT_S", 10.0, _positive_float)
    if heartbeat_s >= lease_s:
        raise ConfigError(
            "AGENTFLEET_EXECUTOR_HEARTBEAT_S", "must be shorter than AGENTFLEET_EXECUTOR_LEASE_S"
        )
    pool_min = env.get("AGENTFLEET_DB_POOL_MIN", 1, _int_range(0, 1000))
    pool_max = env.get("AGENTFLEET_DB_POOL_MAX", 10, _int_range(1, 1000))
    if pool_max < pool_min:
        raise ConfigError("AGENTFLEET_DB_POOL_MAX", "must be >= AGENTFLEET_DB_POOL_MIN")
    return Settings(
        database_url=env.get("DATABASE_URL", None, database_url),
        data_dir=Path(env.get("AGENTFLEET_DATA_DIR", ".data", _nonempty)).absolute(),
        listen_host=env.get("AGENTFLEET_LISTEN_HOST", "127.0.0.1", _nonempty),
        ports=ports,
        addresses=addresses,
        auth_enabled=env.get("AGENTFLEET_AUTH", True, _on_off),
        service_token=env.get("AGENTFLEET_SERVICE_TOKEN", None, _nonempty),
        db_pool_min=pool_min,
        db_pool_max=pool_max,
        shutdown_grace_s=env.get("AGENTFLEET_SHUTDOWN_GRACE_S", 20.0, _positive_float),
        executor_concurrency=env.get("AGENTFLEET_EXECUTOR_CONCURRENCY", 16, _int_range(1, 1000)),
        max_running_per_project=env.get(
            "AGENTFLEET_MAX_RUNNING_PER_PROJECT", 64, _int_range(1, 100_000)
        ),
        executor_lease_s=lease_s,
        executor_heartbeat_s=heartbeat_s,
        timeout_grace_s=env.get("AGENTFLEET_TIMEOUT_GRACE_S", 30.0, _positive_float),
        dispatcher_slots=env.get("AGENTFLEET_DISPATCHER_SLOTS", 8, _int_range(1, 1000)),
        dispatcher_lease_s=env.get("AGENTFLEET_DISPATCHER_LEASE_S", 5.0, _positive_float),
        dispatcher_selector_model=env.get("AGENTFLEET_DISPATCHER_SELECTOR_MODEL", None, _nonempty),
        dispatcher_evaluator_model=env.get(
            "AGENTFLEET_DISPATCHER_EVALUATOR_MODEL", None, _nonempty
        ),
        log_format=env.get("AGENTFLEET_LOG_FORMAT", "auto", _choice("auto", "json", "console")),
        log_level=env.get(
            "AGENTFLEET_LOG_LEVEL", "info", _choice("debug", "info", "warning", "error")
        ),
        gemini_api_key=env.get("GEMINI_API_KEY", None, _nonempty)
        or env.get("GOOGLE_API_KEY", None, _nonempty),
        gemini_use_vertex=env.get("GOOGLE_GENAI_USE_VERTEXAI", False, _bool),
        google_cloud_project=env.get("GOOGLE_CLOUD_PROJECT", None, _nonempty),
        google_cloud_location=env.get("GOOGLE_CLOUD_LOCATION", None, _nonempty),
        model_max_attempts=env.get("AGENTFLEET_MODEL_MAX_ATTEMPTS", 4, _int_range(1, 20)),
        model_retry_base_s=env.get("AGENTFLEET_MODEL_RETRY_BASE_S", 0.5, _positive_float),
        gemini_base_url=env.get("AGENTFLEET_GEMINI_BASE_URL", None, _http_url),
        migrations_dir=env.get("AGENTFLEET_MIGRATIONS_DIR", None, _directory),
        client_token=env.get("AGENTFLEET_TOKEN", None, _nonempty),
        client_project=env.get("AGENTFLEET_PROJECT", None, _nonempty),
        otlp_endpoint=env.get("OTEL_EXPORTER_OTLP_ENDPOINT", None, _http_url),
        otel_service_name=env.get("OTEL_SERVICE_NAME", None, _nonempty),
    )


class _Env:
    def __init__(self, environ: Mapping[str, str]) -> None:
        self._environ = environ

    def get(self, name: str, default: T, parse: Callable[[str], T]) -> T:
        raw = self._environ.get(name)
        if raw is None or raw.strip() == "":
            return default
        try:
            return parse(raw.strip())
        except ValueError as exc:
            raise ConfigError(name, f"{exc} (got {raw!r})") from None


def _nonempty(raw: str) -> str:
    return raw


def _directory(raw: str) -> Path:
    path = Path(raw)
    if not path.is_dir():
        raise ValueError("is not a directory")
    return path


def _int_range(low: int, high: int) -> Callable[[str], int]:
    def parse(raw: str) -> int:
        try:
            value = int(raw)
        except ValueError:
            raise ValueError("must be an integer") from None
        if not low <= value <= high:
            raise ValueError(f"must be between {low} and {high}")
        return value

    return parse


_port = _int_range(1, 65535)


def _positive_float(raw: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        raise ValueError("must be a number") from None
    if value <= 0:
        raise ValueError("must be greater than 0")
    return value


def _choice(*choices: str) -> Callable[[str], str]:
    def parse(raw: str) -> str:
        if raw.lower() not in choices:
            raise ValueError(f"must be one of {', '.join(choices)}")
        return raw.lower()

    return parse


def _bool(raw: str) -> bool:
    lowered = raw.lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise ValueError("must be true or false")


def _on_off(raw: str) -> bool:
    lowered = raw.lower()
    if lowered not in ("on", "off"):
        raise ValueError("must be on or off")
    return lowered == "on"


def _address(raw: str) -> str:
    host, sep, port = raw.rpartition(":")
    if not sep or not host:
        raise ValueError("must be host:port")
    _port(port)
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


def _http_url(raw: str) -> str:
    parts = urlsplit(raw)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError("must be an http:// or https:// URL")
    return raw.rstrip("/")


def child_environment(overrides: Mapping[str, str]) -> dict[str, str]:
    """This process's environment plus ``overrides``, for the service processes it starts."""
    return {**os.environ, **overrides}
