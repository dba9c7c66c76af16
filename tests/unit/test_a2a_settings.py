"""The a2a service's own settings, and its HTTP port taken."""

from __future__ import annotations

import socket

import pytest

from agentfleet.a2a_settings import A2ASettings, load_a2a_settings
from agentfleet.config import ConfigError
from agentfleet.rpc.grpc_server import PortInUse
from services.a2a.server import bind_http


def test_defaults_and_values() -> None:
    assert load_a2a_settings({}) == A2ASettings(http_port=50055, max_body_bytes=1024 * 1024)
    assert load_a2a_settings(
        {"AGENTFLEET_A2A_HTTP_PORT": "0", "AGENTFLEET_A2A_MAX_BODY_BYTES": "2048"}
    ) == A2ASettings(http_port=0, max_body_bytes=2048)
    assert load_a2a_settings({}).grpc_binding_port == 50057
    assert load_a2a_settings({"AGENTFLEET_A2A_GRPC_BINDING_PORT": "-1"}).grpc_binding_port == -1


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("AGENTFLEET_A2A_HTTP_PORT", "70000"),
        ("AGENTFLEET_A2A_HTTP_PORT", "http"),
        ("AGENTFLEET_A2A_MAX_BODY_BYTES", "10"),
        ("AGENTFLEET_A2A_MAX_BODY_BYTES", str(65 * 1024 * 1024)),
        ("AGENTFLEET_A2A_GRPC_BINDING_PORT", "-2"),
        ("AGENTFLEET_A2A_GRPC_BINDING_PORT", "grpc"),
    ],
)
def test_a_bad_value_names_its_variable(variable: str, value: str) -> None:
    with pytest.raises(ConfigError) as refused:
        load_a2a_settings({variable: value})
    assert refused.value.variable == variable


def test_a_port_in_use_names_the_setting() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(PortInUse, match="AGENTFLEET_A2A_HTTP_PORT"):
            bind_http("127.0.0.1", port)
