"""The wire form of a conversation, converted once (the fast path's request contents).

Each content is converted with google-genai's own converter (``models._Content_to_mldev`` or
``_Content_to_vertex``) and encoded (``json.dumps``) once while it lives. A conversation only
grows, so :class:`Wires` also keeps, per conversation (by its first content), the contents it
already gave: a call finds them by comparing ids in C (``map(id, ...)``) and converts only
what was appended since; without that, every call walked the whole conversation in Python
(about 0.7 us per content: 0.3 ms per call at 400 contents).

The ids are safe to compare: a conversation's record lists contents that all still live
(when one of them dies, every record it is in is dropped), and live objects never share an
id. Anything else (a content replaced, a conversation cut short) just starts a new record.
"""

from __future__ import annotations

import json
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import islice
from typing import Any

from google.genai import _common, models, types

Wire = tuple[dict[str, Any], bytes]
"""A content as sent: its wire JSON and that JSON encoded (``json.dumps``, UTF-8)."""


@dataclass(slots=True)
class _Conversation:
    """The contents of one conversation already converted, in order."""

    ids: list[int] = field(default_factory=list)
    values: list[dict[str, Any]] = field(default_factory=list)
    texts: list[bytes] = field(default_factory=list)


class Wires:
    """Converted contents of one backend (Gemini API or Vertex AI)."""

    def __init__(self, *, vertex: bool) -> None:
        self._convert = models._Content_to_vertex if vertex else models._Content_to_mldev
        self._contents: dict[int, tuple[weakref.ref[types.Content], Wire]] = {}
        self._conversations: dict[int, _Conversation] = {}
        """By the id of a conversation's first content."""
        self._member_of: dict[int, set[int]] = {}
        """Content id -> the conversations (by first content id) whose record lists it."""

    def __len__(self) -> int:
        """Contents converted and still alive."""
        return len(self._contents)

    def of(self, contents: Sequence[types.Content]) -> tuple[list[dict[str, Any]], list[bytes]]:
        """The wire JSON of every content and their encodings, in order (``contents`` is
        not empty)."""
        key = id(contents[0])
        known = self._conversations.get(key)
        done = len(known.ids) if known is not None else 0
        if (
            known is None
            or done > len(contents)
            or known.ids != list(map(id, islice(contents, done)))
        ):
            known = self._conversations[key] = _Conversation()
            done = 0
        for content in islice(contents, done, None):
            value, text = self.content(content)
            member = id(content)
            known.ids.append(member)
            known.values.append(value)
            known.texts.append(text)
            self._member_of.setdefault(member, set()).add(key)
        return list(known.values), known.texts

    def content(self, content: types.Content) -> Wire:
        """The wire JSON of one content and its encoding, made once while the content lives."""
        key = id(content)
        cached = self._contents.get(key)
        if cached is not None and cached[0]() is content:
            return cached[1]
        # The converter reads a model through getv, which scans every field per lookup;
        # on the model's own dump (what convert_to_dict makes of it anyway) each lookup is
        # a dict hit, and the result is the same.
        value = _common.encode_unserializable_types(
            _common.convert_to_dict(
                self._convert(content.model_dump(exclude_none=True), None, None)
            )
        )
        wire = (value, json.dumps(value).encode())
        # The callback holds the dicts, not self: no reference cycle through the weakref.
        contents, conversations, member_of = self._contents, self._conversations, self._member_of

        def forget(_: object, key: int = key) -> None:
            contents.pop(key, None)
            for conversation in member_of.pop(key, ()):
                conversations.pop(conversation, None)

        self._contents[key] = (weakref.ref(content, forget), wire)
        return wire
