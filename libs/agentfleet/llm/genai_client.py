"""The google-genai adapter of :class:`agentfleet.llm.client.ModelClient`.

Our retry policy is the only one: google-genai's HTTP retries and its automatic function
calling are switched off, so every attempt and every tool call is visible to the executor.

Calls, streamed or not, take the fast path (:mod:`agentfleet.llm.genai_fast`) when the
switch (``AGENTFLEET_GENAI_FAST_PATH``) is on and the self-check
(:mod:`agentfleet.llm.genai_selfcheck`) passed; otherwise the SDK's public
``client.aio.models.generate_content`` (``generate_content_stream``), with one warning per
process saying why.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Unpack

import aiohttp
import structlog
from google import genai
from google.auth.transport import mtls
from google.genai import types
from opentelemetry import trace

from agentfleet.config import ConfigError, Settings
from agentfleet.llm.client import (
    DeltaSink,
    ModelReply,
    ModelRequest,
    RetryPolicy,
    checked_request,
)
from agentfleet.llm.genai_fast import FastGenerate, RequestHead, request_config
from agentfleet.llm.genai_selfcheck import check_fast_path
from agentfleet.llm.genai_stream import stream_once
from agentfleet.llm.genai_translate import with_retries
from agentfleet.llm.genai_transport import new_session
from agentfleet.llm.limiter.quota import ModelQuotas

_log = structlog.get_logger(__name__)
_tracer = trace.get_tracer("agentfleet.llm")

PLACEHOLDER_API_KEY = "agentfleet-stub-key"
"""Sent to a base URL (the stub) when no key is configured; the stub accepts any key."""

_WARNED: set[str] = set()
"""Why the fast path is off, each said once per process."""


def build_genai_client(
    settings: Settings, *, aiohttp_client: aiohttp.ClientSession | None = None
) -> genai.Client:
    """A new google-genai client for the configured backend, with its own retries off, on
    ``aiohttp_client`` when given (else on the sessions google-genai makes).

    A base URL (the stub) wins over everything and uses the Gemini API protocol; then
    Vertex AI (project and location, or an API key in express mode); then an API key.
    """
    options = types.HttpOptions(
        base_url=settings.gemini_base_url,
        retry_options=types.HttpRetryOptions(attempts=1),
        aiohttp_client=aiohttp_client,
    )
    return genai.Client(**_backend_arguments(settings), http_options=options)


def _backend_arguments(settings: Settings) -> dict[str, Any]:
    """``genai.Client`` arguments choosing the backend; ConfigError when none is set."""
    if settings.gemini_base_url is not None:
        return {"vertexai": False, "api_key": settings.gemini_api_key or PLACEHOLDER_API_KEY}
    if settings.gemini_use_vertex:
        if settings.google_cloud_project is not None:
            return {
                "vertexai": True,
                "project": settings.google_cloud_project,
                "location": settings.google_cloud_location,
            }
        if settings.gemini_api_key is not None:
            return {"vertexai": True, "api_key": settings.gemini_api_key}
        raise ConfigError(
            "GOOGLE_CLOUD_PROJECT",
            "required with GOOGLE_GENAI_USE_VERTEXAI (or set GEMINI_API_KEY for express mode)",
        )
    if settings.gemini_api_key is not None:
        return {"vertexai": False, "api_key": settings.gemini_api_key}
    raise ConfigError(
        "GEMINI_API_KEY",
        "no model configured: set GEMINI_API_KEY, GOOGLE_GENAI_USE_VERTEXAI, "
        "or AGENTFLEET_GEMINI_BASE_URL (the stub server)",
    )


@dataclass(slots=True)
class _Channel:
    """A google-genai client, the fast path on it (None: calls take the SDK's path), and
    the aiohttp session under it when we made it (then ours to close)."""

    client: genai.Client
    fast: FastGenerate | None
    session: aiohttp.ClientSession | None = None


class GenaiModelClient:
    """Gemini through google-genai, with bounded retries and typed errors.

    Given a ``genai.Client``, calls go through it (its sessions are its own). Made
    :meth:`from_settings`, it builds one client per event loop on an aiohttp session of
    ours (:func:`agentfleet.llm.genai_transport.new_session`), closed by :meth:`aclose`.
    ``fast_path=False`` (``AGENTFLEET_GENAI_FAST_PATH=off``) sends every call through the
    SDK's public call; with it on, the self-check runs here, once per client.
    """

    def __init__(
        self,
        client: genai.Client | None = None,
        *,
        retry: RetryPolicy | None = None,
        fast_path: bool = True,
        settings: Settings | None = None,
        quotas: ModelQuotas | None = None,
    ) -> None:
        if (client is None) == (settings is None):
            raise ValueError("give either a google-genai client or settings")
        self._settings = settings
        self._retry = retry or RetryPolicy()
        self.quotas = quotas
        """The shared limiter every call goes through (None: calls go straight out)."""
        self.calls_by_path: Counter[str] = Counter()
        """Model calls per path taken: ``fast`` or ``sdk`` (``fast_stream`` or ``sdk_stream``
        when streamed)."""
        vertex = bool(client.vertexai) if client is not None else _uses_vertex(settings)
        self.fast_path_off_reason = _fast_path_verdict(fast_path, vertex=vertex)
        """Why calls take the SDK's public path (None: the fast path serves them)."""
        self._channels: dict[asyncio.AbstractEventLoop | None, _Channel] = {}
        if client is not None:
            self._channels[None] = self._channel(client)

    @classmethod
    def from_settings(
        cls,
        settings: Settings,
        *,
        retry: RetryPolicy | None = None,
        quotas: ModelQuotas | None = None,
    ) -> GenaiModelClient:
        """A client for ``settings`` (backend, fast-path switch) on sessions of its own;
        raises ConfigError at once when no model is configured."""
        _backend_arguments(settings)
        return cls(
            retry=retry, fast_path=settings.genai_fast_path, settings=settings, quotas=quotas
        )

    async def aclose(self) -> None:
        """Closes the HTTP sessions of the underlying clients (at process shutdown)."""
        if self.quotas is not None:
            await self.quotas.aclose()
        channels, self._channels = list(self._channels.items()), {}
        running = asyncio.get_running_loop()
        for loop, channel in channels:
            if loop is None or loop is running:
                # The client's own HTTP clients (google-genai leaves a given session alone).
                await channel.client.aio.aclose()
                if channel.session is not None:
                    await channel.session.close()
            elif channel.session is not None and loop.is_running():
                asyncio.run_coroutine_threadsafe(channel.session.close(), loop)
            # A session of a closed loop cannot be closed any more; dropping it frees it.

    def _channel(
        self, client: genai.Client, session: aiohttp.ClientSession | None = None
    ) -> _Channel:
        fast = FastGenerate(client) if self.fast_path_off_reason is None else None
        return _Channel(client=client, fast=fast, session=session)

    def _current_channel(self) -> _Channel:
        """The channel of a given client, or ours for the running loop (made on first use)."""
        channel = self._channels.get(None)
        if channel is not None:
            return channel
        loop = asyncio.get_running_loop()
        channel = self._channels.get(loop)
        if channel is None:
            assert self._settings is not None
            for closed in [other for other in self._channels if other and other.is_closed()]:
                del self._channels[closed]
            session = None if _sdk_makes_mtls_session(self._settings) else new_session()
            client = build_genai_client(self._settings, aiohttp_client=session)
            channel = self._channels[loop] = self._channel(client, session)
        return channel

    async def generate(self, **request: Unpack[ModelRequest]) -> ModelReply:
        """One model call, retried on 429/5xx and dropped connections per the policy; the
        waits after a 429 are told to ``on_wait`` when given."""
        call = self._request(request, "")
        attempt, on_throttled = self._limited(request, call.model, call.generate)
        retried = with_retries(
            attempt,
            self._retry,
            model=call.model,
            on_wait=request.get("on_wait"),
            on_throttled=on_throttled,
        )
        return await _traced(call.model, retried)

    async def generate_stream(
        self, *, on_delta: DeltaSink, **request: Unpack[ModelRequest]
    ) -> ModelReply:
        """:meth:`generate` streamed: text pieces go to ``on_delta`` as they arrive; the
        whole reply is returned at the end (:mod:`agentfleet.llm.genai_stream`)."""
        call = self._request(request, "_stream")

        async def attempt() -> types.GenerateContentResponse:
            return await stream_once(call.chunks, on_delta)

        limited, on_throttled = self._limited(request, call.model, attempt)
        retried = with_retries(
            limited,
            self._retry,
            model=call.model,
            call="streamed model call",
            on_wait=request.get("on_wait"),
            on_throttled=on_throttled,
        )
        return await _traced(call.model, retried)

    def _limited(
        self,
        request: ModelRequest,
        model: str,
        attempt: Callable[[], Awaitable[types.GenerateContentResponse]],
    ) -> tuple[
        Callable[[], Awaitable[types.GenerateContentResponse]],
        Callable[[float | None, str | None], Awaitable[None]] | None,
    ]:
        """``attempt`` behind the shared limiter (each attempt takes a slot), and what a 429
        tells it; ``attempt`` as it is without a limiter."""
        quotas = self.quotas
        if quotas is None:
            return attempt, None
        scope, on_wait = request.get("quota_scope"), request.get("on_wait")
        start = asyncio.get_running_loop().time()
        deadline = start + quotas.config.max_wait_s
        bound = request.get("quota_fallback_wait_s")
        # A call with a fallback model waits for this one's quota at most its bound (and
        # never when the expected wait passes it): then QuotaWaitTooLong sends it on.
        fallback_at = None
        if bound is not None:
            bound = bound if bound >= 0 else 0.0  # NaN compares false: taken as 0 too
            fallback_at = start + min(bound, quotas.config.max_wait_s)

        async def limited() -> types.GenerateContentResponse:
            return await quotas.guarded(
                model, scope, on_wait, deadline, attempt, _tokens_of, fallback_at
            )

        async def on_throttled(retry_after_s: float | None, limit: str | None) -> None:
            await quotas.throttled(model, retry_after_s, limit)

        return limited, on_throttled

    def _request(self, arguments: ModelRequest, kind: str) -> _Request:
        """The call as it will be sent, by the fast path when it can (counted per path,
        ``kind`` appended)."""
        request = checked_request(arguments)
        model, contents = request["model"], request["contents"]
        system, tools, config = (
            request["system_instruction"],
            request.get("tools", ()),
            request.get("config"),
        )
        channel = self._current_channel()
        fast = channel.fast
        if fast is None:
            sent = _Request(
                channel.client, None, model, contents, request_config(system, tools, config)
            )
        else:
            head = fast.head_for(model=model, system_instruction=system, tools=tools, config=config)
            on_fast = (fast, head) if fast.supports(head, contents) else None
            sent = _Request(channel.client, on_fast, model, contents, head.config)
        self.calls_by_path[("sdk" if sent.fast is None else "fast") + kind] += 1
        return sent


@dataclass(frozen=True, slots=True)
class _Request:
    """One model call as it will be sent: by the fast path (``fast`` set) or by the SDK's
    public call with ``config``."""

    client: genai.Client
    fast: tuple[FastGenerate, RequestHead] | None
    model: str
    contents: Sequence[types.Content]
    config: types.GenerateContentConfig

    async def generate(self) -> types.GenerateContentResponse:
        if self.fast is not None:
            fast, head = self.fast
            return await fast.generate(head, self.contents)
        return await self.client.aio.models.generate_content(
            model=self.model, contents=list(self.contents), config=self.config
        )

    async def chunks(self) -> AsyncIterator[types.GenerateContentResponse]:
        if self.fast is not None:
            fast, head = self.fast
            return fast.stream(head, self.contents)
        return await self.client.aio.models.generate_content_stream(
            model=self.model, contents=list(self.contents), config=self.config
        )


def _tokens_of(response: types.GenerateContentResponse) -> int:
    usage = response.usage_metadata
    if usage is None:
        return 0
    return usage.total_token_count or (
        (usage.prompt_token_count or 0) + (usage.candidates_token_count or 0)
    )


async def _traced(model: str, call: Awaitable[ModelReply]) -> ModelReply:
    """``call`` in a GenAI client span (OpenTelemetry semantic conventions)."""
    with _tracer.start_as_current_span(f"chat {model}") as span:
        span.set_attribute("gen_ai.operation.name", "chat")
        span.set_attribute("gen_ai.provider.name", "gcp.gemini")
        span.set_attribute("gen_ai.request.model", model)
        reply = await call
        span.set_attribute("gen_ai.usage.input_tokens", reply.usage.prompt_tokens)
        span.set_attribute("gen_ai.usage.output_tokens", reply.usage.output_tokens)
        if reply.finish_reason is not None:
            span.set_attribute("gen_ai.response.finish_reasons", [reply.finish_reason])
        span.set_attribute("agentfleet.model.attempts", reply.attempts)
        return reply


def _uses_vertex(settings: Settings | None) -> bool:
    return settings is not None and settings.gemini_base_url is None and settings.gemini_use_vertex


def _sdk_makes_mtls_session(settings: Settings) -> bool:
    """True when google-genai would open Vertex AI with a client certificate (mutual TLS)
    on a session of its own, which a session of ours would replace: we leave it that one."""
    if not _uses_vertex(settings):
        return False
    should_use = getattr(mtls, "should_use_client_cert", None)
    return bool(should_use and should_use() and mtls.has_default_client_cert_source())


def _fast_path_verdict(enabled: bool, *, vertex: bool) -> str | None:
    """Why calls must take the SDK's path (None: the fast path may serve them); the reason
    is logged once per process."""
    if not enabled:
        reason = "switched off (AGENTFLEET_GENAI_FAST_PATH=off)"
    else:
        reason = check_fast_path(vertex=vertex)
    if reason is not None and reason not in _WARNED:
        _WARNED.add(reason)
        _log.warning("google-genai fast path off: model calls take the SDK's path", why=reason)
    return reason
