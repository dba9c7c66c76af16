"""agentfleet's metrics: every instrument, named once, and the hooks that record them.

Names and attributes follow the OpenTelemetry semantic conventions where they exist (GenAI:
``gen_ai.client.operation.duration``, ``gen_ai.client.token.usage``; RPC:
``rpc.server.call.duration``; database: ``db.client.connection.count``/``.max``); the rest
are ``agentfleet.*``. The instruments live on the global meter: until
:func:`agentfleet.observability.metrics_export.start_metrics` installs a provider (service
processes do,
in-process test stacks do not) recording them costs next to nothing.

Attributes stay bounded: agent, model, tool and MCP server names come from definitions and
configuration, never from model output; project ids appear only on the sampled
``agentfleet.runs.active`` gauge, capped at :data:`TOP_PROJECTS` (the rest are ``other``).

Prometheus sees the OpenTelemetry names with dots as underscores, a unit suffix and
``_total`` on counters: ``agentfleet.runs.finished`` is ``agentfleet_runs_finished_total``,
``gen_ai.client.operation.duration`` is ``gen_ai_client_operation_duration_seconds_bucket``
(``_sum``, ``_count``). :data:`INSTRUMENTS` lists every name; the dashboard test checks its
queries against what a provider really exports.
"""

from __future__ import annotations

import time
import weakref
from collections import Counter
from collections.abc import Awaitable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal, Protocol, TypeVar

from opentelemetry import metrics
from opentelemetry.metrics import CallbackOptions, Meter, Observation

T = TypeVar("T")

METER_NAME = "agentfleet"
TOP_PROJECTS = 50
"""Projects with the most active runs that get their own series; the rest add up as other."""
GEMINI = "gcp.gemini"
"""``gen_ai.provider.name`` of every model call (the executor talks to Gemini only)."""
BREAKER_STATES = ("closed", "open", "half_open")
TASK_STATES = ("blocked", "ready", "in_progress")

_SECONDS_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
_RUN_BUCKETS = (0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600)
# The GenAI conventions' advice for gen_ai.client.operation.duration and .token.usage.
_MODEL_BUCKETS = (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96)
_TOKEN_BUCKETS = tuple(4**n for n in range(14))


class McpHealth(Protocol):
    """What the MCP gauges read from a client pool (no I/O)."""

    def health(self) -> tuple[list[str], int]:
        """Each server's breaker state, and the number of live sessions."""
        ...


class _DbPool(Protocol):
    def get_size(self) -> int: ...
    def get_idle_size(self) -> int: ...
    def get_max_size(self) -> int: ...


class QuotaRates(Protocol):
    """What the quota gauge reads from a process's model limiter (no I/O)."""

    def rate_rpm(self) -> Mapping[str, tuple[float, str]]:
        """Per model: the request rate in force per minute, and ``declared`` or
        ``discovered``."""
        ...


