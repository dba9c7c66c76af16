"""The stub's answer for an agent no script covers: a placeholder that still acts like a model.

``agentfleet up`` gives its stub this fallback, so any agent a newcomer installs completes
offline instead of failing on "no script matches":

- On the first call of a conversation whose task names one of the agent's tools (the
  declared name, as a word, any case), one call of that tool, with arguments made from its
  schema: the required fields only, each the simplest valid value (the task itself for a
  free-form string).
- A call that asks for JSON with a schema (an agent with an ``output_schema``): an object
  made from that schema the same way, so the run's structured output validates.
- Otherwise a text that says it comes from the offline stub, echoes the task and, after a
  tool call, includes what the tool returned.

Pure: reads a :class:`StubRequest`, returns a :class:`Reply`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from agentfleet.gemini_stub.request import StubRequest
from agentfleet.gemini_stub.script import Call, Reply, Script

OFFLINE_SCRIPT_NAME = "offline-default"
NOTICE = "[offline stub model, not Gemini]"
MAX_ECHO_CHARS = 500
"""The task and a tool's result are cut to this many characters in the answer."""
_MAX_SCHEMA_DEPTH = 6


def offline_script() -> Script:
    """The fallback script ``agentfleet up`` gives its stub."""
    return Script(name=OFFLINE_SCRIPT_NAME, policy=offline_reply)


def offline_reply(request: StubRequest) -> Reply:
    """One tool call when the task asks for a tool (first call only), else the text answer."""
    task = request.first_user_text() or ""
    responses = request.function_responses()
    if not responses and request.turn == 0:
        declaration = _named_tool(task, request.function_declarations())
        if declaration is not None:
            return Reply(
                calls=[Call(declaration["name"], arguments_for(_schema(declaration), task))]
            )
    schema = _response_schema(request.generation_config)
    if schema is not None:
        return Reply(text=json.dumps(arguments_for(schema, _clip(task)), ensure_ascii=False))
    text = f"{NOTICE} No script covers this agent, so this is a placeholder answer. "
    text += f"Task: {_clip(task) or '(no text)'}"
    if responses:
        last = responses[-1]
        result = json.dumps(last.get("response"), ensure_ascii=False, default=str)
        text += f"\nTool {last.get('name', '?')} returned: {_clip(result)}"
    return Reply(text=text)


def arguments_for(schema: Mapping[str, Any], task: str, depth: int = 0) -> dict[str, Any]:
    """Arguments for an object schema: each required property, with the simplest value its
    schema accepts (``task`` for a free-form string)."""
    properties = schema.get("properties") or {}
    required = [name for name in schema.get("required") or [] if name in properties]
    return {name: _value_for(properties[name], task, depth + 1) for name in required}


def _value_for(schema: Mapping[str, Any], task: str, depth: int) -> Any:
    if not isinstance(schema, Mapping) or depth > _MAX_SCHEMA_DEPTH:
        return None
    for choice in ("anyOf", "oneOf", "any_of", "one_of"):
        if schema.get(choice):
            return _value_for(schema[choice][0], task, depth + 1)
    if "const" in schema:
        return schema["const"]
    if schema.get("enum"):
        return schema["enum"][0]
    kind = _kind(schema)
    if kind == "string":
        limit = schema.get("maxLength") or schema.get("max_length")
        value = task or "offline"
        return value[: int(limit)] if limit else value
    if kind in ("integer", "number"):
        low = schema.get("minimum")
        high = schema.get("maximum")
        value = low if low is not None else 1
        value = min(value, high) if high is not None else value
        return int(value) if kind == "integer" else float(value)
    if kind == "boolean":
        return False
    if kind == "array":
        count = int(schema.get("minItems") or schema.get("min_items") or 0)
        return [_value_for(schema.get("items") or {}, task, depth + 1) for _ in range(count)]
    if kind == "object":
        return arguments_for(schema, task, depth)
    return None


def _kind(schema: Mapping[str, Any]) -> str:
    """The JSON type, lower case (Gemini's own schemas spell it ``STRING``, ``OBJECT``)."""
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if str(k).lower() != "null"), "null")
    if kind is None and "properties" in schema:
        return "object"
    return str(kind or "").lower()


def _schema(declaration: Mapping[str, Any]) -> Mapping[str, Any]:
    for key in ("parametersJsonSchema", "parameters_json_schema", "parameters"):
        if isinstance(declaration.get(key), Mapping):
            return declaration[key]
    return {}


def _response_schema(config: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The JSON schema the call asks its answer to follow, if it asks for JSON."""
    if config.get("responseMimeType", config.get("response_mime_type")) != "application/json":
        return None
    for key in ("responseJsonSchema", "response_json_schema", "responseSchema", "response_schema"):
        if isinstance(config.get(key), Mapping):
            return config[key]
    return None


def _named_tool(task: str, declarations: list[dict[str, Any]]) -> dict[str, Any] | None:
    for declaration in declarations:
        name = declaration.get("name")
        if name and re.search(rf"(?<![\w.-]){re.escape(name)}(?![\w-])", task, re.IGNORECASE):
            return declaration
    return None


def _clip(text: str) -> str:
    return text if len(text) <= MAX_ECHO_CHARS else text[: MAX_ECHO_CHARS - 1] + "…"
