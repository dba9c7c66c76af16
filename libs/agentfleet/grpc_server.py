"""The one bootstrap every service uses to serve gRPC.

It builds a ``grpc.aio`` server with health, reflection, and the request interceptor that
authenticates the caller, checks the request's project against the token, binds request
scope for logs, and turns domain errors into canonical status codes with ``google.rpc``
details. Nothing reaches a caller as UNKNOWN or with a stack trace.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
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
from agentfleet.errors import (
    AgentFleetError,
    FieldViolation,
    InvalidArgument,
    Unavailable,
    Unimplemented,
)
from agentfleet.telemetry import current_trace_id

log = structlog.get_logger(__name__)

MAX_MESSAGE_BYTES = 16 * 1024 * 1024
_OPEN_PREFIXES = ("/grpc.health.v1.Health/", "/grpc.reflection.")


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
    """Method names (``InstallProduct``) that need an admin or service token."""

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
    extra_interceptors: Sequence[grpc.aio.ServerInterceptor] = (),
) -> RunningServer:
    """Builds, binds and starts a server; ``port=0`` picks a free port.

    Raises :class:`PortInUse` when the address cannot be bound.
    """
    admin = {f"/{r.service_name}/{method}" for r in registrations for method in r.admin_methods}
    server = grpc.aio.server(
        interceptors=[
            aio_server_interceptor(),
            RequestInterceptor(authenticator, admin_methods=frozenset(admin)),
            *extra_interceptors,
        ],
        options=[
            # Without this a second process could bind the same port silently.
            ("grpc.so_reuseport", 0),
            ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
            ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
        ],
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
        bound = server.add_insecure_port(address)
    except RuntimeError as exc:
        raise PortInUse(f"cannot listen on {address}: address already in use") from exc
    if bound == 0:
        raise PortInUse(f"cannot listen on {address}: address already in use")
    await server.start()
    for name in ("", *names):
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


class RequestInterceptor(grpc.aio.ServerInterceptor):
    """Auth, project scope, request-scoped logging, and error mapping for every RPC."""

    def __init__(self, authenticator: Authenticator, *, admin_methods: frozenset[str]) -> None:
        self._authenticator = authenticator
        self._admin_methods = admin_methods

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(handler_call_details)
        method: str = handler_call_details.method  # type: ignore[attr-defined]
        if handler is None or method.startswith(_OPEN_PREFIXES):
            return handler
        if handler.request_streaming:
            # No agentfleet RPC streams requests; refuse rather than serve one unchecked.
            return grpc.unary_unary_rpc_method_handler(_unimplemented_streaming)
        metadata = handler_call_details.invocation_metadata  # type: ignore[attr-defined]
        token = bearer_token(metadata)
        if handler.response_streaming:
            return grpc.unary_stream_rpc_method_handler(
                self._wrap_stream(handler.unary_stream, method, token),
                request_deserializer=_tolerant(handler.request_deserializer),
                response_serializer=handler.response_serializer,
            )
        return grpc.unary_unary_rpc_method_handler(
            self._wrap_unary(handler.unary_unary, method, token),
            request_deserializer=_tolerant(handler.request_deserializer),
            response_serializer=handler.response_serializer,
        )

    async def _admit(self, method: str, token: str | None, request: Any) -> Principal:
        principal = await self._authenticator.authenticate(token)
        if isinstance(request, _Undecodable):
            raise InvalidArgument(f"the request cannot be parsed: {request.error}")
        if method in self._admin_methods and principal.role == "member":
            from agentfleet.errors import PermissionDenied

            raise PermissionDenied(f"{method.rsplit('/', 1)[-1]} needs an admin token")
        _scope_request_to_project(request, principal)
        violations = request_violations(request)
        if violations:
            raise InvalidArgument.for_fields(violations)
        return principal

    def _wrap_unary(
        self, behavior: Callable[..., Awaitable[Any]], method: str, token: str | None
    ) -> Callable[[Any, grpc.aio.ServicerContext], Awaitable[Any]]:
        async def unary(request: Any, context: grpc.aio.ServicerContext) -> Any:
            with structlog.contextvars.bound_contextvars(rpc=method, trace_id=current_trace_id()):
                try:
                    principal = await self._admit(method, token, request)
                    reset = current_principal.set(principal)
                    try:
                        return await behavior(request, context)
                    finally:
                        current_principal.reset(reset)
                except Exception as exc:  # every failure becomes a status in _abort
                    await _abort(context, method, exc)

        return unary

    def _wrap_stream(
        self, behavior: Callable[..., AsyncIterator[Any]], method: str, token: str | None
    ) -> Callable[[Any, grpc.aio.ServicerContext], AsyncIterator[Any]]:
        async def stream(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
            with structlog.contextvars.bound_contextvars(rpc=method, trace_id=current_trace_id()):
                try:
                    principal = await self._admit(method, token, request)
                    reset = current_principal.set(principal)
                    try:
                        async for response in behavior(request, context):
                            yield response
                    finally:
                        current_principal.reset(reset)
                except Exception as exc:  # every failure becomes a status in _abort
                    await _abort(context, method, exc)

        return stream


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

    def deserialize(data: bytes) -> Any:
        try:
            return deserializer(data)
        except DecodeError as exc:
            return _Undecodable(str(exc))

    return deserialize


# The ranges google.protobuf.Duration and Timestamp document as valid.
_MAX_DURATION_S = 315_576_000_000
_MIN_TIMESTAMP_S = -62_135_596_800  # 0001-01-01T00:00:00Z
_MAX_TIMESTAMP_S = 253_402_300_799  # 9999-12-31T23:59:59Z


def request_violations(message: Any, path: str = "") -> list[FieldViolation]:
    """Fields no service can store or convert, wherever they are in a request: strings with
    NUL characters (PostgreSQL text and jsonb refuse them) and out-of-range Durations and
    Timestamps (converting them overflows). Checked once here for every RPC."""
    name = message.DESCRIPTOR.full_name
    if name == "google.protobuf.Duration":
        seconds, nanos = message.seconds, message.nanos
        if (
            abs(seconds) > _MAX_DURATION_S
            or abs(nanos) > 999_999_999
            or (seconds > 0 > nanos or seconds < 0 < nanos)
        ):
            return [FieldViolation(path, "is not a valid Duration")]
        return []
    if name == "google.protobuf.Timestamp":
        if not _MIN_TIMESTAMP_S <= message.seconds <= _MAX_TIMESTAMP_S or not (
            0 <= message.nanos <= 999_999_999
        ):
            return [FieldViolation(path, "is not a valid Timestamp (years 1 to 9999)")]
        return []
    out: list[FieldViolation] = []
    for field_descriptor, value in message.ListFields():
        where = f"{path}.{field_descriptor.name}" if path else field_descriptor.name
        if (
            field_descriptor.message_type is not None
            and field_descriptor.message_type.GetOptions().map_entry
        ):
            value_field = field_descriptor.message_type.fields_by_name["value"]
            for key, item in value.items():
                item_path = f"{where}[{key!r}]"
                if isinstance(key, str) and "\x00" in key:
                    out.append(FieldViolation(item_path, "keys must not contain NUL characters"))
                out += _value_violations(value_field, item, item_path)
        elif field_descriptor.is_repeated:
            for index, item in enumerate(value):
                out += _value_violations(field_descriptor, item, f"{where}[{index}]")
        else:
            out += _value_violations(field_descriptor, value, where)
        if len(out) >= 10:
            break
    return out


def _value_violations(field_descriptor: Any, value: Any, path: str) -> list[FieldViolation]:
    if field_descriptor.message_type is not None:
        return request_violations(value, path)
    if isinstance(value, str) and "\x00" in value:
        return [FieldViolation(path, "must not contain NUL characters")]
    return []


async def _abort(context: grpc.aio.ServicerContext, method: str, exc: BaseException) -> None:
    if isinstance(exc, grpc.aio.AbortError | asyncio.CancelledError):
        raise exc
    if isinstance(exc, NotImplementedError):
        exc = Unimplemented(f"{method} is not implemented yet")
    if isinstance(exc, AgentFleetError) and exc.code != grpc.StatusCode.INTERNAL:
        if exc.code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.PERMISSION_DENIED):
            log.warning("rpc_refused", code=exc.code.name, error=exc.message)
        _record_status(exc.code, exc.message)
        await context.abort_with_status(to_status(exc))
    reference = uuid.uuid4().hex[:12]
    log.error("rpc_failed", reference=reference, exc_info=exc)
    trace.get_current_span().record_exception(exc)
    message = f"internal error (reference {reference})"
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
