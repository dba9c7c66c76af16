"""Removing a project's secret values from text that leaves the toolpool.

A secret filled into a URL or a header can come back in an error in many forms: as it is,
percent-encoded by the HTTP client (``quote``, ``quote_plus``, upper or lower hex, only
some characters encoded, encoded twice), JSON-escaped (``\\"``, ``\\u00e9``), Python-repr
escaped, or base64 (a ``Basic`` credential).

Rather than one pattern per value that spells every encoding of every character (which
``re`` compiled in seconds for a few 16 KiB values, on the toolpool's event loop), the text
is decoded: each *view* of it undoes one combination of the encodings (backslash escapes,
percent-encoding once or twice, ``+`` for a space) wherever they occur, so mixed forms
decode to the value too, and the values are then found in each view with ``str.find``.
Building a redactor costs one pass over each value; redacting costs, per view the text
needs, one pass over the text plus one ``str.find`` per value form: linear in text size and
secret bytes, with no pattern compiled per value. A value that itself looks encoded (``%41``,
``\\n``, ``+``) is also looked for in its decoded form, so it matches when the rest of it
was encoded around it.

Values shorter than :data:`MIN_REDACTED_CHARS` are not redacted: replacing every "ab" in a
message would garble it and protect nothing a guess would not find.

Text from a server can be megabytes; only the start of it reaches the model. So the bounded
forms (:meth:`Redactor.start`, :meth:`Redactor.bounded`, ``redact_structure`` with a limit)
read no more than the start that can be shown plus :attr:`Redactor.longest_form`: a form of
a value that begins within the start shown ends within what was read, so it is found and
masked whole, never shown in part; what begins later is not shown at all.
"""

from __future__ import annotations

import base64
import bisect
import functools
import itertools
import re
import sys
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

MIN_REDACTED_CHARS = 4
MASK = "***"
MAX_MESSAGE_CHARS = 4096
"""The start of an error message that is read and passed on (the rest is cut, with a note):
what the model needs to know why a call failed is a line or a short trace, and the
toolpool's own messages are a line or two. A server's message of megabytes costs the
redactor this plus :attr:`Redactor.longest_form` characters, not megabytes."""

_HEX = "[0-9A-Fa-f]"
# One backslash escape of JSON or Python repr; surrogate pairs (JSON's form of characters
# beyond the BMP) first, so a pair decodes to its one character.
_ESCAPE = (
    rf"\\u[dD][89abAB]{_HEX}{{2}}\\u[dD][c-fC-F]{_HEX}{{2}}"
    rf"|\\u{_HEX}{{4}}|\\U{_HEX}{{8}}|\\x{_HEX}{{2}}|\\[\\\"'/bfnrt]"
)
_SIMPLE_ESCAPES = {
    "\\": "\\",
    '"': '"',
    "'": "'",
    "/": "/",
    "b": "\b",
    "f": "\f",
    "n": "\n",
    "r": "\r",
    "t": "\t",
}
# What precedes a percent-encoded byte's two hex digits: "%", or also "%25" for a byte
# encoded twice ("%2541" for "A"; "%25" not followed by hex digits is "%").
_PERCENT_ONCE = "%"
_PERCENT_TWICE = "%(?:25)?"


@dataclass(frozen=True)
class _View:
    """One combination of encodings undone together: its units, as one capturing group."""

    units: re.Pattern[str]
    percent_byte: re.Pattern[str] | None  # one byte of a run, its hex digits in group 1
    plus_is_space: bool
    marks: tuple[str, ...]  # all in a text, or the view reads it like a view without them


def _views() -> tuple[_View, ...]:
    views = []
    for escapes in (False, True):
        for percent in (None, _PERCENT_ONCE, _PERCENT_TWICE):
            for plus in (False, True) if percent else (False,):
                parts = [_ESCAPE] if escapes else []
                # A run of bytes is one unit, so a multi-byte UTF-8 character decodes.
                parts += [f"(?:{percent}{_HEX}{{2}})+"] if percent else []
                parts += [r"\+"] if plus else []
                byte = re.compile(f"{percent}({_HEX}{{2}})") if percent else None
                marks = ("\\",) * escapes + ("%",) * bool(percent) + ("+",) * plus
                marks += ("%25",) * (percent == _PERCENT_TWICE)
                if parts:
                    unit = re.compile(f"({'|'.join(parts)})")
                    views.append(_View(unit, byte, plus, marks))
    return tuple(views)


_VIEWS = _views()
# Every view's units at once. A text is cut into these tokens once; each view then reads
# each distinct token once (its own units inside it), so the per-view work on a long text
# is a C-level map over the tokens, not a Python step per unit.
_TOKENS = re.compile(f"({_ESCAPE}|(?:{_PERCENT_TWICE}{_HEX}{{2}})+|\\+)")
# A text (or value) without these characters reads the same in every view.
_ENCODING_MARKS = re.compile(r"[%\\+]")


