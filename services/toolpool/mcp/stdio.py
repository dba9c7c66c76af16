"""The stdio transport: newline-delimited JSON-RPC with a server process, lines bounded.

The SDK's ``stdio_client`` gathers a line by concatenating every chunk to what it holds, with
no limit and no hook: a 50 MB line cost 18 s of the toolpool's loop (each 64 KiB chunk
copies the whole line again) and 290 MB. This is the same transport with the line read by
:class:`~.limits.LineBuffer`: linear, and refused past
:data:`~.limits.MAX_MESSAGE_BYTES`. Spawning and stopping follow the SDK's: the server
gets only the SDK's minimal environment plus its own variables, runs in a new process
group, and at the end gets its stdin closed, then SIGTERM, then SIGKILL to the group.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any, TextIO

import anyio
import mcp_types as types
from anyio.abc import Process
from mcp import StdioServerParameters
from mcp.client.stdio import get_default_environment
from mcp.os.posix.utilities import terminate_posix_process_tree
from mcp.shared.message import SessionMessage

from .limits import LineBuffer, MessageLimit, MessageTooLarge

# As the SDK's: the server's grace to exit once its stdin closes, then to die after SIGTERM.
EXIT_GRACE_S = 2.0
KILL_GRACE_S = 2.0
_STREAM_ENDS = (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream, OSError)


@contextlib.asynccontextmanager
async def stdio_transport(
    params: StdioServerParameters, errlog: TextIO, limit: MessageLimit
) -> AsyncIterator[tuple[Any, Any]]:
    """(read stream, write stream) of a started server; the server is stopped on exit."""
    process = await anyio.open_process(
        [params.command, *params.args],
        env=get_default_environment() | (params.env or {}),
        stderr=errlog,
        start_new_session=True,
    )
    # No await between the spawn and the task group's finally: a cancellation there
    # would leak the process.
    read_writer, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_stream, write_reader = anyio.create_memory_object_stream[SessionMessage](0)

    async def read_stdout() -> None:
        assert process.stdout is not None
        lines = LineBuffer(limit)
        reading = True
        with contextlib.suppress(*_STREAM_ENDS):
            async for chunk in process.stdout:
                try:
                    for line in lines.feed(chunk) if reading else ():
                        if line.strip():
                            await read_writer.send(_parse(line))
                except (MessageTooLarge, anyio.ClosedResourceError, anyio.BrokenResourceError):
                    # Refused (the connection was told) or the session is gone: the rest is
                    # read and dropped until the server exits, or it would block writing.
                    reading = False
                    await read_writer.aclose()
        await read_writer.aclose()

    async def write_stdin() -> None:
        assert process.stdin is not None
        try:
            async with write_reader:
                async for message in write_reader:
                    text = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                    await process.stdin.send(text.encode() + b"\n")
        except _STREAM_ENDS:
            # The server stopped reading: end the session rather than leave calls waiting.
            await read_writer.aclose()

    async with anyio.create_task_group() as tg:
        tg.start_soon(read_stdout)
        tg.start_soon(write_stdin)
        try:
            yield read_stream, write_stream
        finally:
            # Shielded and bounded: a cancelled owner still stops the server.
            with anyio.CancelScope(shield=True):
                read_stream.close()  # the reader drops what follows (see read_stdout)
                await _stop(process)
            tg.cancel_scope.cancel()


def _parse(line: bytes) -> SessionMessage | Exception:
    try:
        return SessionMessage(types.jsonrpc_message_adapter.validate_json(line, by_name=False))
    except ValueError as exc:
        return exc  # the session surfaces it, as the SDK's transport does


async def _stop(process: Process) -> None:
    """Close stdin, give the server its grace, then end its whole process group.

    The reader meanwhile drains stdout: closing our end of the pipe does not close its fd
    (anyio), so a server blocked writing a refused message would never see it end."""
    assert process.stdin is not None
    with contextlib.suppress(*_STREAM_ENDS):
        await process.stdin.aclose()
    if not await _exited(process, EXIT_GRACE_S):
        await terminate_posix_process_tree(process, KILL_GRACE_S)
        if not await _exited(process, KILL_GRACE_S):
            return  # unkillable: abandoned, as the SDK does
    with anyio.move_on_after(KILL_GRACE_S):
        await process.aclose()  # reaped, so no transport is left open


async def _exited(process: Process, timeout_s: float) -> bool:
    # Polled, not process.wait(): that also waits for the pipes, which a child of the
    # server may hold open after the server itself exited; no event says it exited.
    with anyio.move_on_after(timeout_s):
        while process.returncode is None:  # noqa: ASYNC110
            await anyio.sleep(0.01)
    return process.returncode is not None
