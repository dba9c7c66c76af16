"""Settings read from the environment — the only module that touches ``os.environ``.

Every value is parsed and validated here, so a bad setting stops a process at start with one
line naming the variable (:class:`ConfigError`), never deep inside a request.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar

from agentfleet import config_values as parsers
from agentfleet.run_limits import DEFAULT_MAX_RESUMES, MAX_RESUMES_LIMIT
from agentfleet.settings import model_prices
from agentfleet.settings.model_prices import PriceTable
from agentfleet.settings.quota_settings import (
    TIERS,
    ModelLimits,
    parse_model_quotas,
    parse_project_weights,
)
from agentfleet.settings.server_limits import ServerLimits
from agentfleet.settings.trigger_limits import TriggerLimits

T = TypeVar("T")

SERVICE_NAMES = ("executor", "toolpool", "dispatcher", "history", "a2a")
DEFAULT_PORTS = {
    "executor": 50051,
    "toolpool": 50052,
    "dispatcher": 50053,
    "history": 50054,
    # The a2a service's gRPC port serves health only; its A2A HTTP port is 50055
    # (AGENTFLEET_A2A_HTTP_PORT, libs/agentfleet/a2a_settings.py).
    "a2a": 50056,
}
DEFAULT_METRICS_PORTS = {
    "executor": 9464,
    "toolpool": 9465,
    "dispatcher": 9466,
    "history": 9467,
    "a2a": 9468,
}


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
    """AGENTFLEET_SERVICE_TOKEN: this service's own token, presented to the services it calls."""
    service_token_file: Path | None = None
    """AGENTFLEET_SERVICE_TOKEN_FILE: file holding that token, re-read when it changes."""
    token_cache_ttl_s: float = 10.0
    """AGENTFLEET_TOKEN_CACHE_TTL_S: how long a token verdict is cached (revocation delay);
    open streams re-check their token every half of it (:mod:`agentfleet.rpc.stream_reauth`)."""
    trigger_limits: TriggerLimits = field(default_factory=TriggerLimits)
    """AGENTFLEET_TRIGGER_*, AGENTFLEET_SCHEDULE_MIN_INTERVAL_S,
    AGENTFLEET_MAX_SCHEDULES_PER_PROJECT, AGENTFLEET_EVENT_MAX_PAYLOAD_BYTES: what triggers
    and schedules may start (:mod:`agentfleet.settings.trigger_limits`)."""
    grpc_limits: ServerLimits = field(default_factory=ServerLimits)
    """AGENTFLEET_GRPC_*, AGENTFLEET_MAX_STREAMS_PER_TOKEN / _PER_PROJECT and
    AGENTFLEET_MAX_UNARY_PER_TOKEN / _PER_PROJECT: the limits every gRPC server applies, one
    field each (:class:`~agentfleet.settings.server_limits.ServerLimits`)."""
    db_pool_min: int
    db_pool_max: int
    shutdown_grace_s: float
    """AGENTFLEET_SHUTDOWN_GRACE_S: how long SIGTERM waits for in-flight work."""
    event_loop: str = "uvloop"
    """AGENTFLEET_EVENT_LOOP=uvloop|asyncio: the event loop of the executor, dispatcher and
    history processes (uvloop, the default: libuv's loop, about 10% less executor CPU per
    step with 1,000 runs in flight -- bench/RESULTS.md; asyncio: the standard library's).
    The toolpool always runs asyncio's: it starts stdio MCP servers
    (:func:`~agentfleet.process.service_runtime.run_service`)."""
    executor_concurrency: int
    """AGENTFLEET_EXECUTOR_CONCURRENCY: runs one executor process executes at once."""
    executor_builtin_tools: str = "inprocess"
    """AGENTFLEET_EXECUTOR_BUILTIN_TOOLS=inprocess|toolpool: where the built-in tools run
    (inprocess, the default: inside the executor, with the toolpool's own CallTool code,
    which saves the gRPC hop's CPU -- bench/RESULTS.md; toolpool: over CallTool). MCP tools
    always go to the toolpool."""
    executor_group_commit: str = "on"
    """AGENTFLEET_EXECUTOR_GROUP_COMMIT=on|off: whether concurrent runs' step writes share a
    commit (on, the default: one transaction for the writes ready at once, DESIGN §4; off:
    each write its own, for comparison)."""
    max_running_per_project: int
    """AGENTFLEET_MAX_RUNNING_PER_PROJECT: top-level runs and runs of tasks one project may
    have running (services/executor/store/caps.py)."""
    max_queued_per_project: int
    """AGENTFLEET_MAX_QUEUED_PER_PROJECT: top-level runs and runs of tasks one project may
    have queued (services/executor/store/caps.py)."""
    history_retention_days: int = 0
    """AGENTFLEET_HISTORY_RETENTION_DAYS: days a finished run tree is kept (a project's own
    setting, SetHistoryRetention, overrides it); 0 keeps history forever."""
    history_prune_interval_s: float = 600.0
    """AGENTFLEET_HISTORY_PRUNE_INTERVAL_S: how often the history service prunes."""
    trigger_outbox_retention_hours: int = 168
    """AGENTFLEET_TRIGGER_OUTBOX_RETENTION_HOURS: hours a consumed trigger outbox event is
    kept before the history prune deletes it (unconsumed ones are kept until consumed); an
    EmitEvent request_id repeated within it is the same event, later a new one."""
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
    dispatcher_triage_model: str | None = None
    """AGENTFLEET_DISPATCHER_TRIAGE_MODEL: model deciding what to do with a failed task of a
    graph created with ``llm_triage``; unset = mechanical retries for every graph."""
    dispatcher_task_timeout_s: float | None
    """AGENTFLEET_DISPATCHER_TASK_TIMEOUT_S: a dispatched task's run timeout when the task
    names none (before the agent's default_timeout); unset = the agent's."""
    dispatcher_max_resumes: int
    """AGENTFLEET_DISPATCHER_MAX_RESUMES: resumes of a task's paused run before its attempt
    fails, for tasks that name no max_resumes."""
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
    model_prices: PriceTable = field(default_factory=lambda: PriceTable.with_overrides({}))
    """AGENTFLEET_MODEL_PRICES: USD per million tokens by model (JSON), over the dated
    defaults of :data:`agentfleet.settings.model_prices.DEFAULT_PRICES`."""
    gemini_base_url: str | None
    """AGENTFLEET_GEMINI_BASE_URL: send model calls here (the stub server)."""
    model_quota_tier: str = "off"
    """AGENTFLEET_MODEL_QUOTA_TIER=off|free|tier1|tier2|tier3: start from that Gemini API
    tier's published limits (:data:`agentfleet.settings.quota_settings.GEMINI_TIERS`)."""
    model_quotas: Mapping[str, ModelLimits] = field(default_factory=dict)
    """AGENTFLEET_MODEL_QUOTAS: declared limits per model
    (``gemini-2.5-pro:rpm=150,tpm=2000000,rpd=10000,concurrent=20; *:rpm=1000``)."""
    model_quota_weights: Mapping[str, float] = field(default_factory=dict)
    """AGENTFLEET_MODEL_QUOTA_WEIGHTS: ``project=weight,...``; a project not named weighs 1."""
    model_quota_max_wait_s: float = 600.0
    """AGENTFLEET_MODEL_QUOTA_MAX_WAIT_S: longest a model call waits for quota in all."""
    model_quota_grant_s: float = 1.0
    """AGENTFLEET_MODEL_QUOTA_GRANT_S: the stretch of the budget one grant reserves (its
    calls are the slack past the quota; more means fewer database round trips)."""
    model_quota_headroom: float = 0.95
    """AGENTFLEET_MODEL_QUOTA_HEADROOM: the fraction of each declared rate the fleet uses
    (0.95: the server's windows and ours never line up exactly, and network delays shift
    calls across a window's edge)."""
    model_quota_enabled: bool = True
    """AGENTFLEET_MODEL_QUOTA=on|off: off sends model calls with no limiter at all."""
    stub_quota: str | None = None
    """AGENTFLEET_STUB_QUOTA: the offline stub's quota mode (``rpm=20/10s,tpm=100000,rpd=1000``,
    per model: :mod:`agentfleet.gemini_stub.quota`), for the stub ``agentfleet up`` starts and
    ``python -m agentfleet.gemini_stub``; unset = no quota."""
    genai_fast_path: bool = True
    """AGENTFLEET_GENAI_FAST_PATH=on|off: the cheaper google-genai request path (it still
    passes a self-check first); off sends every model call through the SDK's public call."""
    migrations_dir: Path | None
    """AGENTFLEET_MIGRATIONS_DIR: the migrations folder (default: the repository's)."""
    client_token: str | None = field(repr=False)
    """AGENTFLEET_TOKEN: the bearer token the CLI presents."""
    client_project: str | None
    """AGENTFLEET_PROJECT: the project the CLI acts on."""
    otlp_endpoint: str | None
    """OTEL_EXPORTER_OTLP_ENDPOINT: export spans by OTLP when set."""
    otel_service_name: str | None
    metrics_ports: Mapping[str, int] = field(default_factory=lambda: dict(DEFAULT_METRICS_PORTS))
    """AGENTFLEET_<SERVICE>_METRICS_PORT: each service's Prometheus /metrics port; 0 = off."""
    metrics_sample_s: float = 15.0
    """AGENTFLEET_METRICS_SAMPLE_S: how often the queue-depth gauges query the database."""
    loop_lag_warn_s: float = 0.5
    """AGENTFLEET_LOOP_LAG_WARN_S: event-loop lag past which a warning names what held it."""
    executor_processes: int = 0
    """AGENTFLEET_EXECUTOR_PROCESSES: worker processes one executor runs on its one port
    (:mod:`agentfleet.process.host`); 0 (the default) = the cores the process may use."""
    grpc_reuse_port: bool = False
    """AGENTFLEET_GRPC_REUSE_PORT=on|off: bind the gRPC port with SO_REUSEPORT; set by an
    executor host for its workers, which share its port (off: a second bind fails)."""
    mcp_stdio_allowlist: tuple[tuple[str, ...], ...] = ()
    """AGENTFLEET_MCP_STDIO_ALLOWLIST: command lines stdio MCP servers may run ('' = none)."""
    mcp_allowed_networks: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...] = ()
    """AGENTFLEET_MCP_ALLOWED_NETWORKS: CIDRs MCP URLs may reach despite being non-public."""
    secrets_keys: tuple[tuple[str, bytes], ...] = field(default=(), repr=False)
    """AGENTFLEET_SECRETS_KEYS: ``id:base64key`` AES-256 keys for secrets; the first is current."""
    max_secrets_per_project: int = 100
    """AGENTFLEET_MAX_SECRETS_PER_PROJECT: secrets one project may hold (SetSecret refuses a
    new one past it). Every MCP connection and tool call reads and redacts them all."""
    schema_workers: int = 2
    """AGENTFLEET_SCHEMA_WORKERS: processes checking values against tenants' and MCP servers'
    schemas (:mod:`agentfleet.bounded.schema_pool`), started when first needed."""
    schema_timeout_s: float = 2.0
    """AGENTFLEET_SCHEMA_TIMEOUT_S: longest one such check may run; its worker is killed past it."""
    max_mcp_calls_per_project: int = 100
    """AGENTFLEET_MAX_MCP_CALLS_PER_PROJECT: MCP tool calls one project may have in progress
    in one toolpool process (CallTool past it is RESOURCE_EXHAUSTED, which the run's model
    reads as the call's error)."""
    tls_cert_file: Path | None = None
    """AGENTFLEET_TLS_CERT_FILE: PEM certificate the gRPC server presents; unset = plain text."""
    tls_key_file: Path | None = None
    """AGENTFLEET_TLS_KEY_FILE: PEM private key of that certificate (both re-read on change)."""
    tls_client_ca_file: Path | None = None
    """AGENTFLEET_TLS_CLIENT_CA_FILE: CA that must sign client certificates (mTLS); unset = none."""
    tls_ca_file: Path | None = None
    """AGENTFLEET_TLS_CA_FILE: CA verifying the servers this process calls; set = TLS channels."""
    tls_client_cert_file: Path | None = None
    """AGENTFLEET_TLS_CLIENT_CERT_FILE: certificate this process presents to mTLS servers."""
    tls_client_key_file: Path | None = None
    """AGENTFLEET_TLS_CLIENT_KEY_FILE: private key of that client certificate."""
    readiness_interval_s: float = 2.0
    """AGENTFLEET_READINESS_INTERVAL_S: how often readiness probes PostgreSQL (and the toolpool)."""
    readiness_timeout_s: float = 2.0
    """AGENTFLEET_READINESS_TIMEOUT_S: a probe slower than this counts as unreachable."""

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
        name: env.get(f"AGENTFLEET_{name.upper()}_PORT", DEFAULT_PORTS[name], parsers.port_number)
        for name in SERVICE_NAMES
    }
    addresses = {
        name: env.get(
            f"AGENTFLEET_{name.upper()}_ADDR", f"127.0.0.1:{ports[name]}", parsers.address
        )
        for name in SERVICE_NAMES
    }
    lease_s = env.get("AGENTFLEET_EXECUTOR_LEASE_S", 30.0, parsers.positive_float)
    heartbeat_s = env.get("AGENTFLEET_EXECUTOR_HEARTBEAT_S", 10.0, parsers.positive_float)
    if heartbeat_s >= lease_s:
        raise ConfigError(
            "AGENTFLEET_EXECUTOR_HEARTBEAT_S", "must be shorter than AGENTFLEET_EXECUTOR_LEASE_S"
        )
    pool_min = env.get("AGENTFLEET_DB_POOL_MIN", 1, parsers.int_range(0, 1000))
    # 20: holds the busy connections of 256 runs waiting on a model (README, Performance).
    pool_max = env.get("AGENTFLEET_DB_POOL_MAX", 20, parsers.int_range(1, 1000))
    if pool_max < pool_min:
        raise ConfigError("AGENTFLEET_DB_POOL_MAX", "must be >= AGENTFLEET_DB_POOL_MIN")
    service_token = env.get("AGENTFLEET_SERVICE_TOKEN", None, parsers.nonempty)
    service_token_file = env.get("AGENTFLEET_SERVICE_TOKEN_FILE", None, parsers.readable_file)
    if service_token is not None and service_token_file is not None:
        raise ConfigError(
            "AGENTFLEET_SERVICE_TOKEN_FILE", "set it or AGENTFLEET_SERVICE_TOKEN, not both"
        )
    tls_files = {
        name: env.get(f"AGENTFLEET_{name.upper()}", None, parsers.readable_file)
        for name in (
            "tls_cert_file",
            "tls_key_file",
            "tls_client_ca_file",
            "tls_ca_file",
            "tls_client_cert_file",
            "tls_client_key_file",
        )
    }
    _check_tls_files(tls_files)
    return Settings(
        database_url=env.get("DATABASE_URL", None, parsers.database_url),
        data_dir=Path(env.get("AGENTFLEET_DATA_DIR", ".data", parsers.nonempty)).absolute(),
        listen_host=env.get("AGENTFLEET_LISTEN_HOST", "127.0.0.1", parsers.nonempty),
        ports=ports,
        addresses=addresses,
        auth_enabled=env.get("AGENTFLEET_AUTH", True, parsers.on_off),
        service_token=service_token,
        service_token_file=service_token_file,
        token_cache_ttl_s=env.get("AGENTFLEET_TOKEN_CACHE_TTL_S", 10.0, parsers.positive_float),
        grpc_limits=_server_limits(env),
        trigger_limits=_trigger_limits(env),
        db_pool_min=pool_min,
        db_pool_max=pool_max,
        shutdown_grace_s=env.get("AGENTFLEET_SHUTDOWN_GRACE_S", 20.0, parsers.positive_float),
        event_loop=env.get("AGENTFLEET_EVENT_LOOP", "uvloop", parsers.choice("uvloop", "asyncio")),
        # 256: LLM agents wait on the model almost all the time; at ~1 s per model call
        # that is about one core's worth of steps (README, Performance).
        executor_concurrency=env.get(
            "AGENTFLEET_EXECUTOR_CONCURRENCY", 256, parsers.int_range(1, 1000)
        ),
        executor_builtin_tools=env.get(
            "AGENTFLEET_EXECUTOR_BUILTIN_TOOLS",
            "inprocess",
            parsers.choice("inprocess", "toolpool"),
        ),
        executor_group_commit=env.get(
            "AGENTFLEET_EXECUTOR_GROUP_COMMIT", "on", parsers.choice("on", "off")
        ),
        max_running_per_project=env.get(
            "AGENTFLEET_MAX_RUNNING_PER_PROJECT", 64, parsers.int_range(1, 100_000)
        ),
        max_queued_per_project=env.get(
            "AGENTFLEET_MAX_QUEUED_PER_PROJECT", 1000, parsers.int_range(1, 1_000_000)
        ),
        history_retention_days=env.get(
            "AGENTFLEET_HISTORY_RETENTION_DAYS", 0, parsers.int_range(0, 36_500)
        ),
        history_prune_interval_s=env.get(
            "AGENTFLEET_HISTORY_PRUNE_INTERVAL_S", 600.0, parsers.positive_float
        ),
        trigger_outbox_retention_hours=env.get(
            "AGENTFLEET_TRIGGER_OUTBOX_RETENTION_HOURS", 168, parsers.int_range(1, 876_000)
        ),
        executor_lease_s=lease_s,
        executor_heartbeat_s=heartbeat_s,
        timeout_grace_s=env.get("AGENTFLEET_TIMEOUT_GRACE_S", 30.0, parsers.positive_float),
        dispatcher_slots=env.get("AGENTFLEET_DISPATCHER_SLOTS", 8, parsers.int_range(1, 1000)),
        dispatcher_lease_s=env.get("AGENTFLEET_DISPATCHER_LEASE_S", 5.0, parsers.positive_float),
        dispatcher_selector_model=env.get(
            "AGENTFLEET_DISPATCHER_SELECTOR_MODEL", None, parsers.nonempty
        ),
        dispatcher_evaluator_model=env.get(
            "AGENTFLEET_DISPATCHER_EVALUATOR_MODEL", None, parsers.nonempty
        ),
        dispatcher_triage_model=env.get(
            "AGENTFLEET_DISPATCHER_TRIAGE_MODEL", None, parsers.nonempty
        ),
        dispatcher_task_timeout_s=env.get(
            "AGENTFLEET_DISPATCHER_TASK_TIMEOUT_S", None, parsers.timeout_seconds
        ),
        dispatcher_max_resumes=env.get(
            "AGENTFLEET_DISPATCHER_MAX_RESUMES",
            DEFAULT_MAX_RESUMES,
            parsers.int_range(0, MAX_RESUMES_LIMIT),
        ),
        log_format=env.get(
            "AGENTFLEET_LOG_FORMAT", "auto", parsers.choice("auto", "json", "console")
        ),
        log_level=env.get(
            "AGENTFLEET_LOG_LEVEL", "info", parsers.choice("debug", "info", "warning", "error")
        ),
        gemini_api_key=env.get("GEMINI_API_KEY", None, parsers.nonempty)
        or env.get("GOOGLE_API_KEY", None, parsers.nonempty),
        gemini_use_vertex=env.get("GOOGLE_GENAI_USE_VERTEXAI", False, parsers.true_false),
        google_cloud_project=env.get("GOOGLE_CLOUD_PROJECT", None, parsers.nonempty),
        google_cloud_location=env.get("GOOGLE_CLOUD_LOCATION", None, parsers.nonempty),
        model_max_attempts=env.get("AGENTFLEET_MODEL_MAX_ATTEMPTS", 4, parsers.int_range(1, 20)),
        model_retry_base_s=env.get("AGENTFLEET_MODEL_RETRY_BASE_S", 0.5, parsers.positive_float),
        model_prices=env.get(
            "AGENTFLEET_MODEL_PRICES", PriceTable.with_overrides({}), model_prices.parse_prices
        ),
        gemini_base_url=env.get("AGENTFLEET_GEMINI_BASE_URL", None, parsers.http_url),
        genai_fast_path=env.get("AGENTFLEET_GENAI_FAST_PATH", True, parsers.on_off),
        stub_quota=env.get("AGENTFLEET_STUB_QUOTA", None, parsers.nonempty),
        model_quota_tier=env.get("AGENTFLEET_MODEL_QUOTA_TIER", "off", parsers.choice(*TIERS)),
        model_quotas=env.get("AGENTFLEET_MODEL_QUOTAS", {}, parse_model_quotas),
        model_quota_weights=env.get("AGENTFLEET_MODEL_QUOTA_WEIGHTS", {}, parse_project_weights),
        model_quota_max_wait_s=env.get(
            "AGENTFLEET_MODEL_QUOTA_MAX_WAIT_S", 600.0, parsers.positive_float
        ),
        model_quota_grant_s=env.get("AGENTFLEET_MODEL_QUOTA_GRANT_S", 1.0, parsers.positive_float),
        model_quota_headroom=env.get(
            "AGENTFLEET_MODEL_QUOTA_HEADROOM", 0.95, parsers.float_range(0.1, 1.0)
        ),
        model_quota_enabled=env.get("AGENTFLEET_MODEL_QUOTA", True, parsers.on_off),
        migrations_dir=env.get("AGENTFLEET_MIGRATIONS_DIR", None, parsers.directory),
        client_token=env.get("AGENTFLEET_TOKEN", None, parsers.nonempty),
        client_project=env.get("AGENTFLEET_PROJECT", None, parsers.nonempty),
        otlp_endpoint=env.get("OTEL_EXPORTER_OTLP_ENDPOINT", None, parsers.http_url),
        otel_service_name=env.get("OTEL_SERVICE_NAME", None, parsers.nonempty),
        metrics_ports={
            name: env.get(
                f"AGENTFLEET_{name.upper()}_METRICS_PORT", port, parsers.int_range(0, 65535)
            )
            for name, port in DEFAULT_METRICS_PORTS.items()
        },
        metrics_sample_s=env.get("AGENTFLEET_METRICS_SAMPLE_S", 15.0, parsers.positive_float),
        loop_lag_warn_s=env.get("AGENTFLEET_LOOP_LAG_WARN_S", 0.5, parsers.positive_float),
        executor_processes=env.get("AGENTFLEET_EXECUTOR_PROCESSES", 0, parsers.int_range(0, 64)),
        grpc_reuse_port=env.get("AGENTFLEET_GRPC_REUSE_PORT", False, parsers.on_off),
        mcp_stdio_allowlist=env.get("AGENTFLEET_MCP_STDIO_ALLOWLIST", (), parsers.command_lines),
        mcp_allowed_networks=env.get("AGENTFLEET_MCP_ALLOWED_NETWORKS", (), parsers.networks),
        secrets_keys=env.get(
            "AGENTFLEET_SECRETS_KEYS", (), parsers.parse_secrets_keys, secret=True
        ),
        max_secrets_per_project=env.get(
            "AGENTFLEET_MAX_SECRETS_PER_PROJECT", 100, parsers.int_range(1, 100_000)
        ),
        max_mcp_calls_per_project=env.get(
            "AGENTFLEET_MAX_MCP_CALLS_PER_PROJECT", 100, parsers.int_range(1, 100_000)
        ),
        schema_workers=env.get("AGENTFLEET_SCHEMA_WORKERS", 2, parsers.int_range(1, 64)),
        schema_timeout_s=env.get("AGENTFLEET_SCHEMA_TIMEOUT_S", 2.0, parsers.positive_float),
        **tls_files,
        readiness_interval_s=env.get(
            "AGENTFLEET_READINESS_INTERVAL_S", 2.0, parsers.positive_float
        ),
        readiness_timeout_s=env.get("AGENTFLEET_READINESS_TIMEOUT_S", 2.0, parsers.positive_float),
    )