class _Readings(dict[str, str]):
    """Tokens as one view reads them, each decoded on first use."""

    def __init__(self, view: _View) -> None:
        super().__init__()
        self.view = view

    def __missing__(self, token: str) -> str:
        units = self.view.units.split(token)
        units[1::2] = [_decode_unit(unit, self.view) for unit in units[1::2]]
        reading = self[token] = "".join(units)
        return reading


def redactor(secrets: Mapping[str, str] | Iterable[str]) -> Redactor:
    """A :class:`Redactor` replacing every form of every value of ``secrets`` by ``***``."""
    values = secrets.values() if isinstance(secrets, Mapping) else secrets
    kept = {v for v in values if len(v) >= MIN_REDACTED_CHARS}
    raw_needles = set(kept)
    view_needles = set(kept)
    for value in kept:
        raw_needles.update(_base64_forms(value))
        if _ENCODING_MARKS.search(value):
            # A value that looks encoded itself ("%41", "\\n", "+") reads differently in a
            # view; with its other characters encoded around it, only that reading matches.
            # Every view's reading is looked for in every view: a JSON-escaped URL is
            # decoded by the view undoing both, but the value's "\\n" was never escaped.
            for view in _VIEWS:
                reading = _Readings(view)[value]
                if len(reading) >= MIN_REDACTED_CHARS:
                    view_needles.add(reading)
    return Redactor(raw_needles, view_needles)


class Redactor:
    """Replaces every form of a project's secret values in a text by ``***``: call it."""

    def __init__(self, raw_needles: Collection[str], view_needles: Collection[str]) -> None:
        self._raw_needles = raw_needles  # looked for as written
        self._view_needles = view_needles  # looked for in each view's reading
        self.longest_form = max(
            [*map(len, raw_needles), *map(_longest_form, view_needles)], default=0
        )
        """The most characters a form of a value can take in a text: one that begins before
        a point of the text ends before this many characters past it."""

    def __call__(self, text: str) -> str:
        return _mask(text, self._spans(text), len(text))[0]

    def start(self, text: str, limit: int) -> tuple[str, int]:
        """What redacting ``text`` shows of its first ``limit`` characters, and how many
        characters of ``text`` that covers (at least ``limit``, more when a masked form
        begun within them ends later). Reads at most ``limit + longest_form`` of them."""
        if len(text) <= limit:
            return self(text), len(text)
        read = text[: limit + self.longest_form]
        return _mask(read, self._spans(read), limit)

    def bounded(self, text: str, limit: int = MAX_MESSAGE_CHARS) -> str:
        """``text`` redacted, cut after its first ``limit`` characters with a note saying so
        (a message from a server, or one quoting it)."""
        shown, covered = self.start(text, limit)
        return shown if covered == len(text) else shown + cut_note(limit)

    def _spans(self, text: str) -> list[tuple[int, int]]:
        if not self._raw_needles:
            return []
        spans = _find_all(text, self._raw_needles)
        if _ENCODING_MARKS.search(text):
            parts = _TOKENS.split(text)  # raw, token, raw, token, ..., raw
            # Where part k starts in the text, for the rare text a view finds a value in.
            offsets = functools.cache(lambda: list(itertools.accumulate(map(len, parts))))
            seen = {text}
            for view in _VIEWS:
                if all(mark in text for mark in view.marks):
                    readings = _Readings(view)
                    spans += _find_in_view(parts, offsets, readings, self._view_needles, seen)
        return spans


def cut_note(limit: int) -> str:
    """What ends a text cut after its first ``limit`` characters."""
    return f" [... cut: only the first {limit} characters are read]"


def redact_structure(value: Any, redact: Redactor, limit: int | None = None) -> Any:
    """``value`` (JSON-like: dicts, lists, strings) with every string redacted.

    With ``limit``, only its start is read, in the order JSON writes it: strings up to
    ``limit`` characters in all, other values one each. The string that crosses it is cut
    like :meth:`Redactor.bounded` (a key cut so gets ``None``), another value past it
    becomes the note itself, and what follows is left out."""
    return _Reader(redact, sys.maxsize if limit is None else limit).value(value)


