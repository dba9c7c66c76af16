"""Connection settings of the remote commands and one error line for every failed call.

Addresses come from ``--executor-addr`` and friends, else the ``AGENTFLEET_<SERVICE>_ADDR``
settings; the token from ``--token`` else ``AGENTFLEET_TOKEN``; the project from
``--project`` else ``AGENTFLEET_PROJECT``; TLS files from ``--tls-ca-file``,
``--tls-cert-file`` and ``--tls-key-file``, else ``AGENTFLEET_TLS_CA_FILE``,
``AGENTFLEET_TLS_CLIENT_CERT_FILE`` and ``AGENTFLEET_TLS_CLIENT_KEY_FILE`` (a CA file turns
TLS on; the certificate and key are for servers that require mTLS).

Every stub handed out is wrapped so that a failed call raises :class:`CliError` with the
canonical gRPC code and, for an unreachable service, the address that was tried.
"""

from __future__ import annotations

import argparse
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from agentfleet.config import SERVICE_NAMES, Settings
from agentfleet.errors import InvalidArgument
from agentfleet.rpc.clients import open_channel
from agentfleet.rpc.tls import ClientTls, client_tls
from agentfleet.v1 import (
    dispatcher_pb2_grpc,
    executor_pb2_grpc,
    history_pb2_grpc,
    registry_pb2_grpc,
    toolpool_pb2_grpc,
    triggers_pb2_grpc,
)

# Unary calls give up after this long; streams (run, watch) have no deadline.
UNARY_TIMEOUT_S = 30.0


