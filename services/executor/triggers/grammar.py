"""The trigger grammar of agent definitions, and the input a firing gives its run.

``trigger`` (a definition field, manifest ``agents[].trigger``) is one of:

- ``on_document_ingested``: a ``Document`` object was created in the project's graph;
- ``on_object_created:<Type>`` / ``on_object_updated:<Type>``: an object of that type was
  created / had its properties changed (by a graph tool, an RPC or plain SQL);
- ``on_event:<name>``: TriggerService.EmitEvent emitted the named event into the project.

``config.trigger_filter`` (graph triggers only) is a JSON object the object's properties must
contain as written (``properties @> filter``, applied by the outbox trigger of migration
0027 in the write's own transaction). ``config.
trigger_input`` is the run's input with placeholders replaced by text: ``{{object.id}}``,
``{{object.type}}``, ``{{object.key}}``, ``{{object.properties.<name>}}``, ``{{object}}``
(the object as JSON), ``{{event.name}}``, ``{{payload}}``, ``{{payload.<name>}}``. Values are
pasted as text, never evaluated: a payload is data for the run, never a definition.
Anything else is refused at write time, naming the field.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from agentfleet.errors import FieldViolation
from agentfleet.graph.reserved import RESERVED_OBJECT_TYPES
from services.executor.triggers.schedules import schedule_violations

__all__ = [
    "MAX_FILTER_KEYS",
    "MAX_INPUT_TEMPLATE_CHARS",
    "Trigger",
    "parse_trigger",
    "render_input",
    "schedule_config_violations",
    "trigger_violations",
]

TriggerKind = Literal["object_created", "object_updated", "event"]

DOCUMENT_INGESTED = "on_document_ingested"
_NAME = r"[A-Za-z][A-Za-z0-9_.\-]{0,99}"
_FORM = re.compile(rf"^(on_object_created|on_object_updated|on_event):({_NAME})$")
_PLACEHOLDER = re.compile(r"\{\{\s*([^{}]*?)\s*\}\}")
_PATH = re.compile(
    rf"^(object|object\.id|object\.type|object\.key|object\.properties\.{_NAME}|event\.name"
    rf"|payload|payload\.{_NAME})$"
)
EVENT_NAME = re.compile(rf"^{_NAME}$")
"""An event's name (EmitEvent.name, the <name> of on_event:<name>)."""
SCHEDULE_KEYS = frozenset({"cron", "time_zone", "input", "catch_up"})
MAX_FILTER_KEYS = 20
MAX_INPUT_TEMPLATE_CHARS = 8192
MAX_RENDERED_INPUT_BYTES = 256 * 1024
"""A rendered input past this is cut (an object's properties may be large)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Trigger:
    """A parsed ``trigger`` value."""

    kind: TriggerKind
    name: str
    """The object type (graph triggers) or the event name."""


def parse_trigger(text: str) -> Trigger | None:
    """The trigger ``text`` names, or None when it is not in the grammar."""
    if text == DOCUMENT_INGESTED:
        return Trigger(kind="object_created", name="Document")
    match = _FORM.match(text)
    if match is None:
        return None
    form, name = match.groups()
    kind: TriggerKind = {
        "on_object_created": "object_created",
        "on_object_updated": "object_updated",
        "on_event": "event",
    }[form]
    return Trigger(kind=kind, name=name)


def trigger_violations(
    trigger: str | None, config: Mapping[str, Any], field: str
) -> list[FieldViolation]:
    """What is wrong with a definition's trigger, filter and input template; ``field`` is the
    definition's path (``agent_definition``, ``manifest.agents[2]``)."""
    out: list[FieldViolation] = []
    parsed = None
    if trigger is not None:
        parsed = parse_trigger(trigger)
        if parsed is None:
            out.append(
                FieldViolation(
                    f"{field}.trigger",
                    f"unknown trigger {trigger[:120]!r}: use on_document_ingested, "
                    "on_object_created:<Type>, on_object_updated:<Type> or on_event:<name>",
                )
            )
        elif parsed.kind != "event" and parsed.name in RESERVED_OBJECT_TYPES:
            out.append(
                FieldViolation(
                    f"{field}.trigger",
                    f"{parsed.name} objects are the dispatcher's; their changes cannot trigger",
                )
            )
    out.extend(_filter_violations(config.get("trigger_filter"), parsed, trigger, field))
    out.extend(_input_violations(config.get("trigger_input"), trigger, field))
    # The operator's minimum interval is applied by the registry with its settings
    # (schedule_config_violations); these checks may run in a worker process without them.
    out.extend(schedule_config_violations(config, field, min_interval_s=1))
    return out


