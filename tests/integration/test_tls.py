"""TLS and mTLS on real gRPC servers on loopback, with CAs made in the test: TLS clients
are served, plaintext ones refused; mTLS refuses clients without a certificate of its
client CA at the handshake; certificate files replaced on disk reach new connections
without a restart; a TLS stack's services reach each other over mTLS; the settings and
the CLI's flags that go together are refused alone."""

from __future__ import annotations

import asyncio
import os
import ssl
from pathlib import Path

import asyncpg
import grpc
import pytest
import structlog
from cryptography import x509
from grpc_health.v1 import health_pb2, health_pb2_grpc

from agentfleet.auth import AllowAll
from agentfleet.cli.client import connection_from
from agentfleet.cli.main import build_parser
from agentfleet.config import ConfigError, load_settings
from agentfleet.errors import InvalidArgument
from agentfleet.rpc.clients import open_channel
from agentfleet.rpc.grpc_server import READINESS, RunningServer, start_server
from agentfleet.rpc.tls import ClientTls, ServerCertificateFiles, ServerTls, is_loopback
from agentfleet.testing.certificates import CertificateAuthority, IssuedCertificate
from agentfleet.testing.services import start_stack
from agentfleet.v1 import registry_pb2, registry_pb2_grpc

SERVING = health_pb2.HealthCheckResponse.SERVING
# Each test channel gets its own connection (grpc may otherwise share one between channels).
OWN_CONNECTION = [("grpc.use_local_subchannel_pool", 1)]


async def health(address: str, tls: ClientTls | None, service: str = "") -> int:
    async with open_channel(address, tls=tls, options=OWN_CONNECTION) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        reply = await stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=5)
        return reply.status


async def refused_code(address: str, tls: ClientTls | None) -> grpc.StatusCode:
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await health(address, tls)
    return refused.value.code()


def replace_atomically(path: Path, content: bytes) -> None:
    """The way a Secret volume or a certificate renewer swaps a file: write, then rename."""
    staged = path.with_suffix(path.suffix + ".new")
    staged.write_bytes(content)
    os.replace(staged, path)


async def tls_server(tls: ServerTls) -> RunningServer:
    return await start_server(
        host="127.0.0.1", port=0, registrations=(), authenticator=AllowAll(), tls=tls
    )


@pytest.fixture
def first_ca() -> CertificateAuthority:
    return CertificateAuthority("first")


def server_files(ca: CertificateAuthority, folder: Path, *, client_ca: Path | None = None):  # type: ignore[no-untyped-def]
    cert_file, key_file = ca.issue("server").write(folder, "server")
    return ServerTls(cert_file=cert_file, key_file=key_file, client_ca_file=client_ca)


async def test_tls_server_serves_tls_clients_and_refuses_plaintext_ones(
    first_ca: CertificateAuthority, tmp_path: Path
) -> None:
    server = await tls_server(server_files(first_ca, tmp_path))
    address = f"127.0.0.1:{server.port}"
    try:
        assert await health(address, ClientTls(ca_file=first_ca.write(tmp_path))) == SERVING
        assert await refused_code(address, None) == grpc.StatusCode.UNAVAILABLE
        # A client that trusts another CA does not accept this server.
        stranger = CertificateAuthority("stranger").write(tmp_path)
        assert await refused_code(address, ClientTls(ca_file=stranger)) == (
            grpc.StatusCode.UNAVAILABLE
        )
    finally:
        await server.stop(0)


async def test_mtls_admits_only_clients_with_a_certificate_of_its_client_ca(
    first_ca: CertificateAuthority, tmp_path: Path
) -> None:
    ca_file = first_ca.write(tmp_path)
    server = await tls_server(server_files(first_ca, tmp_path, client_ca=ca_file))
    address = f"127.0.0.1:{server.port}"
    own_cert, own_key = first_ca.issue("client").write(tmp_path, "client")
    other_cert, other_key = CertificateAuthority("other").issue("client").write(tmp_path, "other")
    try:
        without_cert = ClientTls(ca_file=ca_file)
        assert await refused_code(address, without_cert) == grpc.StatusCode.UNAVAILABLE
        signed_elsewhere = ClientTls(ca_file=ca_file, cert_file=other_cert, key_file=other_key)
        assert await refused_code(address, signed_elsewhere) == grpc.StatusCode.UNAVAILABLE
        admitted = ClientTls(ca_file=ca_file, cert_file=own_cert, key_file=own_key)
        assert await health(address, admitted) == SERVING
    finally:
        await server.stop(0)


