"""The Grafana dashboard is valid JSON whose every query names metrics and labels that the
services really export: each hook of :mod:`agentfleet.observability.metrics` records once into a
provider
with a Prometheus reader, and the names and labels come from what that reader exposes."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.sdk.metrics import MeterProvider
from prometheus_client import CollectorRegistry

from agentfleet.observability import metrics

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "agentfleet.json"
PROMQL_WORDS = {
    "sum", "max", "min", "avg", "count", "rate", "irate", "increase", "histogram_quantile",
    "topk", "bottomk", "by", "without", "on", "ignoring", "and", "or", "unless",
}  # fmt: skip


class _Pool:
    def get_size(self) -> int:
        return 4

    def get_idle_size(self) -> int:
        return 3

    def get_max_size(self) -> int:
        return 10


class _Mcp:
    def health(self) -> tuple[list[str], int]:
        return ["closed", "open"], 1


class _Usage:
    prompt_tokens = 120
    output_tokens = 30


class _Reply:
    usage = _Usage()


@pytest.fixture(scope="module")
def exported() -> dict[str, set[str]]:
    """Every exported sample name -> its label names, after each hook recorded once."""
    registry = CollectorRegistry()
    reader = PrometheusMetricReader(registry=registry)
    provider = MeterProvider(metric_readers=[reader])
    instruments = metrics.Instruments(provider.get_meter("agentfleet"), metrics.ObservedState())
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(metrics, "_instruments", instruments)
        _record_every_hook()
        samples: dict[str, set[str]] = {}
        for family in registry.collect():
            for sample in family.samples:
                samples.setdefault(sample.name, set()).update(sample.labels)
    provider.shutdown()
    return samples


def _record_every_hook() -> None:
    metrics.record_run_finished(agent="a", status="completed", duration_ms=1500)
    with metrics.timed_step("a"):
        pass
    asyncio.run(metrics.timed_model_call(_answer(), model="gemini"))
    with contextlib.suppress(TimeoutError):
        asyncio.run(metrics.timed_model_call(_time_out(), model="gemini"))
    metrics.record_tool_call(tool="t", source="builtin", duration_s=0.1, failed=True)
    metrics.record_model_cost(project="p", model="gemini", cost_nanos=2_000_000)
    metrics.record_model_fallback(failed_model="gemini-pro", model="gemini")
    metrics.record_budget_pause(project="p", limit="daily_tokens")
    metrics.record_history_pruned(project="p", table="agent_runs", rows=3)
    metrics.record_trigger_firing(kind="object_created", outcome="skipped", reason="rate_cap")
    metrics.record_dispatch(metrics.dispatch_started())
    metrics.record_model_rate_limited(model="m")
    metrics.quota_wait_started(model="m")
    metrics.quota_wait_ended(model="m", waited_s=1.5)
    metrics.record_rpc(0.1, {"rpc.method": "x/Y", "rpc.response.status_code": "OK"})
    metrics.record_loop_lag(0.02)
    with metrics.watch_subscriber():
        pass
    metrics.observe_mcp_pool(_MCP)
    metrics.observe_db_pool(_Pool(), "executor")
    metrics.set_active_runs([("p", "queued", 2)])
    metrics.set_tasks([("ready", 1)])
    metrics.set_trigger_outbox(3, 12.5)
    metrics.observe_model_quotas(_QUOTAS)


_MCP = _Mcp()  # the MCP gauges hold pools weakly: keep this one alive


class _Quotas:
    def rate_rpm(self) -> dict[str, tuple[float, str]]:
        return {"gemini-2.5-flash": (57.0, "discovered")}


_QUOTAS = _Quotas()  # held weakly too


async def _answer() -> _Reply:
    return _Reply()


async def _time_out() -> _Reply:
    raise TimeoutError


def _queries() -> list[tuple[str, str]]:
    dashboard = json.loads(DASHBOARD.read_text())
    return [(p["title"], t["expr"]) for p in dashboard["panels"] for t in p["targets"]]


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression reads."""
    stripped = re.sub(r'"[^"]*"', "", expr)
    stripped = re.sub(r"\{[^}]*\}|\[[^\]]*\]", "", stripped)
    stripped = re.sub(r"\b(by|without|on|ignoring)\s*\([^)]*\)", "", stripped)
    return set(re.findall(r"[A-Za-z_:][A-Za-z0-9_:]*", stripped)) - PROMQL_WORDS


def label_names(expr: str) -> set[str]:
    """The label names a PromQL expression matches on or groups by."""
    labels = set()
    for matchers in re.findall(r"\{([^}]*)\}", expr):
        labels |= set(re.findall(r"([A-Za-z_][A-Za-z0-9_]*)\s*(?:=~|!~|!=|=)", matchers))
    for grouping in re.findall(r"\b(?:by|without)\s*\(([^)]*)\)", expr):
        labels |= {label.strip() for label in grouping.split(",") if label.strip()}
    return labels


def test_the_dashboard_is_valid_json_with_queries_on_every_panel() -> None:
    dashboard: dict[str, Any] = json.loads(DASHBOARD.read_text())
    assert dashboard["uid"] == "agentfleet"
    assert dashboard["panels"]
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    for panel in dashboard["panels"]:
        assert panel["targets"], panel["title"]
        assert all(target["expr"].strip() for target in panel["targets"]), panel["title"]


@pytest.mark.parametrize(("title", "expr"), _queries(), ids=[t for t, _ in _queries()])
def test_each_query_names_exported_metrics_and_labels(
    exported: dict[str, set[str]], title: str, expr: str
) -> None:
    names = metric_names(expr)
    assert names, expr
    assert names <= set(exported), f"{title}: not exported: {sorted(names - set(exported))}"
    known_labels = set().union(*(exported[name] for name in names))
    assert label_names(expr) <= known_labels, f"{title}: {sorted(label_names(expr) - known_labels)}"


def test_every_instrument_is_exported_and_on_the_dashboard(exported: dict[str, set[str]]) -> None:
    on_dashboard = set().union(*(metric_names(expr) for _, expr in _queries()))
    for instrument in metrics.INSTRUMENTS:
        base = instrument.replace(".", "_")
        exported_as = {name for name in exported if name.startswith(base)}
        assert exported_as, instrument
        assert exported_as & on_dashboard, f"{instrument} is on no panel"


def test_the_name_extraction_sees_through_promql() -> None:
    expr = 'histogram_quantile(0.95, sum by (le, a_b) (rate(x_bucket{c="d", e!~"f"}[5m]))) / y'
    assert metric_names(expr) == {"x_bucket", "y"}
    assert label_names(expr) == {"le", "a_b", "c", "e"}
