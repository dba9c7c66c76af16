"""Checking a value against a tenant's, a model's caller's or an MCP server's schema without
holding the event loop: in worker processes, with a time limit.

Every project's RPCs and runs share a service's one event loop, so a check whose cost
someone else chose (an output_schema against a model's long answer, an MCP tool's result
against the schema its server declared, a person's edited arguments against a tool's
parameters) runs in a worker process, one check at a time each; a check past
:data:`DEFAULT_TIMEOUT_S` gets its worker killed and replaced, and the caller
:class:`SchemaCheckTimeout` to turn into an error the model or the person reads. A process,
not a thread: a thread holding the GIL would stall the loop as much, and cannot be killed.

A check the bounds prove cheap runs inline: a schema without recursion whose nodes (every
``$ref`` followed), times the value's nodes and string length, stay under
:data:`INLINE_BUDGET` (about 2 ms; measured ~1.2 us a unit). Shipping it to a worker would
cost more than the check.

The pool starts its workers on first use (spawned, as a fork of a process running gRPC's
threads is unsafe) and :meth:`SchemaPool.aclose` stops them; services close it on stop.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from typing import Any, TypeVar

from referencing import Registry
from referencing.exceptions import Unresolvable

from agentfleet.bounded.schema_expansion import schema_expansion
from agentfleet.bounded.tenant_schema import (
    MAX_REPORTED_ERRORS,
    SchemaValidator,
    first_errors,
    validator_class,
)

DEFAULT_WORKERS = 2
DEFAULT_TIMEOUT_S = 2.0
"""Longest a check may run; the worker is killed past it."""
START_TIMEOUT_S = 60.0
"""Longest a new worker may take to start (not counted in a check's time)."""
INLINE_BUDGET = 2_000
"""Schema nodes times value size (nodes, and string characters / 64) checked inline."""
MAX_MESSAGE_CHARS = 300

T = TypeVar("T")


class SchemaCheckTimeout(Exception):
    """The check ran past the pool's time limit; its worker was killed."""

    def __init__(self, timeout_s: float) -> None:
        super().__init__(f"checking the value against the schema took longer than {timeout_s:g} s")
        self.timeout_s = timeout_s


@dataclass(frozen=True, kw_only=True, slots=True)
class Problem:
    """One validation error, as plain data (it crosses a process boundary)."""

    path: tuple[str | int, ...]
    """Where in the value (jsonschema's ``absolute_path``)."""
    message: str
    """jsonschema's message, cut to :data:`MAX_MESSAGE_CHARS`."""
    keyword: str | None
    """The keyword the value broke (``minLength``, ``required``...)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Verdict:
    """What checking a value found."""

    problems: list[Problem] = field(default_factory=list)
    """The first errors (at most :data:`~agentfleet.bounded.tenant_schema.MAX_REPORTED_ERRORS`)."""
    more_text: str = ""
    """``"and 130 more"`` when there were more errors, else empty."""
    schema_error: str | None = None
    """The schema cannot check values (a $ref to nothing, endless recursion...)."""

    @property
    def ok(self) -> bool:
        return not self.problems and self.schema_error is None


def check_value(schema: Mapping[str, Any] | bool, value: Any, any_draft: bool = False) -> Verdict:
    """Checks ``value`` against ``schema`` here and now (what a worker runs).

    ``any_draft``: the draft ``$schema`` names (an MCP server's), else 2020-12. ``$ref``s
    resolve within the schema and the metaschemas only: never over the network."""
    cls = validator_class(schema) if any_draft else SchemaValidator
    try:
        errors = cls(schema, registry=Registry()).iter_errors(value)
        found = first_errors(errors, MAX_REPORTED_ERRORS)
    except RecursionError:
        return Verdict(schema_error="refers to itself without end, or the value is nested too deep")
    except Unresolvable as exc:
        return Verdict(schema_error=f"has a $ref that resolves to nothing: {exc}")
    except (TypeError, AttributeError, KeyError, ValueError) as exc:
        # A schema never checked when written (an MCP server's) can be malformed in ways
        # jsonschema only meets while validating.
        return Verdict(schema_error=f"is not a usable JSON Schema: {_cut(str(exc))}")
    problems = [
        Problem(path=tuple(e.absolute_path), message=_cut(e.message), keyword=_keyword(e.validator))
        for e in found.errors
    ]
    return Verdict(problems=problems, more_text=found.more_text)


def _keyword(validator: object) -> str | None:
    return validator if isinstance(validator, str) else None


def _cut(text: str) -> str:
    return text if len(text) <= MAX_MESSAGE_CHARS else text[: MAX_MESSAGE_CHARS - 3] + "..."


def value_size(value: Any, *, limit: int) -> int:
    """Nodes of a JSON value plus its string characters / 64, stopping just past ``limit``."""
    size, stack = 0, [value]
    while stack and size <= limit:
        item = stack.pop()
        size += 1
        if isinstance(item, str):
            size += len(item) // 64
        elif isinstance(item, Mapping):
            size += sum(len(key) // 64 for key in item)
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)
    return size


def is_cheap(schema: Mapping[str, Any] | bool, value: Any, *, budget: int = INLINE_BUDGET) -> bool:
    """Whether the bounds prove checking ``value`` against ``schema`` cheap (see the module
    docstring): each schema node meets each part of the value at most once when the schema
    does not recurse, so the product bounds the work."""
    expansion = schema_expansion(schema, limit=budget)
    if expansion.recursive or expansion.nodes > budget or expansion.unresolved is not None:
        return False
    return expansion.nodes * value_size(value, limit=budget) <= budget


PARENT_CHECK_S = 1.0
"""How often a worker checks that the process that started it is alive."""


def _worker_ready() -> bool:
    return True


def _exit_with(parent_pid: int) -> None:
    """Runs in each worker as it starts: the worker exits once its service is gone. A
    service killed outright (SIGKILL, a crash) never shuts its pool down, and its workers
    would otherwise live on, orphaned, for good."""

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(PARENT_CHECK_S)
        os._exit(0)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


class _Worker:
    """One process, one check at a time (a ProcessPoolExecutor of one, so it can be killed
    alone: the standard pool offers no way to stop one task)."""

    def __init__(self) -> None:
        self.executor = ProcessPoolExecutor(
            max_workers=1,
            mp_context=multiprocessing.get_context("spawn"),
            initializer=_exit_with,
            initargs=(os.getpid(),),
        )
        self.started = False

    async def start(self) -> None:
        if not self.started:
            ready = self.executor.submit(_worker_ready)
            await asyncio.wait_for(asyncio.wrap_future(ready), START_TIMEOUT_S)
            self.started = True

    async def run(self, work: Callable[..., T], args: tuple[Any, ...], timeout_s: float) -> T:
        future = self.executor.submit(work, *args)
        return await asyncio.wait_for(asyncio.wrap_future(future), timeout_s)

    def kill(self) -> None:
        # The executor's processes are private; killing them is the only way to stop a
        # task already running (Python 3.14 adds ProcessPoolExecutor.kill_workers).
        for process in list(getattr(self.executor, "_processes", {}).values()):
            process.kill()
        self.executor.shutdown(wait=False, cancel_futures=True)

    def close(self) -> None:
        self.executor.shutdown(wait=True, cancel_futures=True)


class SchemaPool:
    """Worker processes checking values against schemas, started when first needed."""

    def __init__(self, *, workers: int = DEFAULT_WORKERS, timeout_s: float = DEFAULT_TIMEOUT_S):
        self.workers = workers
        self.timeout_s = timeout_s
        self._idle: list[_Worker] = []
        self._busy: set[_Worker] = set()
        self._gate: asyncio.Semaphore | None = None
        self._gate_loop: asyncio.AbstractEventLoop | None = None

    def _slots(self) -> asyncio.Semaphore:
        # One semaphore per event loop: a process may run several loops in turn (tests).
        loop = asyncio.get_running_loop()
        if self._gate is None or self._gate_loop is not loop:
            self._gate, self._gate_loop = asyncio.Semaphore(self.workers), loop
        return self._gate

    async def check(
        self, schema: Mapping[str, Any] | bool, value: Any, *, any_draft: bool = False
    ) -> Verdict:
        """``value`` checked against ``schema``: inline when :func:`is_cheap`, else in a
        worker; :class:`SchemaCheckTimeout` past the time limit."""
        if is_cheap(schema, value):
            return check_value(schema, value, any_draft=any_draft)
        try:
            return await self.run(check_value, schema, value, any_draft)
        except BrokenProcessPool:  # the worker died under the check (out of memory)
            return Verdict(schema_error="could not be checked: the checking process died")

    async def run(self, work: Callable[..., T], *args: Any, timeout_s: float | None = None) -> T:
        """``work(*args)`` in a worker (picklable, module-level), within ``timeout_s`` (the
        pool's limit by default): :class:`SchemaCheckTimeout` past it,
        ``BrokenProcessPool`` if the worker died."""
        limit = self.timeout_s if timeout_s is None else timeout_s
        async with self._slots():
            worker = self._idle.pop() if self._idle else _Worker()
            self._busy.add(worker)
            try:
                await worker.start()
                result = await worker.run(work, args, limit)
            except TimeoutError:
                self._discard(worker)
                raise SchemaCheckTimeout(limit) from None
            except BaseException:
                self._discard(worker)  # cancelled or died: the work may still be running
                raise
            self._busy.discard(worker)
            self._idle.append(worker)
            return result

    def _discard(self, worker: _Worker) -> None:
        self._busy.discard(worker)
        worker.kill()

    async def aclose(self) -> None:
        """Stops every worker: idle ones when they have exited, busy ones at once."""
        idle, self._idle = self._idle, []
        for worker in list(self._busy):
            self._discard(worker)
        for worker in idle:
            await asyncio.to_thread(worker.close)


_POOL = SchemaPool()


def schema_pool() -> SchemaPool:
    """The process's pool (each service process has one; see :func:`configure_schema_pool`)."""
    return _POOL


def configure_schema_pool(*, workers: int, timeout_s: float) -> None:
    """Sets the pool's size and time limit (a service's settings), before its first use."""
    _POOL.workers = workers
    _POOL.timeout_s = timeout_s
    _POOL._gate = None  # the next check sizes it anew