class ObservedState:
    """What the observable instruments report when scraped: samples written by the
    sampler loop and the live objects (pools) registered by the services."""

    def __init__(self) -> None:
        self.active_runs: Mapping[tuple[str, str], int] = {}
        self.tasks: Mapping[str, int] = {}
        self.mcp_pools: weakref.WeakSet[McpHealth] = weakref.WeakSet()
        self.db_pools: list[tuple[_DbPool, str]] = []
        """The process's database pools (asyncpg pools take no weak reference)."""
        self.quotas: weakref.WeakSet[QuotaRates] = weakref.WeakSet()
        self.outbox: tuple[int, float] | None = None
        """(events pending, seconds the oldest has waited), once sampled."""

    def set_active_runs(self, rows: Iterable[tuple[str, str, int]]) -> None:
        """(project_id, status, runs) rows; projects past :data:`TOP_PROJECTS` become other."""
        per_project: Counter[str] = Counter()
        counts: Counter[tuple[str, str]] = Counter()
        for project, status, runs in rows:
            per_project[project] += runs
            counts[(project, status)] += runs
        top = {project for project, _ in per_project.most_common(TOP_PROJECTS)}
        bounded: Counter[tuple[str, str]] = Counter()
        for (project, status), runs in counts.items():
            bounded[(project if project in top else "other", status)] += runs
        # A series that just emptied reports 0 once, rather than its last count.
        for key, runs in self.active_runs.items():
            if runs and key not in bounded:
                bounded[key] = 0
        self.active_runs = dict(bounded)  # replaced whole: a scrape never sees half of it

    def set_tasks(self, rows: Iterable[tuple[str, int]]) -> None:
        """(state, tasks) rows; a state without rows reports 0."""
        counts = dict.fromkeys(TASK_STATES, 0)
        for state, tasks in rows:
            counts[state] = counts.get(state, 0) + tasks
        self.tasks = counts

    def set_outbox(self, pending: int, oldest_age_s: float | None) -> None:
        """The trigger outbox's backlog; no pending event is an age of 0."""
        self.outbox = (pending, max(0.0, oldest_age_s or 0.0) if pending else 0.0)

    def observe_outbox_pending(self, _options: CallbackOptions) -> Iterable[Observation]:
        if self.outbox is not None:
            yield Observation(self.outbox[0])

    def observe_outbox_oldest_age(self, _options: CallbackOptions) -> Iterable[Observation]:
        if self.outbox is not None:
            yield Observation(self.outbox[1])

    def observe_active_runs(self, _options: CallbackOptions) -> Iterable[Observation]:
        for (project, status), runs in self.active_runs.items():
            yield Observation(
                runs, {"agentfleet.project_id": project, "agentfleet.run.status": status}
            )

    def observe_tasks(self, _options: CallbackOptions) -> Iterable[Observation]:
        for state, tasks in self.tasks.items():
            yield Observation(tasks, {"agentfleet.task.state": state})

    def observe_breakers(self, _options: CallbackOptions) -> Iterable[Observation]:
        if not self.mcp_pools:
            return
        states: Counter[str] = Counter()
        for pool in list(self.mcp_pools):
            states.update(pool.health()[0])
        for state in BREAKER_STATES:
            yield Observation(states[state], {"agentfleet.mcp.breaker.state": state})

    def observe_mcp_sessions(self, _options: CallbackOptions) -> Iterable[Observation]:
        pools = list(self.mcp_pools)
        if pools:
            yield Observation(sum(pool.health()[1] for pool in pools))

    def observe_db_connections(self, _options: CallbackOptions) -> Iterable[Observation]:
        for pool, name in list(self.db_pools):
            idle = pool.get_idle_size()
            for state, count in (("idle", idle), ("used", pool.get_size() - idle)):
                yield Observation(
                    count,
                    {"db.client.connection.pool.name": name, "db.client.connection.state": state},
                )

    def observe_db_max(self, _options: CallbackOptions) -> Iterable[Observation]:
        for pool, name in list(self.db_pools):
            yield Observation(pool.get_max_size(), {"db.client.connection.pool.name": name})

    def observe_model_quota_rate(self, _options: CallbackOptions) -> Iterable[Observation]:
        for quotas in list(self.quotas):
            for model, (rpm, source) in quotas.rate_rpm().items():
                yield Observation(
                    rpm, {"gen_ai.request.model": model, "agentfleet.quota.source": source}
                )


@dataclass(frozen=True, slots=True)
class _Spec:
    """One instrument, as the meter is asked to create it."""

    kind: Literal[
        "counter",
        "up_down_counter",
        "histogram",
        "observable_gauge",
        "observable_up_down_counter",
    ]
    """What makes it: ``Meter.create_<kind>``."""
    name: str
    unit: str
    description: str
    buckets: tuple[float, ...] | None = None
    """Histograms: the bucket boundaries advised to the SDK."""


