"""Token streaming of a step's model call (issue #19).

A definition with ``streaming`` set has its model calls streamed: each text or thought
piece goes out as a transient MODEL_TEXT_DELTA (:mod:`agentfleet.events.delta`) while the
reply arrives, and the loop gets the whole reply at the end, persisted as before (MODEL_TEXT
with the whole text). Function calls are acted on only then, once the stream is complete.
A model client that cannot stream answers unstreamed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, fields, replace
from typing import Any

import asyncpg
from google.genai import types

from agentfleet.events.delta import TextDelta, publish_delta
from agentfleet.llm import ModelClient, ModelReply, QuotaScope, QuotaWaitSink, StreamingModelClient
from agentfleet.llm import TextDelta as ReplyPiece
from services.executor.loop_state import Turn
from services.executor.model.fallback import with_fallbacks
from services.executor.model.quota_waits import quota_waits
from services.executor.runs import RunRecord
from services.executor.store import runs as store_runs
from services.executor.store.persistence import RunRecorder


@dataclass(frozen=True, kw_only=True, slots=True)
class ModelCall:
    """What one model call of a step sends."""

    model: str
    system_instruction: str | None
    contents: Sequence[types.Content]
    tools: Sequence[types.Tool]
    config: types.GenerateContentConfig | None
    quota_scope: QuotaScope | None = None
    """Whose call it is, for the order of calls waiting for the model's quota."""
    fallback_models: tuple[str, ...] = ()
    """Not sent: the models :func:`call_model` turns to when ``model`` keeps failing."""
    fallback_wait_s: float | None = None
    """Not sent as such: how long a call with a next model waits for a model's quota."""

    @classmethod
    def of(cls, turn: Turn, contents: Sequence[types.Content]) -> ModelCall:
        """A step's call: the run's turn with the conversation so far."""
        return cls(
            model=turn.model,
            system_instruction=turn.system,
            contents=contents,
            tools=turn.tools,
            config=turn.config,
            fallback_models=turn.fallback_models,
            fallback_wait_s=turn.fallback_wait_s,
        )

    def arguments(self, model: str | None = None, *, has_next: bool = False) -> dict[str, Any]:
        """The keyword arguments of :meth:`ModelClient.generate` (the fields, not copies),
        for ``model`` (default: the call's own); ``has_next``: a fallback model follows it,
        so its quota wait is bounded (``quota_fallback_wait_s``)."""
        sent = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in _NOT_SENT}
        if model is not None:
            sent["model"] = model
        if has_next:
            wait = self.fallback_wait_s
            sent["quota_fallback_wait_s"] = math.inf if wait is None else wait
        return sent


_NOT_SENT = frozenset({"fallback_models", "fallback_wait_s"})


async def call_model(
    *,
    model: ModelClient,
    pool: asyncpg.Pool,
    recorder: RunRecorder,
    step: int,
    call: ModelCall,
    streaming: bool,
) -> ModelReply:
    """One model call of the recorder's run, step ``step``; streamed (deltas published)
    when asked for and the client can; answered by a fallback model when the call's keeps
    failing. Its waits for the model's quota show on the run
    (:mod:`~services.executor.model.quota_waits`)."""
    run = recorder.run
    scope = QuotaScope(project=run.project_id, age_key=run.created_at.timestamp())
    call = replace(call, quota_scope=scope)

    models = (call.model, *call.fallback_models)

    async def one(name: str) -> ModelReply:
        arguments = call.arguments(name, has_next=name != models[-1])
        async with quota_waits(recorder, step=step, model=name) as on_wait:
            if not streaming or not isinstance(model, StreamingModelClient):
                return await model.generate(**arguments, on_wait=on_wait)
            return await _streamed(model, pool, run, step, arguments, on_wait)

    return await with_fallbacks(one, models)


async def _streamed(
    model: StreamingModelClient,
    pool: asyncpg.Pool,
    run: RunRecord,
    step: int,
    arguments: dict[str, Any],
    on_wait: QuotaWaitSink,
) -> ModelReply:
    # Only this worker appends the run's events while it holds the lease: the step's
    # first stored event will have this seq.
    before_seq = await store_runs.next_event_seq(pool, run.project_id, run.id)

    async def publish(piece: ReplyPiece) -> None:
        await publish_delta(
            pool,
            TextDelta(
                run_id=run.id,
                root_run_id=run.root_run_id,
                agent_name=run.agent_name,
                step=step,
                text=piece.text,
                thought=piece.thought,
                offset=piece.offset,
                before_seq=before_seq,
            ),
        )

    return await model.generate_stream(**arguments, on_delta=publish, on_wait=on_wait)
