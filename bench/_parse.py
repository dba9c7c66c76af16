"""Reading the figures other bench scripts print (they have no --json): percentile lines in
the ``_common.report()`` shape or close to it, plus throughput lines, and what was left."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_NUM = r"([0-9][0-9,]*\.?[0-9]*)"
PERCENTILES = re.compile(
    rf"^\s*(?P<label>.+?)\s+p50\s+{_NUM}\s*ms"
    rf"(?:\s+p90\s+{_NUM}\s*ms)?\s+p99\s+{_NUM}\s*ms"
    rf"(?:\s+mean\s+{_NUM}\s*ms)?(?:.*?\(n={_NUM}\))?(?P<rest>.*)$"
)
# structlog's console lines ("2026-11-22 00:44:41 [info     ] ...") that benches print.
LOG_LINE = re.compile(r"^\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}\S*\s+\[")
# Lines that are context for the figures, kept as notes under the area's table.
_INFO_PREFIXES = (
    "machine:",
    "loaded ",
    "one run",
    "per-task",
    "  mean",
    "  database round trips",
    "  executor CPU",
    "all 500 watchers subscribed",
    "all 50 watchers subscribed",
    "limits:",
    "  executor concurrency",
    "  busy database connections",
    "spawn_agents fan-out overhead on",
    "quota: n=",
    "prune: n=",
    "  bytes per step:",
    "  rows deleted per second:",
    "  1M runs extrapolated:",
    "  whole bench:",
    # bench/quota.py's and bench/prune.py's verdicts (bench/_targets.verdict_checks reads
    # them again).
    "  failed runs:",
    "  wall time:",
    "  429s received:",
    "  small project span:",
    "  most calls in one window:",
    "  limiter CPU per model call:",
    # bench/trigger_admission.py's (bench/_targets.verdict_checks reads its verdicts).
    "trigger admission:",
    "  CPU per accepted run:",
    "  database:",
    "phase 2:",
    "  queued cap of",
    # bench/prune.py's.
    "  old runs left:",
    "  recent runs kept whole:",
    "  live runs untouched:",
    "  writers' p99 during the prune:",
)
RATE = re.compile(rf"{_NUM}\s*(?P<unit>steps/s|calls/s|events/s|runs/s|ms/task)")


@dataclass(kw_only=True, slots=True)
class Percentiles:
    label: str
    p50: float
    p90: float | None
    p99: float
    mean: float | None
    n: int | None
    note: str = ""


@dataclass(kw_only=True, slots=True)
class Parsed:
    percentiles: list[Percentiles] = field(default_factory=list)
    rates: list[tuple[str, float, str]] = field(default_factory=list)
    """(whole line, value, unit)"""
    info: list[str] = field(default_factory=list)
    unparsed: list[str] = field(default_factory=list)

    def text_lines(self) -> list[str]:
        """Every line kept as text (notes, rate lines, unparsed): where a script's verdicts
        on its own targets are (bench/_targets.verdict_checks)."""
        return [*(line for line, _value, _unit in self.rates), *self.info, *self.unparsed]


def _f(text: str | None) -> float | None:
    return float(text.replace(",", "")) if text else None


def parse_output(text: str) -> Parsed:
    """Every non-empty line lands in exactly one bucket; nothing is silently dropped."""
    out = Parsed()
    context = ""
    for raw in text.splitlines():
        line = raw.rstrip()
        if not line.strip() or line.startswith(("I1", "W1", "E1")):  # grpc C-core chatter
            continue
        match = PERCENTILES.match(line)
        if match:
            label = match.group("label").strip()
            if raw.startswith(" ") and context:
                label = f"{context.rstrip(':')} / {label}"
            p50, p90, p99, mean, n = (_f(match.group(i)) for i in range(2, 7))
            out.percentiles.append(
                Percentiles(
                    label=label,
                    p50=p50 or 0.0,
                    p90=p90,
                    p99=p99 or 0.0,
                    mean=mean,
                    n=int(n) if n is not None else None,
                    note=match.group("rest").strip(),
                )
            )
            continue
        rate = RATE.search(line)
        if rate:
            out.rates.append((line.strip(), _f(rate.group(1)) or 0.0, rate.group("unit")))
            continue
        if line.startswith(_INFO_PREFIXES):
            out.info.append(line.strip())
            if line.endswith(":"):
                context = line.strip()
            continue
        if line.endswith(":") and not raw.startswith(" "):
            context = line.strip()
            out.info.append(line.strip())
            continue
        if LOG_LINE.match(line):
            continue  # a service's log line, not a figure
        out.unparsed.append(line)
    return out