_RECORDED: dict[str, _Spec] = {
    # Keyed by the attribute of Instruments the hooks below record on.
    "runs_finished": _Spec(
        "counter", "agentfleet.runs.finished", "{run}", "Runs that reached an end"
    ),
    "run_duration": _Spec(
        "histogram", "agentfleet.run.duration", "s", "From a run's start to its end", _RUN_BUCKETS
    ),
    "step_duration": _Spec(
        "histogram",
        "agentfleet.step.duration",
        "s",
        "One agent step: the model call and the tool calls it asked for",
        _SECONDS_BUCKETS,
    ),
    "model_duration": _Spec(
        "histogram",
        "gen_ai.client.operation.duration",
        "s",
        "Model calls, retries included; error.type set on failure",
        _MODEL_BUCKETS,
    ),
    "token_usage": _Spec(
        "histogram",
        "gen_ai.client.token.usage",
        "{token}",
        "Tokens per model call, by gen_ai.token.type (input, output)",
        _TOKEN_BUCKETS,
    ),
    "model_cost": _Spec(
        "counter",
        "agentfleet.model.cost",
        "usd",
        "Cost of model calls by project and model (priced by AGENTFLEET_MODEL_PRICES)",
    ),
    "model_fallbacks": _Spec(
        "counter",
        "agentfleet.model.fallbacks",
        "{call}",
        "Model calls answered by a fallback model, by the model that failed and the one used",
    ),
    "budget_pauses": _Spec(
        "counter",
        "agentfleet.budget.pauses",
        "{run}",
        "Runs paused by a project budget or a tree cost limit, by project and limit",
    ),
    "history_pruned": _Spec(
        "counter",
        "agentfleet.history.pruned",
        "{row}",
        "History rows deleted by retention, by project and table",
    ),
    "trigger_firings": _Spec(
        "counter",
        "agentfleet.trigger.firings",
        "{firing}",
        "What triggers did with events (graph, external, schedule), by kind, outcome, reason",
    ),
    "tool_duration": _Spec(
        "histogram",
        "agentfleet.tool.call.duration",
        "s",
        "Tool calls served by the toolpool, by tool and source",
        _SECONDS_BUCKETS,
    ),
    "dispatch_duration": _Spec(
        "histogram",
        "agentfleet.dispatch.duration",
        "s",
        "From a task's claim to its run accepted by an executor",
        _SECONDS_BUCKETS,
    ),
    "rpc_duration": _Spec(
        "histogram",
        "rpc.server.call.duration",
        "s",
        "Admitted gRPC calls, streams until their last message",
        _SECONDS_BUCKETS,
    ),
    "loop_lag": _Spec(
        "histogram",
        "agentfleet.event_loop.lag",
        "s",
        "How late the event loop ran a timer due every 100 ms: what every call waited",
        _SECONDS_BUCKETS,
    ),
    "watch_subscribers": _Spec(
        "up_down_counter", "agentfleet.watch.subscribers", "{stream}", "Open WatchRun streams"
    ),
    "quota_waiting": _Spec(
        "up_down_counter",
        "agentfleet.model.quota.waiting",
        "{call}",
        "Model calls waiting for their model's quota, by model",
    ),
    "quota_wait_duration": _Spec(
        "histogram",
        "agentfleet.model.quota.wait.duration",
        "s",
        "How long model calls waited for their model's quota, by model",
        _RUN_BUCKETS,
    ),
    "rate_limited": _Spec(
        "counter",
        "agentfleet.model.rate_limited",
        "{response}",
        "429 answers of the model (quota exhausted), by model",
    ),
}
_OBSERVED: dict[str, _Spec] = {
    # Keyed by the ObservedState method that reports the instrument when it is scraped.
    "observe_active_runs": _Spec(
        "observable_gauge",
        "agentfleet.runs.active",
        "{run}",
        "Queued and running runs per project (sampled)",
    ),
    "observe_tasks": _Spec(
        "observable_gauge",
        "agentfleet.tasks",
        "{task}",
        "Task-graph tasks not finished, by blocked/ready/in_progress (sampled)",
    ),
    "observe_outbox_pending": _Spec(
        "observable_gauge",
        "agentfleet.triggers.outbox.pending",
        "{event}",
        "Trigger outbox events not consumed yet, deployment-wide (sampled)",
    ),
    "observe_outbox_oldest_age": _Spec(
        "observable_gauge",
        "agentfleet.triggers.outbox.oldest_age",
        "s",
        "Seconds the oldest unconsumed trigger outbox event has waited; 0 when none (sampled)",
    ),
    "observe_breakers": _Spec(
        "observable_gauge",
        "agentfleet.mcp.breakers",
        "{server}",
        "MCP servers by circuit breaker state",
    ),
    "observe_mcp_sessions": _Spec(
        "observable_gauge", "agentfleet.mcp.sessions", "{session}", "Live MCP client sessions"
    ),
    "observe_db_connections": _Spec(
        "observable_up_down_counter",
        "db.client.connection.count",
        "{connection}",
        "Database pool connections by state (idle, used)",
    ),
    "observe_db_max": _Spec(
        "observable_up_down_counter",
        "db.client.connection.max",
        "{connection}",
        "Database pool size limit",
    ),
    "observe_model_quota_rate": _Spec(
        "observable_gauge",
        "agentfleet.model.quota.rate",
        "{request}/min",
        "Request rate in force per model: declared, or found from its 429s (AIMD)",
    ),
}

