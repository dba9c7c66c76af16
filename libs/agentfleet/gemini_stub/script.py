"""Scripts: what the stub model answers, and which script answers which request.

A :class:`Script` is matched to a request by a substring of its system instruction and/or its
model name; specific scripts are tried in the order they were added (first match wins) and a
script with no matcher is the default. A book may also have a *fallback* for the requests
nothing else answers (``agentfleet up`` gives its stub one: :mod:`.offline_model`); it is
configuration, not a script, so resetting the scripts keeps it. A script answers either with
a fixed sequence of :class:`Reply` steps or with a policy function that reads the request.

Everything here is pure (no I/O), so matching and sequencing are tested without a server.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from google.genai import types

from agentfleet.gemini_stub.request import StubRequest

Policy = Callable[[StubRequest], "Reply | Awaitable[Reply]"]
"""Chooses a reply by reading the request (sync or async)."""


@dataclass(frozen=True, slots=True)
class Call:
    """One function call the model asks for."""

    name: str
    args: Mapping[str, Any] = field(default_factory=dict)
    id: str | None = None
    """Sent as ``functionCall.id`` when set; the real API often omits it."""


@dataclass(frozen=True, slots=True)
class Usage:
    """Token counts reported in ``usageMetadata`` instead of the computed estimate."""

    prompt_tokens: int
    candidates_tokens: int
    total_tokens: int | None = None
    """Defaults to the sum of the two."""


@dataclass(kw_only=True, slots=True)
class Reply:
    """One answer of the stub model.

    The kinds are exclusive: a normal reply (``text`` and/or ``calls``), an HTTP error
    (``error_status``), ``malformed`` (a body that is not JSON) or ``empty`` (no candidates).
    ``delay_s`` and ``hang`` apply before any kind.
    """

    text: str | None = None
    calls: Sequence[Call] = ()
    """Several calls make one reply with several ``functionCall`` parts (after the text)."""
    error_status: int | None = None
    """Answer with this HTTP status and a Google error body (429, 500, 503, ...)."""
    error_message: str | None = None
    retry_delay_s: float | None = None
    """With ``error_status``: a ``google.rpc.RetryInfo`` detail with this ``retryDelay``, as
    Gemini sends with a 429."""
    quota_id: str | None = None
    """With ``error_status``: a ``google.rpc.QuotaFailure`` detail whose violation has this
    ``quotaId`` (e.g. ``GenerateRequestsPerMinutePerProjectPerModel``), as Gemini sends."""
    delay_s: float = 0.0
    """Simulated latency before answering."""
    hang: bool = False
    """Never answer: wait until the client goes away or the stub stops or resets."""
    malformed: bool = False
    """A 200 answer whose body is truncated JSON."""
    empty: bool = False
    """A 200 answer with no candidates (what the API sends for a blocked prompt)."""
    block_reason: str | None = None
    """``promptFeedback.blockReason`` of an empty reply, e.g. ``SAFETY``."""
    usage: Usage | None = None
    """Explicit usage metadata; otherwise about one token per four characters."""
    finish_reason: str = "STOP"
    stream_chunk_chars: int | None = None
    """For streamed answers: split the thought and the text into chunks of this many
    characters (None: one chunk each)."""
    stream_chunk_delay_s: float = 0.0
    """For streamed answers (``alt=sse``): pause between two chunks, as a real model
    produces its tokens over time."""
    thought: str | None = None
    """A thought summary (``"thought": true`` part) sent before the text, as Gemini does
    with ``include_thoughts``; streamed in chunks like the text."""

    def __post_init__(self) -> None:
        self.calls = tuple(self.calls)
        kinds = [
            self.error_status is not None,
            self.malformed,
            self.empty,
            self.text is not None or bool(self.calls),
        ]
        if sum(kinds) > 1:
            raise ValueError("a Reply is one of: text/calls, error_status, malformed, empty")
        if sum(kinds) == 0 and not self.hang:
            raise ValueError("a Reply needs text, calls, error_status, malformed, empty or hang")
        if self.error_status is not None and not 400 <= self.error_status <= 599:
            raise ValueError(f"error_status must be 4xx or 5xx, got {self.error_status}")
        if self.delay_s < 0:
            raise ValueError("delay_s must be >= 0")
        if self.error_status is None and (self.retry_delay_s, self.quota_id) != (None, None):
            raise ValueError("retry_delay_s and quota_id go with an error_status")
        if self.retry_delay_s is not None and not self.retry_delay_s >= 0:
            raise ValueError("retry_delay_s must be >= 0")
        if self.stream_chunk_delay_s < 0:
            raise ValueError("stream_chunk_delay_s must be >= 0")

    def content(self) -> types.Content:
        """The model turn this reply stands for (text first, then calls)."""
        parts: list[types.Part] = []
        if self.thought is not None:
            parts.append(types.Part(text=self.thought, thought=True))
        if self.text is not None:
            parts.append(types.Part(text=self.text))
        parts.extend(
            types.Part(function_call=types.FunctionCall(name=c.name, args=dict(c.args), id=c.id))
            for c in self.calls
        )
        return types.Content(role="model", parts=parts)


@dataclass(kw_only=True, slots=True)
class Script:
    """A scripted agent: which requests it answers and how."""

    name: str
    match_system: str | None = None
    """Matches when the system instruction contains this text."""
    match_model: str | None = None
    """Matches this model name exactly (``models/`` prefix ignored). With ``match_system``,
    both must match. A script with neither matcher is the default."""
    replies: Sequence[Reply] = ()
    """Answers in order, one per request, shared by every conversation."""
    per_conversation: bool = False
    """Pick ``replies[turn]`` by the number of model turns already in the request instead of a
    shared counter, so concurrent conversations each walk the sequence."""
    policy: Policy | None = None
    """Chooses each answer from the request; exclusive with ``replies``."""

    def __post_init__(self) -> None:
        self.replies = tuple(self.replies)
        if not self.name:
            raise ValueError("a Script needs a name")
        if self.policy is not None and self.replies:
            raise ValueError(f"script {self.name!r}: give replies or a policy, not both")
        if self.policy is None and not self.replies:
            raise ValueError(f"script {self.name!r}: give replies or a policy")

    @property
    def is_default(self) -> bool:
        return self.match_system is None and self.match_model is None

    def matches(self, request: StubRequest) -> bool:
        """True when every matcher this script sets accepts the request."""
        if self.match_system is not None and self.match_system not in request.system_instruction:
            return False
        return self.match_model is None or self.match_model.removeprefix("models/") == (
            request.model
        )


class ScriptExhausted(LookupError):
    """A script has no reply left, or no script matches: the stub answers 500 with this."""


class ScriptBook:
    """The stub's scripts and their counters; chooses the reply for each request."""

    def __init__(self, *, fallback: Script | None = None) -> None:
        """``fallback`` answers what no script (not even a default) matches; without it
        such a request is a :class:`ScriptExhausted` error, which makes a test fail loudly."""
        self._scripts: list[Script] = []
        self._default: Script | None = None
        self._fallback = fallback
        self._used: dict[str, int] = {}
        self._count_fallback()

    def _count_fallback(self) -> None:
        if self._fallback is not None:
            self._used[self._fallback.name] = 0

    def add(self, script: Script) -> None:
        """Adds a script; names are unique and there is at most one default."""
        if script.name in self._used:
            raise ValueError(f"a script named {script.name!r} already exists")
        if script.is_default:
            if self._default is not None:
                raise ValueError(
                    f"script {script.name!r} has no matcher, and {self._default.name!r} "
                    "is already the default"
                )
            self._default = script
        else:
            self._scripts.append(script)
        self._used[script.name] = 0

    def clear(self) -> None:
        """Forgets the scripts and every counter; keeps the fallback."""
        self._scripts.clear()
        self._default = None
        self._used.clear()
        self._count_fallback()

    def find(self, request: StubRequest) -> Script | None:
        """The first matching script in insertion order, else the default, else the
        fallback."""
        for script in self._scripts:
            if script.matches(request):
                return script
        return self._default if self._default is not None else self._fallback

    def used(self, name: str) -> int:
        """How many requests the named script has answered."""
        return self._used[name]

    def remaining(self, name: str) -> int | None:
        """Replies left in a shared sequence; None for policies and per-conversation."""
        script = next(s for s in self.scripts() if s.name == name)
        if script.policy is not None or script.per_conversation:
            return None
        return len(script.replies) - self._used[name]

    def scripts(self) -> list[Script]:
        """In matching order: the specific scripts, the default, the fallback."""
        last = [script for script in (self._default, self._fallback) if script is not None]
        return [*self._scripts, *last]

    async def next_reply(self, request: StubRequest) -> tuple[Script, Reply]:
        """Chooses the script and the reply; raises :class:`ScriptExhausted` with a message
        meant to make a test fail loudly. Sets ``request.script``."""
        script = self.find(request)
        request.script = script.name if script is not None else None
        if script is None:
            raise ScriptExhausted(
                f"gemini stub: no script matches model {request.model!r} with system "
                f"instruction {request.system_instruction[:80]!r}"
            )
        index = self._used[script.name]
        self._used[script.name] = index + 1
        if script.policy is not None:
            chosen = script.policy(request)
            reply = await chosen if inspect.isawaitable(chosen) else chosen
            if not isinstance(reply, Reply):
                raise ScriptExhausted(
                    f"gemini stub: policy of script {script.name!r} returned {reply!r}, not a Reply"
                )
            return script, reply
        if script.per_conversation:
            index = request.turn
        if index >= len(script.replies):
            where = f"turn {index}" if script.per_conversation else f"request {index + 1}"
            raise ScriptExhausted(
                f"gemini stub: script {script.name!r} ran out of replies at {where} "
                f"(it has {len(script.replies)})"
            )
        return script, script.replies[index]
