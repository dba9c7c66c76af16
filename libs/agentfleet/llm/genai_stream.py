"""Streamed model calls: ``generate_content_stream`` folded into one :class:`ModelReply`.

Each text or thought piece is handed to a :data:`DeltaSink` as it arrives (with its offset
in the step's text or thought); the reply returned at the end is the whole turn, exactly
what a non-streamed call would have given, so the executor persists and acts on it the same
way (function calls only once the stream is complete).

The chunks come from the fast path's :meth:`~agentfleet.llm.genai_fast.FastGenerate.stream`
or from the SDK's public ``client.aio.models.generate_content_stream``: the same chunk
objects either way, so the same pieces and reply. A failure before the first piece is
retried like a plain call (:func:`agentfleet.llm.genai_translate.with_retries`); once
pieces went out a retry would repeat them, so the error is raised instead.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

from google.genai import types

from agentfleet.llm.client import DeltaSink, TextDelta

Chunks = Callable[[], Awaitable[AsyncIterator[types.GenerateContentResponse]]]
"""Opens one streamed call: its chunks, in order."""


@dataclass(slots=True)
class _Fold:
    """The chunks of one stream merged into one response."""

    parts: list[types.Part]
    last: types.GenerateContentResponse | None = None
    finish_reason: types.FinishReason | None = None
    usage: types.GenerateContentResponseUsageMetadata | None = None
    text_chars: int = 0
    thought_chars: int = 0

    def add(self, chunk: types.GenerateContentResponse) -> list[TextDelta]:
        """Merges ``chunk``; the text pieces it brought."""
        self.last = chunk
        if chunk.usage_metadata is not None:
            self.usage = chunk.usage_metadata
        deltas: list[TextDelta] = []
        candidate = chunk.candidates[0] if chunk.candidates else None
        if candidate is None:
            return deltas
        if candidate.finish_reason is not None:
            self.finish_reason = candidate.finish_reason
        for part in (candidate.content.parts or []) if candidate.content else []:
            if part.text is not None and part.function_call is None:
                thought = bool(part.thought)
                offset = self.thought_chars if thought else self.text_chars
                if part.text:
                    deltas.append(TextDelta(text=part.text, thought=thought, offset=offset))
                if thought:
                    self.thought_chars += len(part.text)
                else:
                    self.text_chars += len(part.text)
                self._append_text(part)
            else:
                self.parts.append(part)
        return deltas

    def _append_text(self, part: types.Part) -> None:
        """Consecutive text pieces of one kind make one part, as in an unstreamed reply."""
        previous = self.parts[-1] if self.parts else None
        if (
            previous is not None
            and previous.text is not None
            and previous.function_call is None
            and bool(previous.thought) == bool(part.thought)
        ):
            self.parts[-1] = previous.model_copy(
                update={
                    "text": previous.text + (part.text or ""),
                    "thought_signature": previous.thought_signature or part.thought_signature,
                }
            )
        else:
            self.parts.append(part)

    def response(self) -> types.GenerateContentResponse:
        if self.last is None:
            return types.GenerateContentResponse()
        if not self.parts and not (self.last.candidates or []):
            return self.last  # no candidate at all (a blocked prompt)
        candidate = types.Candidate(
            content=types.Content(role="model", parts=self.parts),
            finish_reason=self.finish_reason,
            index=0,
        )
        return types.GenerateContentResponse(
            candidates=[candidate],
            usage_metadata=self.usage,
            model_version=self.last.model_version,
            response_id=self.last.response_id,
            prompt_feedback=self.last.prompt_feedback,
        )


async def stream_once(chunks: Chunks, on_delta: DeltaSink) -> types.GenerateContentResponse:
    """One streamed call folded into one response. An error raised once a piece went out
    carries ``delta_sent`` (:func:`~agentfleet.llm.genai_translate.with_retries` then does
    not retry it)."""
    fold = _Fold(parts=[])
    sent = False
    try:
        async for chunk in await chunks():
            for delta in fold.add(chunk):
                await on_delta(delta)
                sent = True
    except Exception as exc:
        exc.delta_sent = sent  # type: ignore[attr-defined]
        raise
    return fold.response()