INSTRUMENTS = tuple(spec.name for spec in (*_RECORDED.values(), *_OBSERVED.values()))
"""The name of every instrument :class:`Instruments` creates."""


def _create(meter: Meter, spec: _Spec, **callbacks: Any) -> Any:
    advice = {} if spec.buckets is None else {"explicit_bucket_boundaries_advisory": spec.buckets}
    create = getattr(meter, f"create_{spec.kind}")
    return create(spec.name, unit=spec.unit, description=spec.description, **advice, **callbacks)


class Instruments:
    """Every agentfleet instrument, created on ``meter`` (the global one, or a test's)."""

    runs_finished: metrics.Counter
    run_duration: metrics.Histogram
    step_duration: metrics.Histogram
    model_duration: metrics.Histogram
    token_usage: metrics.Histogram
    model_cost: metrics.Counter
    model_fallbacks: metrics.Counter
    budget_pauses: metrics.Counter
    history_pruned: metrics.Counter
    trigger_firings: metrics.Counter
    tool_duration: metrics.Histogram
    dispatch_duration: metrics.Histogram
    rpc_duration: metrics.Histogram
    loop_lag: metrics.Histogram
    watch_subscribers: metrics.UpDownCounter
    quota_waiting: metrics.UpDownCounter
    quota_wait_duration: metrics.Histogram
    rate_limited: metrics.Counter

    def __init__(self, meter: Meter, state: ObservedState) -> None:
        self.state = state
        for attribute, spec in _RECORDED.items():
            setattr(self, attribute, _create(meter, spec))
        for callback, spec in _OBSERVED.items():
            _create(meter, spec, callbacks=[getattr(state, callback)])


_instruments = Instruments(metrics.get_meter(METER_NAME), ObservedState())


# -- the hooks -----------------------------------------------------------------------


def record_run_finished(*, agent: str, status: str, duration_ms: int | None) -> None:
    """A run ended (executor loop); its duration when it has one."""
    attributes = {"gen_ai.agent.name": agent, "agentfleet.run.status": status}
    _instruments.runs_finished.add(1, attributes)
    if duration_ms is not None:
        _instruments.run_duration.record(duration_ms / 1000, attributes)


@contextmanager
def timed_step(agent: str) -> Iterator[None]:
    """Times one step of ``agent``; a step that raises gets ``error.type``."""
    started = time.monotonic()
    attributes = {"gen_ai.agent.name": agent}
    try:
        yield
    except BaseException as exc:
        attributes["error.type"] = type(exc).__name__
        raise
    finally:
        _instruments.step_duration.record(time.monotonic() - started, attributes)


async def timed_model_call(call: Awaitable[T], *, model: str) -> T:
    """Awaits one model call (retries included), recording its duration, its error type
    when it fails and the tokens of its reply."""
    attributes = {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": GEMINI,
        "gen_ai.request.model": model,
    }
    started = time.monotonic()
    try:
        reply = await call
    except BaseException as exc:
        attributes["error.type"] = type(exc).__name__
        _instruments.model_duration.record(time.monotonic() - started, attributes)
        raise
    _instruments.model_duration.record(time.monotonic() - started, attributes)
    usage = getattr(reply, "usage", None)
    if usage is not None:
        for kind, tokens in (("input", usage.prompt_tokens), ("output", usage.output_tokens)):
            _instruments.token_usage.record(tokens, {**attributes, "gen_ai.token.type": kind})
    return reply


def record_model_cost(*, project: str, model: str, cost_nanos: int) -> None:
    """A model reply was priced (executor, when it records the reply)."""
    if cost_nanos:
        _instruments.model_cost.add(
            cost_nanos / 1e9, {"agentfleet.project_id": project, "gen_ai.response.model": model}
        )


def record_model_fallback(*, failed_model: str, model: str) -> None:
    """A fallback model answered after ``failed_model`` kept failing."""
    _instruments.model_fallbacks.add(
        1, {"gen_ai.request.model": failed_model, "gen_ai.response.model": model}
    )


