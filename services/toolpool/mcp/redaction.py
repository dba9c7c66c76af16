"""Removing a project's secret values from text that leaves the toolpool.

A secret filled into a URL or a header can come back in an error in many forms: as it is,
percent-encoded by the HTTP client (``quote``, ``quote_plus``, upper or lower hex, only
some characters encoded, encoded twice), JSON-escaped (``\\"``, ``\\u00e9``), Python-repr
escaped, or base64 (a ``Basic`` credential). :func:`redactor` builds, per value, one pattern
in which each character may appear in any of those encodings, so mixed forms match too;
base64 forms of the whole value are matched as they are.

Values shorter than :data:`MIN_REDACTED_CHARS` are not redacted: replacing every "ab" in a
message would garble it and protect nothing a guess would not find.
"""

from __future__ import annotations

import base64
import functools
import json
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

MIN_REDACTED_CHARS = 4
MASK = "***"


def redactor(secrets: Mapping[str, str] | Iterable[str]) -> Callable[[str], str]:
    """A function replacing every form of every value of ``secrets`` by ``***``."""
    values = secrets.values() if isinstance(secrets, Mapping) else secrets
    patterns = sorted({v for v in values if len(v) >= MIN_REDACTED_CHARS}, key=len, reverse=True)
    if not patterns:
        return _unchanged
    combined = re.compile("|".join(_value_pattern(v) for v in patterns))

    def redact(text: str) -> str:
        return combined.sub(MASK, text)

    return redact


def redact_structure(value: Any, redact: Callable[[str], str]) -> Any:
    """``value`` (JSON-like: dicts, lists, strings) with every string redacted."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {redact(str(k)): redact_structure(v, redact) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redact_structure(v, redact) for v in value]
    return value


def _unchanged(text: str) -> str:
    return text


@functools.lru_cache(maxsize=1024)
def _value_pattern(value: str) -> str:
    """A regex matching ``value`` in every supported encoding (see the module docstring)."""
    per_char = "".join(_char_pattern(c) for c in value)
    whole = sorted(_base64_forms(value), key=len, reverse=True)
    return "|".join([f"(?:{per_char})", *(re.escape(form) for form in whole)])


@functools.lru_cache(maxsize=4096)
def _char_pattern(char: str) -> str:
    forms = {char, json.dumps(char)[1:-1], json.dumps(char, ensure_ascii=False)[1:-1]}
    forms.add(repr(char)[1:-1])
    if char == " ":
        forms.add("+")
    alternatives = [re.escape(f) for f in sorted(forms, key=len, reverse=True)]
    encoded = char.encode("utf-8")
    # Percent-encoded (any hex case), and encoded twice ("%" itself as "%25").
    alternatives.append("".join(f"%{_hex_byte(b)}" for b in encoded))
    alternatives.append("".join(f"%25{_hex_byte(b)}" for b in encoded))
    return "(?:" + "|".join(alternatives) + ")"


def _hex_byte(byte: int) -> str:
    return "".join(f"[{d.upper()}{d.lower()}]" if d.isalpha() else d for d in f"{byte:02x}")


def _base64_forms(value: str) -> set[str]:
    raw = value.encode("utf-8")
    forms = set()
    for encode in (base64.b64encode, base64.urlsafe_b64encode):
        text = encode(raw).decode("ascii")
        forms.add(text)
        forms.add(text.rstrip("="))
    return {f for f in forms if len(f) >= MIN_REDACTED_CHARS}
