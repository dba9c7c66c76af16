"""The google-genai adapter of :class:`agentfleet.llm.client.ModelClient`.

Our retry policy is the only one: google-genai's HTTP retries and its automatic function
calling are switched off, so every attempt and every tool call is visible to the executor.
"""

from __future__ import annotations

import asyncio
import json
import random
import re
from collections.abc import Sequence
from typing import Any

import aiohttp
import pydantic
import structlog
from google import genai
from google.genai import errors as genai_errors
from google.genai import types
from opentelemetry import trace

from agentfleet.config import ConfigError, Settings
from agentfleet.llm.client import ModelReply, RetryPolicy, TokenUsage
from agentfleet.llm.errors import (
    MalformedModelReply,
    ModelError,
    ModelRequestError,
    TransientModelError,
)
from agentfleet.llm.genai_fast import FastGenerate, RequestHead

_log = structlog.get_logger(__name__)
_tracer = trace.get_tracer("agentfleet.llm")

PLACEHOLDER_API_KEY = "agentfleet-stub-key"
"""Sent to a base URL (the stub) when no key is configured; the stub accepts any key."""

# One google-genai client per connection setting in this process: it keeps the HTTP
# session pool, so building one per call would reconnect every step.
_SHARED_CLIENTS: dict[tuple[object, ...], genai.Client] = {}


def build_genai_client(settings: Settings) -> genai.Client:
    """A new google-genai client for the configured backend, with its own retries off.

    A base URL (the stub) wins over everything and uses the Gemini API protocol; then
    Vertex AI (project and location, or an API key in express mode); then an API key.
    """
    no_retry = types.HttpRetryOptions(attempts=1)
    if settings.gemini_base_url is not None:
        return genai.Client(
            vertexai=False,
            api_key=settings.gemini_api_key or PLACEHOLDER_API_KEY,
            http_options=types.HttpOptions(
                base_url=settings.gemini_base_url, retry_options=no_retry
            ),
        )
    http_options = types.HttpOptions(retry_options=no_retry)
    if settings.gemini_use_vertex:
        if settings.google_cloud_project is not None:
            return genai.Client(
                vertexai=True,
                project=settings.google_cloud_project,
                location=settings.google_cloud_location,
                http_options=http_options,
            )
        if settings.gemini_api_key is not None:
            return genai.Client(
                vertexai=True, api_key=settings.gemini_api_key, http_options=http_options
            )
        raise ConfigError(
            "GOOGLE_CLOUD_PROJECT",
            "required with GOOGLE_GENAI_USE_VERTEXAI (or set GEMINI_API_KEY for express mode)",
        )
    if settings.gemini_api_key is not None:
        return genai.Client(
            vertexai=False, api_key=settings.gemini_api_key, http_options=http_options
        )
    raise ConfigError(
        "GEMINI_API_KEY",
        "no model configured: set GEMINI_API_KEY, GOOGLE_GENAI_USE_VERTEXAI, "
        "or AGENTFLEET_GEMINI_BASE_URL (the stub server)",
    )


def shared_genai_client(settings: Settings) -> genai.Client:
    """The process-wide google-genai client for these settings, built on first use."""
    key = (
        settings.gemini_base_url,
        settings.gemini_api_key,
        settings.gemini_use_vertex,
        settings.google_cloud_project,
        settings.google_cloud_location,
    )
    client = _SHARED_CLIENTS.get(key)
    if client is None:
        client = _SHARED_CLIENTS[key] = build_genai_client(settings)
    return client


class GenaiModelClient:
    """Gemini through google-genai, with bounded retries and typed errors."""

    def __init__(self, client: genai.Client, *, retry: RetryPolicy | None = None) -> None:
        self._client = client
        self._retry = retry or RetryPolicy()
        self._fast = FastGenerate(client)

    @classmethod
    def from_settings(
        cls, settings: Settings, *, retry: RetryPolicy | None = None
    ) -> GenaiModelClient:
        """A client on the process-wide google-genai client for ``settings``."""
        return cls(shared_genai_client(settings), retry=retry)

    async def aclose(self) -> None:
        """Closes the HTTP sessions of the underlying client (at process shutdown)."""
        for key, client in list(_SHARED_CLIENTS.items()):
            if client is self._client:
                del _SHARED_CLIENTS[key]
        await self._client.aio.aclose()

    async def generate(
        self,
        *,
        model: str,
        system_instruction: str | None,
        contents: Sequence[types.Content],
        tools: Sequence[types.Tool] = (),
        config: types.GenerateContentConfig | None = None,
    ) -> ModelReply:
        """One model call, retried on 429/5xx and dropped connections per the policy."""
        head = self._fast.head_for(
            model=model, system_instruction=system_instruction, tools=tools, config=config
        )
        with _tracer.start_as_current_span(f"chat {model}") as span:
            span.set_attribute("gen_ai.operation.name", "chat")
            span.set_attribute("gen_ai.provider.name", "gcp.gemini")
            span.set_attribute("gen_ai.request.model", model)
            reply = await self._generate_with_retries(model, contents, head)
            span.set_attribute("gen_ai.usage.input_tokens", reply.usage.prompt_tokens)
            span.set_attribute("gen_ai.usage.output_tokens", reply.usage.output_tokens)
            if reply.finish_reason is not None:
                span.set_attribute("gen_ai.response.finish_reasons", [reply.finish_reason])
            span.set_attribute("agentfleet.model.attempts", reply.attempts)
            return reply

    async def _generate_with_retries(
        self, model: str, contents: Sequence[types.Content], head: RequestHead
    ) -> ModelReply:
        fast = self._fast.supports(head, contents)
        attempt = 0
        while True:
            attempt += 1
            try:
                if fast:
                    response = await self._fast.generate(head, contents)
                else:
                    response = await self._client.aio.models.generate_content(
                        model=model, contents=list(contents), config=head.config
                    )
                return reply_from_response(response, attempts=attempt)
            except MalformedModelReply:
                raise
            except Exception as exc:
                error = translate_error(exc, self._retry, attempts=attempt)
                if error is None:
                    raise
                if not isinstance(error, TransientModelError) or (
                    attempt >= self._retry.max_attempts
                ):
                    raise error from exc
                delay = backoff_delay(self._retry, attempt, retry_hint_s(exc))
                _log.warning(
                    "model call failed, retrying",
                    model=model,
                    status=error.status_code,
                    error=error.message,
                    attempt=attempt,
                    delay_s=round(delay, 3),
                )
                await asyncio.sleep(delay)