def record_trigger_firing(*, kind: str, outcome: str, reason: str | None) -> None:
    """A trigger fired or was skipped (executor, once its firing has committed); ``reason``
    is the skip's kind (chain_depth_cap, rate_cap, ...), never a tenant's text."""
    _instruments.trigger_firings.add(
        1,
        {
            "agentfleet.trigger.kind": kind,
            "agentfleet.trigger.outcome": outcome,
            "agentfleet.trigger.reason": reason or "",
        },
    )


def record_budget_pause(*, project: str, limit: str) -> None:
    """A run paused at a budget (``limit``: daily_tokens, monthly_cost, tree_cost, ...)."""
    _instruments.budget_pauses.add(1, {"agentfleet.project_id": project, "agentfleet.limit": limit})


def record_history_pruned(*, project: str, table: str, rows: int) -> None:
    """Retention deleted ``rows`` rows of ``table`` (agent_runs, agent_run_events, ...)."""
    _instruments.history_pruned.add(
        rows, {"agentfleet.project_id": project, "agentfleet.table": table}
    )


def record_tool_call(*, tool: str, source: str, duration_s: float, failed: bool) -> None:
    """A tool call the toolpool served; ``source`` is builtin or mcp:<server>."""
    attributes = {"gen_ai.tool.name": tool, "agentfleet.tool.source": source}
    if failed:
        attributes["error.type"] = "tool_error"
    _instruments.tool_duration.record(duration_s, attributes)


def dispatch_started() -> float:
    """The clock reading :func:`record_dispatch` measures from."""
    return time.monotonic()


def record_dispatch(started: float) -> None:
    """A claimed task's run was accepted by an executor."""
    _instruments.dispatch_duration.record(time.monotonic() - started)


def record_rpc(duration_s: float, attributes: Mapping[str, str]) -> None:
    _instruments.rpc_duration.record(duration_s, attributes)


def record_loop_lag(lag_s: float) -> None:
    """One tick of :class:`agentfleet.observability.loop_watch.LoopWatch`: how late it ran."""
    _instruments.loop_lag.record(lag_s)


@contextmanager
def watch_subscriber() -> Iterator[None]:
    """Counts one open WatchRun stream for as long as the block runs."""
    _instruments.watch_subscribers.add(1)
    try:
        yield
    finally:
        _instruments.watch_subscribers.add(-1)


def record_model_rate_limited(*, model: str) -> None:
    """The model answered 429 (a quota of ``model`` exhausted)."""
    _instruments.rate_limited.add(1, {"gen_ai.request.model": model})


def quota_wait_started(*, model: str) -> None:
    """A model call of ``model`` started waiting for its quota."""
    _instruments.quota_waiting.add(1, {"gen_ai.request.model": model})


def quota_wait_ended(*, model: str, waited_s: float) -> None:
    """The wait :func:`quota_wait_started` counted ended after ``waited_s``."""
    attributes = {"gen_ai.request.model": model}
    _instruments.quota_waiting.add(-1, attributes)
    _instruments.quota_wait_duration.record(waited_s, attributes)


def observe_mcp_pool(pool: McpHealth) -> None:
    """Reports the breakers and sessions of ``pool`` while it lives."""
    _instruments.state.mcp_pools.add(pool)


def observe_db_pool(pool: _DbPool, name: str) -> None:
    """Reports the connections of ``pool``, as pool ``name``, for the process's lifetime."""
    _instruments.state.db_pools.append((pool, name))


def observe_model_quotas(quotas: QuotaRates) -> None:
    """Reports the request rate in force of each model of ``quotas`` while it lives."""
    _instruments.state.quotas.add(quotas)


def set_active_runs(rows: Iterable[tuple[str, str, int]]) -> None:
    """A new sample of (project_id, status, runs) for ``agentfleet.runs.active``."""
    _instruments.state.set_active_runs(rows)


def set_trigger_outbox(pending: int, oldest_age_s: float | None) -> None:
    """A new sample of the trigger outbox's backlog (``agentfleet.triggers.outbox.*``)."""
    _instruments.state.set_outbox(pending, oldest_age_s)


def set_tasks(rows: Iterable[tuple[str, int]]) -> None:
    """A new sample of (state, tasks) for ``agentfleet.tasks``."""
    _instruments.state.set_tasks(rows)
