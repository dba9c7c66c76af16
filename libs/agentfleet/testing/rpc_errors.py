"""What a refused RPC said: its error or status code (a unary call or a whole stream) and
the ``google.rpc.BadRequest`` field violations of its status."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable
from typing import Any

import grpc
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from agentfleet.request_ids import REUSED_REQUEST_ID


async def rpc_error(call: Awaitable[Any] | AsyncIterator[Any]) -> grpc.aio.AioRpcError:
    """The error of a unary call, or of a stream read to its end; AssertionError when the
    call succeeds."""
    error = await _ended(call)
    if error is None:
        raise AssertionError("the call succeeded; a refusal was expected")
    return error


async def status_code(call: Awaitable[Any] | AsyncIterator[Any]) -> grpc.StatusCode:
    """The status of a unary call or a whole stream (OK when it succeeds)."""
    error = await _ended(call)
    return grpc.StatusCode.OK if error is None else error.code()


async def _ended(call: Awaitable[Any] | AsyncIterator[Any]) -> grpc.aio.AioRpcError | None:
    """Awaits a unary call, or reads a stream to its end: its error, or None."""
    try:
        # A stream call (UnaryStreamCall) iterates but is no AsyncIterator to isinstance.
        if hasattr(call, "__aiter__"):
            async for _ in call:  # type: ignore[union-attr]
                pass
        else:
            await call  # type: ignore[misc]
    except grpc.aio.AioRpcError as exc:
        return exc
    return None


def field_violations(error: grpc.aio.AioRpcError) -> dict[str, str]:
    """Field path -> description of every BadRequest violation in the error's status."""
    status = rpc_status.from_call(error)
    assert status is not None
    out: dict[str, str] = {}
    for detail in status.details:
        bad_request = error_details_pb2.BadRequest()
        if detail.Unpack(bad_request):
            out.update({v.field: v.description for v in bad_request.field_violations})
    return out


def assert_reused_request_id(error: grpc.aio.AioRpcError) -> None:
    """The refusal of a request_id used before for a different request (AIP-155)."""
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, error
    assert field_violations(error) == {"request_id": REUSED_REQUEST_ID}
