"""Scripts as JSON, for the control API and ``--scripts file.json``.

Only reply-sequence scripts travel as JSON (a policy is code). The JSON mirrors the
dataclasses field for field::

    {"name": "researcher", "match_system": "You are a researcher",
     "per_conversation": true,
     "replies": [
       {"calls": [{"name": "web_search", "args": {"query": "gemini"}}]},
       {"error_status": 429, "error_message": "slow down"},
       {"text": "done", "usage": {"prompt_tokens": 10, "candidates_tokens": 2}}]}
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from agentfleet.gemini_stub.script import Call, Reply, Script, Usage

_REPLY_FIELDS = {f.name for f in fields(Reply)}
_SCRIPT_FIELDS = {"name", "match_system", "match_model", "replies", "per_conversation"}


class ScriptFormatError(ValueError):
    """A JSON script is malformed; the message names the offending path."""


def _object(data: Any, where: str, known: set[str]) -> dict[str, Any]:
    """``data`` checked to be a JSON object with no field outside ``known``."""
    if not isinstance(data, dict):
        raise ScriptFormatError(f"{where}: must be an object")
    unknown = set(data) - known
    if unknown:
        raise ScriptFormatError(f"{where}: unknown field(s) {', '.join(sorted(unknown))}")
    return data


def reply_from_json(data: Any, where: str = "reply") -> Reply:
    """Builds a :class:`Reply` from its JSON form."""
    values = dict(_object(data, where, _REPLY_FIELDS))
    try:
        values["calls"] = [
            Call(name=c["name"], args=c.get("args") or {}, id=c.get("id"))
            for c in values.get("calls") or []
        ]
        if values.get("usage") is not None:
            values["usage"] = Usage(**values["usage"])
        return Reply(**values)
    except (KeyError, TypeError, ValueError) as exc:
        raise ScriptFormatError(f"{where}: {exc}") from exc


def script_from_json(data: Any, where: str = "script") -> Script:
    """Builds a reply-sequence :class:`Script` from its JSON form."""
    data = _object(data, where, _SCRIPT_FIELDS)
    replies = data.get("replies")
    if not isinstance(replies, list):
        raise ScriptFormatError(f"{where}.replies: must be a list")
    try:
        return Script(
            name=data.get("name", ""),
            match_system=data.get("match_system"),
            match_model=data.get("match_model"),
            per_conversation=bool(data.get("per_conversation", False)),
            replies=[reply_from_json(r, f"{where}.replies[{i}]") for i, r in enumerate(replies)],
        )
    except ScriptFormatError:
        raise
    except (TypeError, ValueError) as exc:
        raise ScriptFormatError(f"{where}: {exc}") from exc


def scripts_from_json(data: Any) -> list[Script]:
    """A list of scripts, a single script, or ``{"scripts": [...]}``."""
    if isinstance(data, dict) and "scripts" in data:
        data = data["scripts"]
    if isinstance(data, dict):
        return [script_from_json(data)]
    if not isinstance(data, list):
        raise ScriptFormatError("scripts: must be an object or a list")
    return [script_from_json(item, f"scripts[{i}]") for i, item in enumerate(data)]


def reply_to_json(reply: Reply) -> dict[str, Any]:
    """The JSON form of a reply (defaults left out)."""
    data: dict[str, Any] = {}
    for f in fields(Reply):
        value = getattr(reply, f.name)
        if value == f.default or (f.name == "calls" and not value):
            continue
        if f.name == "calls":
            value = [
                {"name": c.name, "args": dict(c.args)} | ({"id": c.id} if c.id else {})
                for c in value
            ]
        elif f.name == "usage":
            value = {
                "prompt_tokens": value.prompt_tokens,
                "candidates_tokens": value.candidates_tokens,
                "total_tokens": value.total_tokens,
            }
        data[f.name] = value
    return data


def script_to_json(script: Script) -> dict[str, Any]:
    """The JSON form of a reply-sequence script; a policy script cannot travel."""
    if script.policy is not None:
        raise ScriptFormatError(f"script {script.name!r} has a policy, which is code, not JSON")
    data: dict[str, Any] = {
        "name": script.name,
        "replies": [reply_to_json(r) for r in script.replies],
    }
    for key in ("match_system", "match_model"):
        if getattr(script, key) is not None:
            data[key] = getattr(script, key)
    if script.per_conversation:
        data["per_conversation"] = True
    return data