_SECONDS = parsers.positive_float
_SERVER_LIMITS: Mapping[str, tuple[str, Callable[[str], Any]]] = {
    "max_concurrent_rpcs": ("AGENTFLEET_GRPC_MAX_CONCURRENT_RPCS", parsers.int_range(1, 1_000_000)),
    "max_streams_per_connection": (
        "AGENTFLEET_GRPC_MAX_STREAMS_PER_CONNECTION",
        parsers.int_range(1, 100_000),
    ),
    "max_streams_per_token": ("AGENTFLEET_MAX_STREAMS_PER_TOKEN", parsers.int_range(1, 100_000)),
    "max_streams_per_project": (
        "AGENTFLEET_MAX_STREAMS_PER_PROJECT",
        parsers.int_range(1, 1_000_000),
    ),
    "max_unary_per_token": ("AGENTFLEET_MAX_UNARY_PER_TOKEN", parsers.int_range(1, 1_000_000)),
    "max_unary_per_project": ("AGENTFLEET_MAX_UNARY_PER_PROJECT", parsers.int_range(1, 1_000_000)),
    "keepalive_time_s": ("AGENTFLEET_GRPC_KEEPALIVE_S", _SECONDS),
    "keepalive_timeout_s": ("AGENTFLEET_GRPC_KEEPALIVE_TIMEOUT_S", _SECONDS),
    "min_client_ping_interval_s": ("AGENTFLEET_GRPC_MIN_PING_INTERVAL_S", _SECONDS),
    "max_connection_idle_s": ("AGENTFLEET_GRPC_MAX_CONNECTION_IDLE_S", _SECONDS),
    "max_connection_age_s": ("AGENTFLEET_GRPC_MAX_CONNECTION_AGE_S", _SECONDS),
    "max_connection_age_grace_s": ("AGENTFLEET_GRPC_MAX_CONNECTION_AGE_GRACE_S", _SECONDS),
}
"""Each field of :class:`ServerLimits`: its variable and how its value is read."""


