"""agentfleet.caller_errors: what a caller is told for an exception of a handler."""

from __future__ import annotations

import asyncpg
import grpc

from agentfleet.caller_errors import caller_error
from agentfleet.errors import InvalidArgument


def test_our_errors_reach_the_caller_as_they_are() -> None:
    error = InvalidArgument("name: is required")
    assert caller_error(error, "/m") is error


def test_a_missing_handler_is_unimplemented_naming_the_method() -> None:
    error = caller_error(NotImplementedError(), "/agentfleet.v1.X/Y")
    assert error is not None
    assert error.code == grpc.StatusCode.UNIMPLEMENTED
    assert "/agentfleet.v1.X/Y" in error.message


def test_the_pool_closing_at_shutdown_is_unavailable_not_our_failure() -> None:
    error = caller_error(asyncpg.InterfaceError("pool is closing"), "/m")
    assert error is not None
    assert error.code == grpc.StatusCode.UNAVAILABLE


def test_a_dropped_database_connection_is_unavailable() -> None:
    error = caller_error(asyncpg.InterfaceError("connection is closed"), "/m")
    assert error is not None
    assert error.code == grpc.StatusCode.UNAVAILABLE


def test_anything_else_is_internal() -> None:
    assert caller_error(KeyError("x"), "/m") is None
    assert caller_error(asyncpg.InterfaceError("cannot perform operation"), "/m") is None
