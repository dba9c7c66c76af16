"""Human approval of tool calls (issue #19): the policy part, pure (no I/O).

A definition asks for approval in its ``config.approvals``::

    {"rules": [{"tools": ["delete_*", "create_entity"],          # names or fnmatch globs
                "when": {"pointer": "/type", "matches": "^Secret"},  # optional
                "deadline_s": 3600,                                 # optional
                "on_deadline": "reject"}],                          # or "fail"
     "count_waiting_in_timeout": false}

A call needs approval when a rule's glob matches its tool name and, if the rule has a
``when``, the argument at that JSON pointer (RFC 6901) exists and the regex is found in it
(strings as they are, other values as compact JSON) by RE2
(:func:`agentfleet.bounded.tenant_regex.compile_regex`: linear time, so no backreferences or
lookarounds). The first matching rule
decides. Without ``deadline_s`` a call waits until someone decides or the run is cancelled;
with one, the sweep on the workers' claim tick rejects the call (``reject``, the default)
or fails the run (``fail``) once it passes. Waiting time does not count against the run's
timeout unless ``count_waiting_in_timeout`` is true.

The rest: :mod:`approval_store` (SQL: hold, decide, deadline sweep) and
:mod:`approval_resume` (continuing a run whose calls were decided).
"""

from __future__ import annotations

import fnmatch
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from agentfleet.bounded.tenant_regex import Regex, UnsupportedRegex, compile_regex
from agentfleet.errors import FieldViolation, InvalidArgument
from services.executor.threads import parse_thread_policy

OnDeadline = Literal["reject", "fail"]
MAX_DEADLINE_S = 30 * 24 * 3600
MAX_RULES = 32


@dataclass(frozen=True, kw_only=True, slots=True)
class ApprovalRule:
    """Which calls wait for a person, and for how long."""

    tools: tuple[str, ...]
    """Tool names and fnmatch globs."""
    pointer: str | None = None
    """JSON pointer into the arguments; None = every call of the tools."""
    pattern: Regex | None = None
    """Searched in the value at ``pointer``."""
    deadline_s: float | None = None
    """None = no deadline."""
    on_deadline: OnDeadline = "reject"

    def applies(self, tool_name: str, arguments: Mapping[str, Any]) -> bool:
        if not any(fnmatch.fnmatchcase(tool_name, glob) for glob in self.tools):
            return False
        if self.pointer is None or self.pattern is None:
            return True
        found, value = resolve_pointer(arguments, self.pointer)
        if not found:
            return False
        text = value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))
        return self.pattern.search(text) is not None


@dataclass(frozen=True, kw_only=True, slots=True)
class ApprovalPolicy:
    """A definition's approval rules (empty: nothing waits)."""

    rules: tuple[ApprovalRule, ...] = ()
    count_waiting_in_timeout: bool = False
    """True: time spent WAITING counts against the run's timeout."""

    def rule_for(self, tool_name: str, arguments: Mapping[str, Any]) -> ApprovalRule | None:
        """The first rule that holds this call, or None when it runs at once."""
        return next((r for r in self.rules if r.applies(tool_name, arguments)), None)


NO_APPROVALS = ApprovalPolicy()


def resolve_pointer(document: Any, pointer: str) -> tuple[bool, Any]:
    """``(found, value)`` of an RFC 6901 JSON pointer ("" is the whole document)."""
    if pointer == "":
        return True, document
    value = document
    for token in pointer[1:].split("/"):
        token = token.replace("~1", "/").replace("~0", "~")
        if isinstance(value, Mapping) and token in value:
            value = value[token]
        elif isinstance(value, list) and token.isdigit() and int(token) < len(value):
            value = value[int(token)]
        else:
            return False, None
    return True, value