def _server_limits(env: _Env) -> ServerLimits:
    """The gRPC server limits; each unset variable keeps :class:`ServerLimits`' default."""
    default = ServerLimits()
    return ServerLimits(
        **{
            name: env.get(variable, getattr(default, name), parse)
            for name, (variable, parse) in _SERVER_LIMITS.items()
        }
    )


_TRIGGER_LIMITS: Mapping[str, tuple[str, Callable[[str], int]]] = {
    "max_chain_depth": ("AGENTFLEET_TRIGGER_MAX_CHAIN_DEPTH", parsers.int_range(1, 20)),
    "max_queued_per_project": (
        "AGENTFLEET_TRIGGER_MAX_QUEUED_PER_PROJECT",
        parsers.int_range(1, 100_000),
    ),
    "max_per_minute": ("AGENTFLEET_TRIGGER_MAX_PER_MINUTE", parsers.int_range(1, 100_000)),
    "max_agents_per_event": ("AGENTFLEET_TRIGGER_MAX_AGENTS_PER_EVENT", parsers.int_range(1, 200)),
    "schedule_min_interval_s": ("AGENTFLEET_SCHEDULE_MIN_INTERVAL_S", parsers.int_range(1, 86_400)),
    "max_schedules_per_project": (
        "AGENTFLEET_MAX_SCHEDULES_PER_PROJECT",
        parsers.int_range(1, 10_000),
    ),
    "max_event_payload_bytes": (
        "AGENTFLEET_EVENT_MAX_PAYLOAD_BYTES",
        parsers.int_range(2, 1024 * 1024),
    ),
}
"""Each field of :class:`TriggerLimits`: its variable and how its value is read."""