def served_serial(port: int) -> int:
    """The serial of the certificate the server presents to a new TLS connection."""
    pem = ssl.get_server_certificate(("127.0.0.1", port), timeout=5)
    return x509.load_pem_x509_certificate(pem.encode()).serial_number


async def test_certificate_files_replaced_on_disk_reach_new_connections_without_restart(
    first_ca: CertificateAuthority, tmp_path: Path
) -> None:
    tls = server_files(first_ca, tmp_path / "serving")
    server = await tls_server(tls)
    address = f"127.0.0.1:{server.port}"
    trusts_first = ClientTls(ca_file=first_ca.write(tmp_path))
    second_ca = CertificateAuthority("second")
    trusts_second = ClientTls(ca_file=second_ca.write(tmp_path))
    try:
        assert await health(address, trusts_first) == SERVING
        assert await refused_code(address, trusts_second) == grpc.StatusCode.UNAVAILABLE

        renewed = second_ca.issue("server")
        replace_atomically(tls.key_file, renewed.key_pem)
        replace_atomically(tls.cert_file, renewed.cert_pem)

        assert await health(address, trusts_second) == SERVING
        assert await refused_code(address, trusts_first) == grpc.StatusCode.UNAVAILABLE
        assert await asyncio.to_thread(served_serial, server.port) == renewed.serial
    finally:
        await server.stop(0)


def test_a_renewed_certificate_is_not_served_until_its_key_matches(
    first_ca: CertificateAuthority, tmp_path: Path
) -> None:
    tls = server_files(first_ca, tmp_path)
    files = ServerCertificateFiles(tls)
    loaded = files.configuration
    assert files.fetch() is None  # unchanged files: nothing to reload

    renewed: IssuedCertificate = first_ca.issue("server")
    replace_atomically(tls.cert_file, renewed.cert_pem)  # the key is not there yet
    with structlog.testing.capture_logs() as logs:
        assert files.fetch() is None
    assert files.configuration is loaded
    assert [e["event"] for e in logs] == ["tls_reload_skipped"]
    assert "is not the key of" in logs[0]["error"]

    replace_atomically(tls.key_file, renewed.key_pem)
    assert files.fetch() is not None
    assert files.configuration is not loaded


async def test_one_warning_when_listening_beyond_loopback_in_plain_text() -> None:
    assert all(map(is_loopback, ("127.0.0.1", "::1", "[::1]", "localhost")))
    assert not any(map(is_loopback, ("0.0.0.0", "::", "10.0.0.5", "agentfleet.example")))
    with structlog.testing.capture_logs() as logs:
        # Bound, never sent to: the test only listens on the wildcard address.
        server = await start_server(
            host="0.0.0.0", port=0, registrations=(), authenticator=AllowAll()
        )
        await server.stop(0)
        local = await start_server(
            host="127.0.0.1", port=0, registrations=(), authenticator=AllowAll()
        )
        await local.stop(0)
    warnings = [e for e in logs if e["event"] == "plaintext_listener"]
    assert len(warnings) == 1
    assert warnings[0]["log_level"] == "warning"
    assert warnings[0]["address"].startswith("0.0.0.0:")


