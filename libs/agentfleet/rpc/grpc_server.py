"""The one bootstrap every service uses to serve gRPC.

It builds a ``grpc.aio`` server with health, reflection, the limits of
:mod:`agentfleet.rpc.grpc_limits`, and the request interceptor that authenticates the caller,
checks the method against the token (service tokens: their service's methods only; admin
methods: admin tokens only) and the request's project, binds request scope for logs, and
turns domain errors into canonical status codes with ``google.rpc`` details. Nothing
reaches a caller as UNKNOWN or with a stack trace.

Health answers for :data:`LIVENESS` (and ``""``): SERVING from start until graceful
shutdown, so an orchestrator never kills a process that is only waiting for a dependency;
and for :data:`READINESS` and each served service's name: SERVING only while the service
can do its work (:meth:`RunningServer.set_ready`, driven by
:mod:`agentfleet.observability.readiness`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import grpc
import structlog
from google.protobuf import any_pb2
from google.protobuf.message import DecodeError
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection
from grpc_status import rpc_status
from opentelemetry import trace
from opentelemetry.instrumentation.grpc import aio_server_interceptor
from opentelemetry.trace import Status, StatusCode

from agentfleet.auth import Authenticator, Principal, bearer_token, current_principal
from agentfleet.caller_errors import caller_error, internal_failure
from agentfleet.errors import (
    AgentFleetError,
    InvalidArgument,
    Unavailable,
)
from agentfleet.observability.loop_watch import doing, rpc_label
from agentfleet.observability.telemetry import current_trace_id
from agentfleet.request_checks import checked_request
from agentfleet.rpc.grpc_limits import CallSlots, server_options
from agentfleet.rpc.grpc_streams import (
    HandlerInterceptor,
    Stream,
    StreamsClosedInTheirTask,
    closed_with_the_rpc,
    serving,
)
from agentfleet.rpc.stream_reauth import END, StreamReauth
from agentfleet.rpc.tls import ServerCertificateFiles, ServerTls, is_loopback
from agentfleet.rpc.wire_budget import TooManyEntries, check_entries
from agentfleet.settings.server_limits import ServerLimits

log = structlog.get_logger(__name__)

MAX_MESSAGE_BYTES = 16 * 1024 * 1024
_OPEN_PREFIXES = ("/grpc.health.v1.Health/", "/grpc.reflection.")
LIVENESS = "liveness"
"""Health service name that says the process is up (also ``""``)."""
READINESS = "readiness"
"""Health service name that says the service can reach what it needs."""


class PortInUse(Unavailable):
    """The listen address could not be bound."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Registration:
    """One servicer to serve: the generated ``add_*_to_server`` function and its service."""

    add_to_server: Callable[[Any, grpc.aio.Server], None]
    servicer: object
    service_name: str
    """Full name, e.g. ``agentfleet.v1.ExecutorService``."""
    admin_methods: frozenset[str] = field(default_factory=frozenset)
    """Method names (``InstallProduct``) that need an admin token of the project."""

    @classmethod
    def of(
        cls,
        pb2: ModuleType,
        pb2_grpc: ModuleType,
        service: str,
        servicer: object,
        *,
        admin_methods: Iterable[str] = (),
    ) -> Registration:
        """Registration of ``service`` from its generated modules, e.g. ``history_pb2``."""
        methods = frozenset(admin_methods)
        known = {m.name for m in pb2.DESCRIPTOR.services_by_name[service].methods}
        if not methods <= known:
            raise ValueError(f"{service} has no methods {sorted(methods - known)}")
        return cls(
            add_to_server=getattr(pb2_grpc, f"add_{service}Servicer_to_server"),
            servicer=servicer,
            service_name=pb2.DESCRIPTOR.services_by_name[service].full_name,
            admin_methods=methods,
        )


@dataclass(kw_only=True, slots=True)
class RunningServer:
    server: grpc.aio.Server
    port: int
    health: health.aio.HealthServicer
    service_names: tuple[str, ...]
    _stopped: bool = False

    async def set_ready(self, ready: bool) -> None:
        """Readiness (and each served service's health); ignored once shutdown began."""
        status = (
            health_pb2.HealthCheckResponse.SERVING
            if ready
            else health_pb2.HealthCheckResponse.NOT_SERVING
        )
        for name in (READINESS, *self.service_names):
            await self.health.set(name, status)

    async def stop(self, grace_s: float) -> None:
        """Health NOT_SERVING first (load balancers stop sending), then drain and stop."""
        if self._stopped:
            return
        self._stopped = True
        await self.health.enter_graceful_shutdown()
        await self.server.stop(grace_s)