def _trigger_limits(env: _Env) -> TriggerLimits:
    """The trigger limits; each unset variable keeps :class:`TriggerLimits`' default."""
    default = TriggerLimits()
    return TriggerLimits(
        **{
            name: env.get(variable, getattr(default, name), parse)
            for name, (variable, parse) in _TRIGGER_LIMITS.items()
        }
    )


def _check_tls_files(files: Mapping[str, Path | None]) -> None:
    """Files that only make sense together: a certificate with its key, mTLS with TLS."""
    pairs = (
        ("tls_cert_file", "tls_key_file"),
        ("tls_key_file", "tls_cert_file"),
        ("tls_client_ca_file", "tls_cert_file"),
        ("tls_client_cert_file", "tls_client_key_file"),
        ("tls_client_key_file", "tls_client_cert_file"),
        ("tls_client_cert_file", "tls_ca_file"),
    )
    for name, needed in pairs:
        if files[name] is not None and files[needed] is None:
            raise ConfigError(f"AGENTFLEET_{name.upper()}", f"needs AGENTFLEET_{needed.upper()}")


class _Env:
    def __init__(self, environ: Mapping[str, str]) -> None:
        self._environ = environ

    def get(self, name: str, default: T, parse: Callable[[str], T], *, secret: bool = False) -> T:
        """``secret``: key material, never echoed in the error."""
        raw = self._environ.get(name)
        if raw is None or raw.strip() == "":
            return default
        try:
            return parse(raw.strip())
        except ValueError as exc:
            got = "" if secret else f" (got {raw!r})"
            raise ConfigError(name, f"{exc}{got}") from None


def child_environment(overrides: Mapping[str, str]) -> dict[str, str]:
    """This process's environment plus ``overrides``, for the service processes it starts."""
    return {**os.environ, **overrides}


_PLAIN_VARIABLES = frozenset({"PATH", "HOME", "USER", "LOGNAME", "TZ", "TMPDIR", "LANG"})


def plain_environment() -> dict[str, str]:
    """Only what any program needs to run (path, home, locale, time zone): for processes
    that are not ours to trust with the platform's secrets, such as the embedded PostgreSQL
    server, which stays dumpable and would otherwise keep the database URL, tokens and
    model key of whoever started it in its ``/proc/<pid>/environ``."""
    return {
        name: value
        for name, value in os.environ.items()
        if name in _PLAIN_VARIABLES or name.startswith("LC_")
    }