class CliError(Exception):
    """A command failed; printed as ``agentfleet: <CODE>: <message>``."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


def add_connection_flags(parser: argparse.ArgumentParser) -> None:
    """The flags every remote command accepts (after the command name)."""
    group = parser.add_argument_group("connection")
    group.add_argument("--project", help="project to act on (default: $AGENTFLEET_PROJECT)")
    group.add_argument("--token", help="bearer token (default: $AGENTFLEET_TOKEN)")
    for name in SERVICE_NAMES:
        group.add_argument(
            f"--{name}-addr",
            metavar="HOST:PORT",
            help=f"{name} address (default: $AGENTFLEET_{name.upper()}_ADDR)",
        )
    group.add_argument(
        "--tls-ca-file",
        type=Path,
        metavar="PEM",
        help="use TLS, verifying the services with this CA (default: $AGENTFLEET_TLS_CA_FILE)",
    )
    group.add_argument(
        "--tls-cert-file",
        type=Path,
        metavar="PEM",
        help="client certificate for mTLS (default: $AGENTFLEET_TLS_CLIENT_CERT_FILE)",
    )
    group.add_argument(
        "--tls-key-file",
        type=Path,
        metavar="PEM",
        help="key of that certificate (default: $AGENTFLEET_TLS_CLIENT_KEY_FILE)",
    )


@dataclass(kw_only=True, slots=True)
class Connection:
    """Where the services are, who is calling, and for which project."""

    addresses: Mapping[str, str]
    token: str | None
    project_id: str | None
    tls: ClientTls | None = None
    """TLS files of the channels; None = plain text."""
    _channels: dict[str, grpc.aio.Channel] = field(default_factory=dict)

    @property
    def project(self) -> str:
        """The project, or a CliError saying how to name one."""
        if not self.project_id:
            raise CliError(
                "INVALID_ARGUMENT", "no project: pass --project or set AGENTFLEET_PROJECT"
            )
        return self.project_id

    def _stub(self, service: str, stub_class: Callable[[grpc.aio.Channel], Any]) -> GuardedStub:
        if service not in self._channels:
            self._channels[service] = open_channel(
                self.addresses[service], token=self.token, tls=self.tls
            )
        return GuardedStub(stub_class(self._channels[service]), service, self.addresses[service])

    def executor(self) -> Any:
        return self._stub("executor", executor_pb2_grpc.ExecutorServiceStub)

    def registry(self) -> Any:
        return self._stub("executor", registry_pb2_grpc.AgentRegistryServiceStub)

    def triggers(self) -> Any:
        return self._stub("executor", triggers_pb2_grpc.TriggerServiceStub)

    def toolpool(self) -> Any:
        return self._stub("toolpool", toolpool_pb2_grpc.ToolPoolServiceStub)

    def dispatcher(self) -> Any:
        return self._stub("dispatcher", dispatcher_pb2_grpc.DispatcherServiceStub)

    def history(self) -> Any:
        return self._stub("history", history_pb2_grpc.HistoryServiceStub)

    async def close(self) -> None:
        for channel in self._channels.values():
            await channel.close()
        self._channels.clear()


def connection_from(args: argparse.Namespace, settings: Settings) -> Connection:
    """Flags first, then the settings (AGENTFLEET_TOKEN, AGENTFLEET_PROJECT, *_ADDR)."""
    addresses = {
        name: getattr(args, f"{name}_addr", None) or settings.addresses[name]
        for name in SERVICE_NAMES
    }
    return Connection(
        addresses=addresses,
        token=getattr(args, "token", None) or settings.client_token,
        project_id=getattr(args, "project", None) or settings.client_project,
        tls=_tls_from(args, settings),
    )


def _tls_from(args: argparse.Namespace, settings: Settings) -> ClientTls | None:
    """Each TLS flag overrides its setting; TLS is on when a CA file is known."""
    from_settings = client_tls(settings) or ClientTls()
    ca_file = getattr(args, "tls_ca_file", None) or from_settings.ca_file
    cert_file = getattr(args, "tls_cert_file", None) or from_settings.cert_file
    key_file = getattr(args, "tls_key_file", None) or from_settings.key_file
    if ca_file is None and cert_file is None:
        return None
    if ca_file is None:
        raise InvalidArgument.for_field("--tls-ca-file", "is needed with --tls-cert-file")
    if (cert_file is None) != (key_file is None):
        raise InvalidArgument.for_field("--tls-key-file", "goes with --tls-cert-file")
    for flag, path in (("ca", ca_file), ("cert", cert_file), ("key", key_file)):
        if path is not None and not path.is_file():
            raise InvalidArgument.for_field(f"--tls-{flag}-file", f"{path} is not a file")
    return ClientTls(ca_file=ca_file, cert_file=cert_file, key_file=key_file)


def rpc_error(exc: grpc.aio.AioRpcError, service: str, address: str) -> CliError:
    """One readable line for a failed call; an unreachable service names its address."""
    code = exc.code()
    details = (exc.details() or "").strip().splitlines()
    message = details[0] if details else code.name.lower()
    if code == grpc.StatusCode.UNAVAILABLE:
        message = f"cannot reach {service} at {address} ({message})"
    return CliError(code.name, message)


class GuardedStub:
    """A stub whose calls raise :class:`CliError` instead of ``AioRpcError``."""

    def __init__(self, stub: Any, service: str, address: str) -> None:
        self._stub = stub
        self._service = service
        self._address = address

    def __getattr__(self, method: str) -> Callable[..., Any]:
        callable_ = getattr(self._stub, method)
        if isinstance(callable_, grpc.aio.UnaryStreamMultiCallable):
            return lambda request, **kwargs: self._stream(callable_, request, **kwargs)
        return lambda request, **kwargs: self._unary(callable_, request, **kwargs)

    async def _unary(self, callable_: Any, request: Any, **kwargs: Any) -> Any:
        kwargs.setdefault("timeout", UNARY_TIMEOUT_S)
        try:
            return await callable_(request, **kwargs)
        except grpc.aio.AioRpcError as exc:
            raise rpc_error(exc, self._service, self._address) from None

    async def _stream(self, callable_: Any, request: Any, **kwargs: Any) -> AsyncIterator[Any]:
        call = callable_(request, **kwargs)
        try:
            async for item in call:
                yield item
        except grpc.aio.AioRpcError as exc:
            raise rpc_error(exc, self._service, self._address) from None
        finally:
            call.cancel()