async def start_server(
    *,
    host: str,
    port: int,
    registrations: Sequence[Registration],
    authenticator: Authenticator,
    limits: ServerLimits | None = None,
    extra_interceptors: Sequence[grpc.aio.ServerInterceptor] = (),
    tls: ServerTls | None = None,
    reuse_port: bool = False,
) -> RunningServer:
    """Builds, binds and starts a server; ``port=0`` picks a free port; TLS when ``tls``
    is given (mTLS when it names a client CA), else plain text; ``reuse_port``: the port is
    shared with other processes that ask the same (SO_REUSEPORT).

    Raises :class:`PortInUse` when the address cannot be bound, and
    :class:`agentfleet.rpc.tls.CertificateError` when the TLS files cannot serve.
    """
    limits = limits or ServerLimits()
    admin = {f"/{r.service_name}/{method}" for r in registrations for method in r.admin_methods}
    server = grpc.aio.server(
        interceptors=[
            StreamsClosedInTheirTask(),
            aio_server_interceptor(),
            RequestInterceptor(
                authenticator,
                admin_methods=frozenset(admin),
                call_slots=CallSlots(limits),
            ),
            *extra_interceptors,
        ],
        options=[
            # Off unless asked: a second process could otherwise bind the same port silently.
            # An executor host's workers ask, to share its port (agentfleet.process.host).
            ("grpc.so_reuseport", int(reuse_port)),
            ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
            ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
            *server_options(limits),
        ],
        maximum_concurrent_rpcs=limits.max_concurrent_rpcs,
    )
    for registration in registrations:
        registration.add_to_server(registration.servicer, server)
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    names = tuple(r.service_name for r in registrations)
    reflection.enable_server_reflection(
        (
            *names,
            health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
            reflection.SERVICE_NAME,
        ),
        server,
    )
    address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    try:
        if tls is not None:
            bound = server.add_secure_port(address, ServerCertificateFiles(tls).credentials())
        else:
            bound = server.add_insecure_port(address)
    except RuntimeError as exc:
        raise PortInUse(f"cannot listen on {address}: address already in use") from exc
    if bound == 0:
        raise PortInUse(f"cannot listen on {address}: address already in use")
    if tls is None and not is_loopback(host):
        log.warning(
            "plaintext_listener",
            address=address,
            hint="tokens cross the network in clear: set AGENTFLEET_TLS_CERT_FILE and _KEY_FILE",
        )
    await server.start()
    for name in ("", LIVENESS, READINESS, *names):
        await health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
    return RunningServer(server=server, port=bound, health=health_servicer, service_names=names)


def to_status(error: AgentFleetError) -> grpc.Status:
    """A domain error as a rich status: code, message, and BadRequest field violations."""
    details: list[any_pb2.Any] = []
    if isinstance(error, InvalidArgument) and error.violations:
        bad_request = error_details_pb2.BadRequest(
            field_violations=[
                error_details_pb2.BadRequest.FieldViolation(
                    field=v.field, description=v.description
                )
                for v in error.violations
            ]
        )
        packed = any_pb2.Any()
        packed.Pack(bad_request)
        details.append(packed)
    status = status_pb2.Status(
        code=getattr(code_pb2, error.code.name), message=error.message, details=details
    )
    return rpc_status.to_status(status)


class RequestInterceptor(HandlerInterceptor):
    """Auth, project scope, request-scoped logging, and error mapping for every RPC."""

    def __init__(
        self,
        authenticator: Authenticator,
        *,
        admin_methods: frozenset[str],
        call_slots: CallSlots | None = None,
    ) -> None:
        self._authenticator = authenticator
        self._admin_methods = admin_methods
        self._slots = call_slots or CallSlots(ServerLimits())

    def wrap(
        self, handler: grpc.RpcMethodHandler, method: str, details: grpc.HandlerCallDetails
    ) -> grpc.RpcMethodHandler:
        if method.startswith(_OPEN_PREFIXES):
            return handler
        if handler.request_streaming:
            # No agentfleet RPC streams requests; refuse rather than serve one unchecked.
            return grpc.unary_unary_rpc_method_handler(_unimplemented_streaming)
        token = bearer_token(details.invocation_metadata)  # type: ignore[attr-defined]
        if handler.response_streaming:
            behavior = self._wrap_stream(handler.unary_stream, method, token)
        else:
            behavior = self._wrap_unary(handler.unary_unary, method, token)
        return serving(
            handler, behavior, request_deserializer=_tolerant(handler.request_deserializer)
        )

    async def _admit(self, method: str, token: str | None, request: Any) -> Principal:
        principal = await self._authenticator.authenticate(token)
        # The one place where a token's role and service decide which methods it may call.
        principal.check_method(method, admin_only=method in self._admin_methods)
        if isinstance(request, _Undecodable):
            raise InvalidArgument(f"the request cannot be parsed: {request.error}")
        _scope_request_to_project(request, principal)
        violations = await checked_request(request)
        if violations:
            raise InvalidArgument.for_fields(violations)
        return principal

    @contextlib.asynccontextmanager
    async def _admitted(
        self,
        method: str,
        token: str | None,
        request: Any,
        slot: Callable[[Principal], contextlib.AbstractContextManager[None]],
    ) -> AsyncIterator[None]:
        """The call admitted (:meth:`_admit`), holding its ``slot`` and with its principal
        current for the block."""
        principal = await self._admit(method, token, request)
        # Counted only once admitted: a refused call holds nothing.
        with slot(principal):
            reset = current_principal.set(principal)
            try:
                yield
            finally:
                current_principal.reset(reset)

    def _wrap_unary(
        self, behavior: Callable[..., Awaitable[Any]], method: str, token: str | None
    ) -> Callable[[Any, grpc.aio.ServicerContext], Awaitable[Any]]:
        async def unary(request: Any, context: grpc.aio.ServicerContext) -> Any:
            with (
                structlog.contextvars.bound_contextvars(rpc=method, trace_id=current_trace_id()),
                doing(rpc_label(method, request)),
            ):
                try:
                    async with self._admitted(method, token, request, self._slots.unary):
                        return await behavior(request, context)
                except Exception as exc:  # every failure becomes a status in _abort
                    await _abort(context, method, exc)

        return unary

    def _wrap_stream(self, behavior: Stream, method: str, token: str | None) -> Stream:
        @closed_with_the_rpc
        async def serve(
            request: Any, context: grpc.aio.ServicerContext
        ) -> AsyncGenerator[Any, None]:
            with (
                structlog.contextvars.bound_contextvars(rpc=method, trace_id=current_trace_id()),
                doing(rpc_label(method, request)),
            ):
                try:
                    async with (
                        self._admitted(method, token, request, self._slots.stream),
                        contextlib.aclosing(behavior(request, context)) as responses,
                        # Authenticated once on admission; re-checked while it stays open.
                        StreamReauth(self._authenticator, token) as reauth,
                    ):
                        while (response := await reauth.next(responses)) is not END:
                            yield response
                except Exception as exc:  # every failure becomes a status in _abort
                    await _abort(context, method, exc)

        return serve


