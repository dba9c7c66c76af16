import dataclasses
from pathlib import Path

import pytest

from agentfleet.config import _SERVER_LIMITS, DEFAULT_PORTS, ConfigError, load_settings
from agentfleet.settings.server_limits import ServerLimits


def test_defaults_need_no_environment() -> None:
    settings = load_settings({})
    assert settings.database_url is None
    assert dict(settings.ports) == DEFAULT_PORTS
    assert settings.addresses["toolpool"] == "127.0.0.1:50052"
    assert settings.auth_enabled is True
    assert settings.data_dir == Path(".data").absolute()
    assert not settings.uses_real_gemini
    assert settings.event_loop == "uvloop"
    assert settings.timeout_grace_s == 30.0  # seed 003: up to 30 s to summarize
    assert settings.max_mcp_calls_per_project == 100
    assert (
        load_settings({"AGENTFLEET_MAX_MCP_CALLS_PER_PROJECT": "7"}).max_mcp_calls_per_project == 7
    )


@pytest.mark.parametrize(
    ("variable", "value", "reason"),
    [
        ("DATABASE_URL", "mysql://localhost/db", "must be a postgresql:// URL"),
        ("DATABASE_URL", "postgresql://localhost:99999/db", "invalid port"),
        ("DATABASE_URL", "postgresql:///db", "names no host"),
        ("AGENTFLEET_EXECUTOR_PORT", "http", "must be an integer"),
        ("AGENTFLEET_HISTORY_PORT", "70000", "between 1 and 65535"),
        ("AGENTFLEET_AUTH", "maybe", "must be on or off"),
        ("AGENTFLEET_TOOLPOOL_ADDR", "toolpool", "must be host:port"),
        ("AGENTFLEET_LOG_FORMAT", "xml", "must be one of"),
        ("AGENTFLEET_SHUTDOWN_GRACE_S", "-1", "greater than 0"),
        ("AGENTFLEET_EVENT_LOOP", "trio", "must be one of"),
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "collector:4317", "http"),
        ("AGENTFLEET_MAX_MCP_CALLS_PER_PROJECT", "0", "between 1 and"),
        ("AGENTFLEET_DISPATCHER_MAX_RESUMES", "101", "between 0 and 100"),
        ("AGENTFLEET_DISPATCHER_TASK_TIMEOUT_S", "0", "at least 0.001s"),
        ("AGENTFLEET_DISPATCHER_TASK_TIMEOUT_S", "soon", "must be a number of seconds"),
    ],
)
def test_bad_values_name_the_variable(variable: str, value: str, reason: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings({variable: value})
    assert caught.value.variable == variable
    assert str(caught.value).startswith(f"{variable}: ")
    assert reason in str(caught.value)
    assert value in str(caught.value)


def test_pool_bounds_are_checked_together() -> None:
    with pytest.raises(ConfigError, match="AGENTFLEET_DB_POOL_MAX"):
        load_settings({"AGENTFLEET_DB_POOL_MIN": "5", "AGENTFLEET_DB_POOL_MAX": "2"})


def test_socket_urls_and_overrides_are_accepted() -> None:
    settings = load_settings(
        {
            "DATABASE_URL": "postgresql://postgres@/agentfleet?host=/tmp/pg",
            "AGENTFLEET_AUTH": "off",
            "AGENTFLEET_EXECUTOR_PORT": "6000",
            "GOOGLE_API_KEY": "k",
        }
    )
    assert settings.database_url == "postgresql://postgres@/agentfleet?host=/tmp/pg"
    assert settings.auth_enabled is False
    assert settings.ports["executor"] == 6000
    assert settings.addresses["executor"] == "127.0.0.1:6000"
    assert settings.uses_real_gemini


def test_the_api_key_never_shows_in_repr() -> None:
    settings = load_settings({"GEMINI_API_KEY": "super-secret-key"})
    assert settings.gemini_api_key == "super-secret-key"
    assert "super-secret-key" not in repr(settings)


def test_a_base_url_routes_to_the_stub_even_with_a_key() -> None:
    settings = load_settings(
        {"GEMINI_API_KEY": "k", "AGENTFLEET_GEMINI_BASE_URL": "http://127.0.0.1:9999/"}
    )
    assert settings.gemini_base_url == "http://127.0.0.1:9999"
    assert not settings.uses_real_gemini


def test_executor_timing_settings() -> None:
    settings = load_settings(
        {
            "AGENTFLEET_EXECUTOR_LEASE_S": "5",
            "AGENTFLEET_EXECUTOR_HEARTBEAT_S": "1",
            "AGENTFLEET_TIMEOUT_GRACE_S": "2.5",
        }
    )
    assert (settings.executor_lease_s, settings.executor_heartbeat_s) == (5.0, 1.0)
    assert settings.timeout_grace_s == 2.5
    with pytest.raises(ConfigError, match="AGENTFLEET_EXECUTOR_HEARTBEAT_S: must be shorter"):
        load_settings({"AGENTFLEET_EXECUTOR_LEASE_S": "5", "AGENTFLEET_EXECUTOR_HEARTBEAT_S": "5"})


def test_cli_and_migration_settings(tmp_path: Path) -> None:
    settings = load_settings(
        {
            "AGENTFLEET_TOKEN": "af_secret",
            "AGENTFLEET_PROJECT": "demo",
            "AGENTFLEET_MIGRATIONS_DIR": str(tmp_path),
        }
    )
    assert (settings.client_token, settings.client_project) == ("af_secret", "demo")
    assert settings.migrations_dir == tmp_path
    assert "af_secret" not in repr(settings)
    with pytest.raises(ConfigError, match="AGENTFLEET_MIGRATIONS_DIR: is not a directory"):
        load_settings({"AGENTFLEET_MIGRATIONS_DIR": str(tmp_path / "missing")})


def test_every_grpc_server_limit_is_read_from_its_variable() -> None:
    # One variable per ServerLimits field: a field left out of the table would silently keep
    # its default whatever the operator sets.
    values = {f.name: getattr(ServerLimits(), f.name) for f in dataclasses.fields(ServerLimits)}
    environ = {variable: str(values[name] + 1) for name, (variable, _) in _SERVER_LIMITS.items()}
    limits = load_settings(environ).grpc_limits
    assert {f.name: getattr(limits, f.name) for f in dataclasses.fields(ServerLimits)} == {
        name: value + 1 for name, value in values.items()
    }


def test_the_schema_pool_has_defaults_and_settings() -> None:
    defaults = load_settings({})
    assert (defaults.schema_workers, defaults.schema_timeout_s) == (2, 2.0)
    chosen = load_settings({"AGENTFLEET_SCHEMA_WORKERS": "4", "AGENTFLEET_SCHEMA_TIMEOUT_S": "0.5"})
    assert (chosen.schema_workers, chosen.schema_timeout_s) == (4, 0.5)
    with pytest.raises(ConfigError, match="AGENTFLEET_SCHEMA_WORKERS"):
        load_settings({"AGENTFLEET_SCHEMA_WORKERS": "0"})