def parse_approval_policy(config: Mapping[str, Any]) -> ApprovalPolicy:
    """The ``approvals`` entry of a definition's config; :class:`InvalidArgument` naming
    the field (``config.approvals.rules[0].tools``, ...) when it is malformed."""
    raw = config.get("approvals")
    if raw is None:
        return NO_APPROVALS
    problems: list[FieldViolation] = []
    if not isinstance(raw, Mapping):
        raise InvalidArgument.for_field("config.approvals", "must be an object")
    rules_raw = raw.get("rules", [])
    if not isinstance(rules_raw, Sequence) or isinstance(rules_raw, str):
        raise InvalidArgument.for_field("config.approvals.rules", "must be a list")
    if len(rules_raw) > MAX_RULES:
        raise InvalidArgument.for_field("config.approvals.rules", f"at most {MAX_RULES} rules")
    rules = [
        _parse_rule(r, f"config.approvals.rules[{i}]", problems) for i, r in enumerate(rules_raw)
    ]
    count_waiting = raw.get("count_waiting_in_timeout", False)
    if not isinstance(count_waiting, bool):
        problems.append(
            FieldViolation("config.approvals.count_waiting_in_timeout", "must be true or false")
        )
    if problems:
        raise InvalidArgument.for_fields(problems)
    return ApprovalPolicy(
        rules=tuple(r for r in rules if r is not None),
        count_waiting_in_timeout=bool(count_waiting),
    )


def _parse_rule(raw: Any, field: str, problems: list[FieldViolation]) -> ApprovalRule | None:
    if not isinstance(raw, Mapping):
        problems.append(FieldViolation(field, "must be an object"))
        return None
    tools = raw.get("tools")
    if not isinstance(tools, list) or not tools or not all(isinstance(t, str) and t for t in tools):
        problems.append(FieldViolation(f"{field}.tools", "must be a non-empty list of names"))
        return None
    pointer: str | None = None
    pattern: Regex | None = None
    when = raw.get("when")
    if when is not None:
        pointer, pattern = _parse_when(when, f"{field}.when", problems)
    deadline = raw.get("deadline_s")
    if deadline is not None and (
        isinstance(deadline, bool)
        or not isinstance(deadline, int | float)
        or not 0 < deadline <= MAX_DEADLINE_S
    ):
        problems.append(
            FieldViolation(
                f"{field}.deadline_s", f"must be more than 0 and at most {MAX_DEADLINE_S}"
            )
        )
        deadline = None
    on_deadline = raw.get("on_deadline", "reject")
    if on_deadline not in ("reject", "fail"):
        problems.append(FieldViolation(f"{field}.on_deadline", "must be 'reject' or 'fail'"))
        on_deadline = "reject"
    return ApprovalRule(
        tools=tuple(tools),
        pointer=pointer,
        pattern=pattern,
        deadline_s=float(deadline) if deadline is not None else None,
        on_deadline=on_deadline,
    )


def _parse_when(
    when: Any, field: str, problems: list[FieldViolation]
) -> tuple[str | None, Regex | None]:
    if not isinstance(when, Mapping):
        problems.append(FieldViolation(field, "must be an object with pointer and matches"))
        return None, None
    pointer = when.get("pointer")
    if not isinstance(pointer, str) or (pointer and not pointer.startswith("/")):
        problems.append(FieldViolation(f"{field}.pointer", "must be a JSON pointer like /path"))
        return None, None
    matches = when.get("matches")
    if not isinstance(matches, str) or not matches:
        problems.append(FieldViolation(f"{field}.matches", "must be a regular expression"))
        return None, None
    try:
        return pointer, compile_regex(matches)
    except UnsupportedRegex as exc:
        problems.append(FieldViolation(f"{field}.matches", f"is not a valid regex: {exc}"))
        return None, None


def check_definition_config(config: Mapping[str, Any]) -> None:
    """Refuses (:class:`InvalidArgument` naming the field) a definition whose
    ``config.approvals`` or ``config.thread`` is malformed, before it is stored."""
    parse_approval_policy(config)
    parse_thread_policy(config)