def _scope_request_to_project(request: Any, principal: Principal) -> None:
    """Checks (or fills in) ``project_id`` so no RPC acts outside the token's project."""
    descriptor = getattr(request, "DESCRIPTOR", None)
    if descriptor is None or "project_id" not in descriptor.fields_by_name:
        return
    if not request.project_id and principal.project_id is not None:
        request.project_id = principal.project_id
    if not request.project_id:
        raise InvalidArgument.for_field("project_id", "is required")
    principal.check_project(request.project_id)


@dataclass(frozen=True, slots=True)
class _Undecodable:
    """Stands for a request whose bytes do not parse (too deeply nested, truncated)."""

    error: str


def _tolerant(deserializer: Callable[[bytes], Any] | None) -> Callable[[bytes], Any] | None:
    """The deserializer, returning :class:`_Undecodable` instead of raising: grpc would
    answer a raising deserializer with UNKNOWN; the interceptor answers INVALID_ARGUMENT."""
    if deserializer is None:
        return None
    descriptor = getattr(getattr(deserializer, "__self__", None), "DESCRIPTOR", None)

    def deserialize(data: bytes) -> Any:
        try:
            if descriptor is not None:
                check_entries(data, descriptor)  # before upb's parse of big maps
            return deserializer(data)
        except (DecodeError, TooManyEntries) as exc:
            return _Undecodable(str(exc))

    return deserialize


async def _abort(context: grpc.aio.ServicerContext, method: str, exc: BaseException) -> None:
    if isinstance(exc, grpc.aio.AbortError | asyncio.CancelledError):
        raise exc
    if context.done():
        # The caller cancelled or its deadline passed: there is nobody to answer.
        log.info("rpc_abandoned", error=f"{type(exc).__name__}: {exc}")
        return
    error = caller_error(exc, method)
    if error is not None:
        if error.code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.PERMISSION_DENIED):
            log.warning("rpc_refused", code=error.code.name, error=error.message)
        _record_status(error.code, error.message)
        await context.abort_with_status(to_status(error))
    message = internal_failure(exc)
    _record_status(grpc.StatusCode.INTERNAL, message)
    await context.abort(grpc.StatusCode.INTERNAL, message)


# The codes OpenTelemetry's RPC conventions count as the server's own failure.
_SERVER_FAULTS = frozenset(
    {
        grpc.StatusCode.UNKNOWN,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.UNIMPLEMENTED,
        grpc.StatusCode.INTERNAL,
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DATA_LOSS,
    }
)


def _record_status(code: grpc.StatusCode, message: str) -> None:
    """Puts the RPC's final code on the instrumentation's SERVER span: it only sees codes
    set through ``context.abort``, not the ``abort_with_status`` our details need."""
    span = trace.get_current_span()
    span.set_attribute("rpc.grpc.status_code", code.value[0])
    if code in _SERVER_FAULTS:
        span.set_status(Status(StatusCode.ERROR, f"{code}:{message}"))


async def _unimplemented_streaming(request: Any, context: grpc.aio.ServicerContext) -> None:
    await context.abort(grpc.StatusCode.UNIMPLEMENTED, "client-streaming RPCs are not supported")
