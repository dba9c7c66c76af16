"""The executor's model client, built at the first model call.

An executor without a model configured still starts; its runs fail with the reason
(FAILED_PRECONDITION) instead of the process refusing to start.
"""

from __future__ import annotations

import dataclasses
from typing import Unpack

from agentfleet.errors import FailedPrecondition
from agentfleet.llm import DeltaSink, GenaiModelClient, ModelReply, ModelRequest, RetryPolicy
from agentfleet.llm.limiter.quota import ModelQuotas
from agentfleet.observability import metrics
from agentfleet.process.service_runtime import ServiceContext


class LazyModelClient:
    """Builds the google-genai client at the first model call, so an executor without a
    model configured still starts (and its runs fail with the reason)."""

    def __init__(self, context: ServiceContext) -> None:
        self._context = context
        self._client: GenaiModelClient | None = None

    async def generate(self, **request: Unpack[ModelRequest]) -> ModelReply:
        call = self._built().generate(**request)
        return self._priced(
            await metrics.timed_model_call(call, model=request["model"]), request["model"]
        )

    async def generate_stream(
        self, *, on_delta: DeltaSink, **request: Unpack[ModelRequest]
    ) -> ModelReply:
        call = self._built().generate_stream(on_delta=on_delta, **request)
        return self._priced(
            await metrics.timed_model_call(call, model=request["model"]), request["model"]
        )

    def _priced(self, reply: ModelReply, model: str) -> ModelReply:
        """The reply with the model that answered and its cost by the price table."""
        cost = self._context.settings.model_prices.cost_nanos(model, reply.usage)
        return dataclasses.replace(reply, model=model, cost_nanos=cost)

    def _built(self) -> GenaiModelClient:
        if self._client is None:
            settings = self._context.settings
            retry = RetryPolicy(
                max_attempts=settings.model_max_attempts,
                base_delay_s=settings.model_retry_base_s,
            )
            quotas = (
                ModelQuotas.from_settings(self._context.pool, settings)
                if settings.model_quota_enabled
                else None
            )
            try:
                self._client = GenaiModelClient.from_settings(settings, retry=retry, quotas=quotas)
            except ValueError as exc:  # ConfigError: no model configured
                raise FailedPrecondition(f"no model available: {exc}") from exc
        return self._client

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