def schedule_config_violations(
    config: Mapping[str, Any], field: str, *, min_interval_s: int
) -> list[FieldViolation]:
    """What is wrong with a definition's ``config.schedule`` ({cron, time_zone?, input,
    catch_up?}: the definition's own schedule, kept as the schedule ``agent:<name>``)."""
    value = config.get("schedule")
    path = f"{field}.config.schedule"
    if value is None:
        return []
    if not isinstance(value, dict):
        return [FieldViolation(path, "must be an object {cron, time_zone?, input, catch_up?}")]
    unknown = sorted(set(value) - SCHEDULE_KEYS)
    if unknown:
        return [FieldViolation(f"{path}.{unknown[0][:40]}", "is not a schedule field")]
    texts = [k for k, v in value.items() if not isinstance(v, str)]
    if texts:
        return [FieldViolation(f"{path}.{texts[0]}", "must be a string")]
    found = schedule_violations(
        name="agent",
        agent_name="agent",
        cron=value.get("cron", ""),
        time_zone=value.get("time_zone", "UTC"),
        input_text=value.get("input", ""),
        catch_up=value.get("catch_up", "skip"),
        min_interval_s=min_interval_s,
    )
    return [
        FieldViolation(f"{path}.{v.field.removeprefix('schedule.')}", v.description) for v in found
    ]


def _filter_violations(
    value: Any, parsed: Trigger | None, trigger: str | None, field: str
) -> list[FieldViolation]:
    path = f"{field}.config.trigger_filter"
    if value is None:
        return []
    if trigger is None:
        return [FieldViolation(path, "needs a trigger")]
    if not isinstance(value, dict):
        return [FieldViolation(path, "must be an object of property values")]
    if parsed is not None and parsed.kind == "event":
        return [FieldViolation(path, "applies to graph triggers only")]
    if len(value) > MAX_FILTER_KEYS:
        return [FieldViolation(path, f"has {len(value)} properties; at most {MAX_FILTER_KEYS}")]
    return []


def _input_violations(value: Any, trigger: str | None, field: str) -> list[FieldViolation]:
    path = f"{field}.config.trigger_input"
    if value is None:
        return []
    if trigger is None:
        return [FieldViolation(path, "needs a trigger")]
    if not isinstance(value, str) or not value.strip():
        return [FieldViolation(path, "must be a non-empty string")]
    if len(value) > MAX_INPUT_TEMPLATE_CHARS:
        return [FieldViolation(path, f"is longer than {MAX_INPUT_TEMPLATE_CHARS} characters")]
    unknown = [p for p in _PLACEHOLDER.findall(value) if not _PATH.match(p)]
    if unknown:
        return [FieldViolation(path, f"unknown placeholder {{{{{unknown[0][:60]}}}}}")]
    return []


def render_input(template: str | None, values: Mapping[str, Any]) -> str:
    """The run's input: ``template`` with its placeholders replaced from ``values`` (keys
    ``object``, ``event``, ``payload``), or ``values`` as JSON when there is no template.
    Replacement is one pass over the template: text pasted in is never read again."""
    if template is None:
        text = json.dumps(values, sort_keys=True, default=str)
    else:
        text = _PLACEHOLDER.sub(lambda m: _lookup(values, m.group(1)), template)
    data = text.encode()
    if len(data) > MAX_RENDERED_INPUT_BYTES:
        text = data[:MAX_RENDERED_INPUT_BYTES].decode(errors="ignore")
    return text if text.strip() else "(empty)"


def _lookup(values: Mapping[str, Any], path: str) -> str:
    found: Any = values
    # A property or payload name may hold dots: it is the rest of the path.
    for part in path.split(".", 2 if path.startswith("object.properties.") else 1):
        found = found.get(part) if isinstance(found, Mapping) else None
    if found is None:
        return ""
    if isinstance(found, str):
        return found
    return json.dumps(found, sort_keys=True, default=str)