@pytest.mark.parametrize(
    ("variable", "needs"),
    [
        ("AGENTFLEET_TLS_CERT_FILE", "AGENTFLEET_TLS_KEY_FILE"),
        ("AGENTFLEET_TLS_KEY_FILE", "AGENTFLEET_TLS_CERT_FILE"),
        ("AGENTFLEET_TLS_CLIENT_CA_FILE", "AGENTFLEET_TLS_CERT_FILE"),
        ("AGENTFLEET_TLS_CLIENT_CERT_FILE", "AGENTFLEET_TLS_CLIENT_KEY_FILE"),
    ],
)
def test_tls_files_that_only_work_together_are_refused_alone(
    variable: str, needs: str, tmp_path: Path
) -> None:
    some_file = tmp_path / "x.pem"
    some_file.write_text("x")
    with pytest.raises(ConfigError) as refused:
        load_settings({variable: str(some_file)})
    assert refused.value.variable == variable
    assert needs in str(refused.value)
    with pytest.raises(ConfigError, match="is not a file"):
        load_settings({"AGENTFLEET_TLS_CA_FILE": str(tmp_path / "missing.pem")})


async def test_a_mtls_stack_serves_rpcs_and_its_services_reach_each_other(
    database_url: str, db_pool: asyncpg.Pool, tmp_path: Path
) -> None:
    ca = CertificateAuthority("fleet")
    ca_file = ca.write(tmp_path)
    cert_file, key_file = ca.issue("service").write(tmp_path, "service")
    client_cert, client_key = ca.issue("operator").write(tmp_path, "operator")
    stack = await start_stack(
        database_url=database_url,
        pool=db_pool,
        environ={
            "AGENTFLEET_TLS_CERT_FILE": str(cert_file),
            "AGENTFLEET_TLS_KEY_FILE": str(key_file),
            "AGENTFLEET_TLS_CLIENT_CA_FILE": str(ca_file),
            "AGENTFLEET_TLS_CA_FILE": str(ca_file),
            "AGENTFLEET_TLS_CLIENT_CERT_FILE": str(cert_file),
            "AGENTFLEET_TLS_CLIENT_KEY_FILE": str(key_file),
        },
    )
    try:
        operator = ClientTls(ca_file=ca_file, cert_file=client_cert, key_file=client_key)
        executor = stack.address("executor")
        # The executor is ready only once its probe reached the toolpool, over mTLS.
        assert await health(executor, operator, service=READINESS) == SERVING
        token = await stack.create_token("tls-project")
        async with open_channel(executor, token=token, tls=operator) as channel:
            reply = await registry_pb2_grpc.AgentRegistryServiceStub(channel).ListAgentDefinitions(
                registry_pb2.ListAgentDefinitionsRequest(project_id="tls-project"), timeout=5
            )
        assert list(reply.agent_definitions) == []
        assert await refused_code(executor, ClientTls(ca_file=ca_file)) == (
            grpc.StatusCode.UNAVAILABLE
        )
    finally:
        await stack.close()


def test_cli_tls_flags_override_the_settings_and_refuse_half_a_pair(tmp_path: Path) -> None:
    ca = CertificateAuthority("cli")
    ca_file = ca.write(tmp_path)
    cert_file, key_file = ca.issue("operator").write(tmp_path, "operator")
    other_ca = CertificateAuthority("other").write(tmp_path)
    settings = load_settings({"AGENTFLEET_TLS_CA_FILE": str(other_ca)})
    parser = build_parser()

    plain = connection_from(parser.parse_args(["agents"]), load_settings({}))
    assert plain.tls is None
    from_settings = connection_from(parser.parse_args(["agents"]), settings)
    assert from_settings.tls == ClientTls(ca_file=other_ca)
    flags = ["--tls-ca-file", str(ca_file), "--tls-cert-file", str(cert_file)]
    overridden = connection_from(
        parser.parse_args(["agents", *flags, "--tls-key-file", str(key_file)]), settings
    )
    assert overridden.tls == ClientTls(ca_file=ca_file, cert_file=cert_file, key_file=key_file)

    with pytest.raises(InvalidArgument, match="--tls-key-file"):
        connection_from(parser.parse_args(["agents", *flags]), settings)
    with pytest.raises(InvalidArgument, match="--tls-ca-file"):
        connection_from(
            parser.parse_args(["agents", "--tls-ca-file", str(tmp_path / "nowhere.pem")]),
            settings,
        )