def translate_error(exc: Exception, policy: RetryPolicy, *, attempts: int) -> ModelError | None:
    """The :class:`ModelError` for a google-genai or transport error; None if foreign."""
    if isinstance(exc, genai_errors.APIError):
        code = int(exc.code) if exc.code else None
        message = exc.message or str(exc)
        if code is not None and code in policy.retry_statuses:
            return TransientModelError(message, status_code=code, attempts=attempts)
        if code is not None and 400 <= code < 500:
            return ModelRequestError(message, status_code=code, attempts=attempts)
        return ModelError(message, status_code=code, attempts=attempts)
    if isinstance(
        exc, json.JSONDecodeError | genai_errors.UnknownApiResponseError | pydantic.ValidationError
    ):
        return MalformedModelReply(
            f"model reply is not valid JSON: {_shorten(str(exc))}",
            status_code=200,
            attempts=attempts,
        )
    # No CancelledError here: it is a BaseException and must always propagate.
    if isinstance(exc, aiohttp.ClientError | TimeoutError | ConnectionError):
        return TransientModelError(
            f"connection to the model failed: {exc!r}", status_code=None, attempts=attempts
        )
    return None


def backoff_delay(policy: RetryPolicy, attempt: int, hint_s: float | None = None) -> float:
    """Seconds to wait after failed ``attempt`` (1-based): exponential with jitter in
    [half, full], raised to the server's retry hint, never over ``max_delay_s``."""
    ceiling = min(policy.max_delay_s, policy.base_delay_s * 2 ** (attempt - 1))
    delay = random.uniform(ceiling / 2, ceiling)
    if hint_s is not None:
        delay = max(delay, hint_s)
    return min(delay, policy.max_delay_s)


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)s\s*$")


def retry_hint_s(exc: BaseException) -> float | None:
    """The ``google.rpc.RetryInfo.retryDelay`` of an API error, in seconds, if it has one."""
    body: Any = getattr(exc, "details", None)
    error = body.get("error") if isinstance(body, dict) else None
    details = error.get("details") if isinstance(error, dict) else None
    for item in details if isinstance(details, list) else []:
        if isinstance(item, dict) and str(item.get("@type", "")).endswith("RetryInfo"):
            match = _DURATION.match(str(item.get("retryDelay", "")))
            if match:
                return float(match.group(1))
    return None


def reply_from_response(response: types.GenerateContentResponse, *, attempts: int) -> ModelReply:
    """The :class:`ModelReply` of a response; no candidate is a :class:`MalformedModelReply`."""
    if not response.candidates:
        feedback = response.prompt_feedback
        reason = feedback.block_reason if feedback is not None else None
        why = f" (prompt blocked: {_enum_text(reason)})" if reason is not None else ""
        raise MalformedModelReply(
            f"model reply has no candidates{why}", status_code=200, attempts=attempts
        )
    candidate = response.candidates[0]
    content = candidate.content or types.Content(role="model", parts=[])
    if content.role is None:
        content = content.model_copy(update={"role": "model"})
    parts = content.parts or []
    usage = response.usage_metadata
    return ModelReply(
        content=content,
        text="".join(p.text for p in parts if p.text and not p.thought),
        function_calls=tuple(p.function_call for p in parts if p.function_call is not None),
        finish_reason=_enum_text(candidate.finish_reason),
        usage=TokenUsage(
            prompt_tokens=(usage.prompt_token_count or 0) if usage else 0,
            output_tokens=((usage.candidates_token_count or 0) + (usage.thoughts_token_count or 0))
            if usage
            else 0,
            total_tokens=(usage.total_token_count or 0) if usage else 0,
        ),
        model_version=response.model_version,
        response_id=response.response_id,
        attempts=attempts,
    )


def _enum_text(value: object) -> str | None:
    if value is None:
        return None
    return str(getattr(value, "value", value))


def _shorten(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else text[:limit] + "..."