class _Reader:
    """Reads a JSON-like value in order until ``left`` characters are spent."""

    def __init__(self, redact: Redactor, limit: int) -> None:
        self.redact = redact
        self.limit = limit
        self.left = limit
        self.cut = False

    def value(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.text(value)
        self.left -= 1
        if self.left < 0:
            self.cut = True
            return cut_note(self.limit).lstrip()
        if isinstance(value, dict):
            out = {}
            for key, item in value.items():
                text = self.text(str(key))
                out[text] = None if self.cut else self.value(item)
                if self.cut:
                    break
            return out
        if isinstance(value, list | tuple):
            items = []
            for item in value:
                items.append(self.value(item))
                if self.cut:
                    break
            return items
        return value

    def text(self, text: str) -> str:
        if len(text) <= self.left:
            self.left -= len(text)
            return self.redact(text)
        shown, _ = self.redact.start(text, max(self.left, 0))
        self.left, self.cut = 0, True
        return shown + cut_note(self.limit)


def _find_in_view(
    parts: list[str],
    offsets: Callable[[], list[int]],
    readings: _Readings,
    needles: Iterable[str],
    seen: set[str],
) -> list[tuple[int, int]]:
    """Spans of the text cut into ``parts`` whose reading contains a needle, widened to
    whole tokens; nothing for a reading already searched (``seen``: views often agree)."""
    read = parts[:]
    read[1::2] = map(readings.__getitem__, parts[1::2])
    text = "".join(read)
    if text in seen:
        return []
    seen.add(text)
    found = _find_all(text, needles)
    if not found:
        return []
    # Only now the offsets: part k starts at original[k] in the text, at position[k] in
    # its reading.
    original = [0, *offsets()]
    position = list(itertools.accumulate(map(len, read), initial=0))

    def to_original(index: int, end: bool) -> int:
        k = bisect.bisect_right(position, index) - 1
        if k % 2:  # inside a decoded token: all of it
            return original[k + 1] if end else original[k]
        return original[k] + index - position[k] + end

    return [(to_original(start, False), to_original(stop - 1, True)) for start, stop in found]


def _decode_unit(unit: str, view: _View) -> str:
    if unit == "+":
        return " " if view.plus_is_space else unit
    if unit[0] == "%" and view.percent_byte:
        return _decode_percent(unit, view.percent_byte)
    kind = unit[1]
    if kind in _SIMPLE_ESCAPES:
        return _SIMPLE_ESCAPES[kind]
    if kind == "u" and len(unit) == 12:  # a surrogate pair
        high, low = int(unit[2:6], 16), int(unit[8:12], 16)
        return chr(0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00))
    code = int(unit[2:], 16)
    return chr(code) if code <= 0x10FFFF else unit


def _decode_percent(run: str, percent_byte: re.Pattern[str]) -> str:
    """A run of percent-encoded bytes as UTF-8; a byte that is not part of a character
    stays as it was written ("%c0" alone is not a character: a value may hold it raw)."""
    raw = bytes.fromhex("".join(percent_byte.findall(run)))
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        pass
    written = [match.group() for match in percent_byte.finditer(run)]
    out = []
    i = 0
    while i < len(raw):
        lead = raw[i]
        size = 1 if lead < 0x80 else 2 if lead >> 5 == 6 else 3 if lead >> 4 == 14 else 4
        try:
            out.append(raw[i : i + size].decode("utf-8"))
            i += size
        except UnicodeDecodeError:
            out.append(written[i])
            i += 1
    return "".join(out)


def _find_all(text: str, needles: Iterable[str]) -> list[tuple[int, int]]:
    """Every ``[start, end)`` of every needle in ``text`` (overlaps included)."""
    spans = []
    for needle in needles:
        start = text.find(needle)
        while start >= 0:
            spans.append((start, start + len(needle)))
            # Past this occurrence: one overlapping it is masked with it anyway.
            start = text.find(needle, start + len(needle))
    return spans


def _mask(text: str, spans: list[tuple[int, int]], stop: int) -> tuple[str, int]:
    """``text`` up to ``stop`` with each group of overlapping spans replaced by one
    :data:`MASK` (a group begun before ``stop`` masked whole, wherever it ends), and where
    in ``text`` the result ends."""
    if not spans:
        return text[:stop], stop
    pieces = []
    kept_from = 0  # where the text after the last mask starts
    start, end = -1, -1  # the group being masked
    for span_start, span_end in sorted(spans):
        if span_start < end:  # overlaps the group: widen it
            end = max(end, span_end)
            continue
        if span_start >= stop:
            break
        if end >= 0:
            pieces += [text[kept_from:start], MASK]
            kept_from = end
        start, end = span_start, span_end
    if end >= 0:
        pieces += [text[kept_from:start], MASK]
        kept_from = end
    covered = max(stop, kept_from)
    pieces.append(text[kept_from:covered])
    return "".join(pieces), covered


def _base64_forms(value: str) -> set[str]:
    raw = value.encode("utf-8")
    forms = set()
    for encode in (base64.b64encode, base64.urlsafe_b64encode):
        text = encode(raw).decode("ascii")
        forms.add(text)
        forms.add(text.rstrip("="))
    return {f for f in forms if len(f) >= MIN_REDACTED_CHARS}


# Characters of three UTF-8 bytes (the BMP from U+0800); beyond it, four.
_THREE_BYTES = re.compile("[\\u0800-\\uffff]")


def _longest_form(needle: str) -> int:
    """The most characters ``needle`` can take in any view: each character written its
    longest way, ``\\U0001f600`` for any (10), or each UTF-8 byte percent-encoded twice
    (``%25XX``, 5 per byte: 15 for three bytes, 20 for four). Counted at C speed."""
    four_bytes = len(needle.encode("utf-16-le", "surrogatepass")) // 2 - len(needle)
    three_bytes = len(_THREE_BYTES.findall(needle))
    return 10 * len(needle) + 5 * three_bytes + 10 * four_bytes
