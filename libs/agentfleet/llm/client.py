"""The model client contract the executor codes against.

:class:`ModelClient` is the port; :class:`agentfleet.llm.genai_client.GenaiModelClient` is the
google-genai adapter (Gemini API, Vertex AI, or the stub server through a base URL).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, TypedDict, Unpack, runtime_checkable

from google.genai import types

from agentfleet.llm.limiter.quota_wait import QuotaScope, QuotaWaitSink


@dataclass(frozen=True, kw_only=True, slots=True)
class TokenUsage:
    """Token counts of one model call, as the server reported them (0 when it did not)."""

    prompt_tokens: int = 0
    output_tokens: int = 0
    """Candidate tokens plus thinking tokens."""
    total_tokens: int = 0
    cached_tokens: int = 0
    """Of the prompt tokens, those served from the context cache (priced lower)."""
    thinking_tokens: int = 0
    """Of the output tokens, the thoughts."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ModelReply:
    """One model turn."""

    content: types.Content
    """The turn exactly as received, to append to the conversation and persist."""
    text: str
    """The text parts joined ("" when none); thoughts left out."""
    function_calls: tuple[types.FunctionCall, ...]
    """Calls in the order the model gave them; several mean "run them concurrently"."""
    finish_reason: str | None
    """``STOP``, ``MAX_TOKENS``, ``SAFETY``, ... as the server named it."""
    usage: TokenUsage
    model_version: str | None
    response_id: str | None
    attempts: int
    """Calls it took, retries included (1 when the first call answered)."""
    model: str = ""
    """The model that answered (a fallback's name when the requested one did not); set by
    the caller that priced it, "" when unknown."""
    cost_nanos: int = 0
    """What the call cost in nano-dollars (:mod:`agentfleet.settings.model_prices`); 0 when
    unpriced."""
    fallback_reason: str | None = None
    """Why the models before ``model`` did not answer; None when the requested one did."""


@dataclass(frozen=True, kw_only=True, slots=True)
class TextDelta:
    """One piece of a streamed reply's text (or thought)."""

    text: str
    thought: bool
    offset: int
    """Characters of the reply's text (or thought, when ``thought``) before this piece."""


DeltaSink = Callable[[TextDelta], Awaitable[None]]
"""Receives a streamed reply's pieces in order; awaited before the next chunk is read."""


@dataclass(frozen=True, kw_only=True, slots=True)
class RetryPolicy:
    """Bounded retries with exponential backoff and jitter for transient model errors."""

    max_attempts: int = 4
    """Calls in all, the first included; 1 means no retry."""
    base_delay_s: float = 0.5
    """Wait before the first retry; doubles each time, up to ``max_delay_s``."""
    max_delay_s: float = 8.0
    retry_statuses: frozenset[int] = frozenset({429, 500, 502, 503, 504})

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError("max_attempts must be >= 1")
        if self.base_delay_s < 0 or self.max_delay_s < 0:
            raise ValueError("delays must be >= 0")

    @classmethod
    def for_tests(cls, max_attempts: int = 3) -> RetryPolicy:
        """Real retries with millisecond waits, so tests exercise the policy quickly."""
        return cls(max_attempts=max_attempts, base_delay_s=0.001, max_delay_s=0.01)


class _RequiredArguments(TypedDict):
    model: str
    system_instruction: str | None
    contents: Sequence[types.Content]


# Required and optional keys by class (``total``): with postponed annotations, TypedDict
# cannot see Required[...] inside the annotation strings.
class ModelRequest(_RequiredArguments, total=False):
    """What one model call sends: the keyword arguments of :meth:`ModelClient.generate`
    (and of :meth:`StreamingModelClient.generate_stream`, besides ``on_delta``): ``model``,
    ``system_instruction`` and ``contents``, and optionally:"""

    tools: Sequence[types.Tool]
    """The functions the model may call; none when left out."""
    config: types.GenerateContentConfig | None
    """Temperature, max output tokens, a response JSON schema, tool config; its own system
    instruction and tools are replaced by the fields above."""
    quota_scope: QuotaScope | None
    """Whose call this is (project, run age), to order it among calls waiting for quota."""
    on_wait: QuotaWaitSink | None
    """Told when the call starts and stops waiting for its model's shared quota
    (:class:`agentfleet.llm.limiter.quota_wait.QuotaWait`); not sent to the model."""
    quota_fallback_wait_s: float | None
    """Set when the call has a fallback model: the longest it waits for this model's
    quota (expected or waited) before the limiter raises
    :class:`~agentfleet.llm.errors.QuotaWaitTooLong` instead; ``inf`` means the maximum
    wait (AGENTFLEET_MODEL_QUOTA_MAX_WAIT_S). Not sent to the model."""


def checked_request(request: Mapping[str, object]) -> ModelRequest:
    """``request`` when it has every required field and no other (TypeError otherwise, as
    a call with a missing or unknown keyword argument raises)."""
    missing = ModelRequest.__required_keys__ - request.keys()
    unknown = request.keys() - ModelRequest.__required_keys__ - ModelRequest.__optional_keys__
    if missing or unknown:
        raise TypeError(
            f"model call arguments: missing {sorted(missing)}, unexpected {sorted(unknown)}"
        )
    return request  # type: ignore[return-value]


class ModelClient(Protocol):
    """Calls a model for one step of an agent. Implementations retry transient failures
    themselves and raise :class:`agentfleet.llm.errors.ModelError` subclasses otherwise;
    cancellation propagates at once."""

    async def generate(self, **request: Unpack[ModelRequest]) -> ModelReply:
        """One model call."""
        ...

    async def aclose(self) -> None:
        """Releases connections; the client is not used afterwards."""
        ...


@runtime_checkable
class StreamingModelClient(ModelClient, Protocol):
    """A :class:`ModelClient` that can also stream a reply's text as it is produced."""

    async def generate_stream(
        self, *, on_delta: DeltaSink, **request: Unpack[ModelRequest]
    ) -> ModelReply:
        """:meth:`generate`, with each text or thought piece given to ``on_delta`` as it
        arrives; returns the whole reply, function calls included, once the stream ends."""
        ...
