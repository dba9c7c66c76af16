"""Regular expressions that come from a tenant or an MCP server, run by RE2.

Python's ``re`` backtracks: ``^(a+)+$`` against ``"a" * 26 + "!"`` takes seconds, doubling
with each character, and it runs on the event loop shared by every project's runs. RE2
(``google-re2``) matches in time linear in the text, and refuses what it cannot match that
way (backreferences, lookarounds) when the pattern is compiled. So every regex written by
someone other than us goes through here:

- :func:`compile_regex`: one pattern (approval rules' ``when.matches``);
- :mod:`agentfleet.bounded.tenant_schema`: the jsonschema validators of tenants' and MCP servers'
  schemas, whose ``pattern`` and ``patternProperties`` run here, and whose
  ``check_schema`` refuses a pattern RE2 cannot run when it is written.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Protocol

import re2

_OPTIONS = re2.Options()
_OPTIONS.log_errors = False  # a refused pattern is the caller's error, not a log line


class Regex(Protocol):
    """What a compiled pattern offers (``re2._Regexp`` has no type stubs)."""

    def search(self, text: str) -> object | None: ...


class UnsupportedRegex(ValueError):
    """The pattern is malformed or uses what RE2 does not run in linear time."""


@lru_cache(maxsize=1024)  # approval rules are parsed at every step
def compile_regex(pattern: str) -> Regex:
    """``pattern`` compiled by RE2; :class:`UnsupportedRegex` saying why it cannot be."""
    try:
        return re2.compile(pattern, options=_OPTIONS)
    except re2.error as exc:
        reason = exc.args[0] if exc.args else exc
        if isinstance(reason, bytes):
            reason = reason.decode(errors="replace")
        raise UnsupportedRegex(
            f"{reason} (patterns run on RE2: no backreferences or lookarounds)"
        ) from None
