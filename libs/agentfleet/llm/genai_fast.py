"""A cheaper ``generate_content`` through google-genai's own pieces.

``client.aio.models.generate_content`` re-validates and re-converts the whole conversation
on every call (``_GenerateContentParameters`` pydantic validation, then ``_Content_to_mldev``
walking every part through ``getv``): about 1 ms of CPU per content, so a run's model calls
cost O(n²) in its length. A conversation only grows, and a sent content never changes, so
:class:`FastGenerate` converts each content once, with google-genai's own converter (and
only the contents a conversation gained since its previous call:
:mod:`agentfleet.llm.genai_wires`), and the request's constant head (model path, system
instruction, tools, generation config) once per turn, then posts through google-genai's API
client (same auth, base URL, headers, error types) and parses the answer exactly as
``AsyncModels._generate_content`` does (its pruning of unknown fields planned once:
:mod:`agentfleet.llm.genai_response`). The body's JSON text is assembled from each
content's JSON, also encoded once, and the transport's per-call waste is cut as
:mod:`agentfleet.llm.genai_transport` describes.

Relies on google-genai internals of the pinned version (``models._Content_to_mldev`` and
friends, all listed in :data:`agentfleet.llm.genai_selfcheck.PRIVATE_NAMES`): a model client
uses this path only after :func:`agentfleet.llm.genai_selfcheck.check_fast_path` found every
name and a sample body equal to the SDK's own, and while ``AGENTFLEET_GENAI_FAST_PATH`` is on.
Anything unusual (no contents, a content that is not a ``types.Content``, MCP tools) takes
the SDK's public path.

A streamed call (``streamGenerateContent``, SSE: :meth:`FastGenerate.stream`) sends the same
body to the head's streaming path and parses each chunk as ``AsyncModels
._generate_content_stream`` does, with the SDK's own continuation state
(``_extra_utils.StreamContinuation``) deciding hops exactly as
``_generate_content_stream_with_continuation`` does.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import urlencode

import pydantic_core
from google import genai
from google.genai import _common, _extra_utils, models, types

from agentfleet.llm.genai_response import prune_extra_fields
from agentfleet.llm.genai_transport import Post, body_prefix, encode_body
from agentfleet.llm.genai_wires import Wires

_HEAD_CACHE_SIZE = 256

_K = TypeVar("_K")
_V = TypeVar("_V")


@dataclass(frozen=True, slots=True)
class RequestHead:
    """A request minus its contents: what every call of one turn sends besides them."""

    path: str
    stream_path: str
    """The ``streamGenerateContent`` (SSE) path of the same request."""
    body: dict[str, Any]
    prefix: bytes | None
    """The body's JSON text up to the contents (:func:`body_prefix`); None when an
    ``extra_body`` option makes google-genai rewrite the body, so it encodes it itself."""
    http_options: types.HttpOptions | None
    parameters: types._GenerateContentParameters
    config: types.GenerateContentConfig
    keep: tuple[object, ...]
    """The objects whose ids make the cache key: held so the ids stay theirs."""


class FastGenerate:
    """``generate_content`` for one google-genai client, with per-content conversion cached."""

    def __init__(self, client: genai.Client) -> None:
        self._client = client
        self._api = client.aio.models._api_client
        self._vertex = bool(self._api.vertexai)
        self.wires = Wires(vertex=self._vertex)
        """Each content converted once, each conversation's converted contents kept."""
        # By the ids of the objects a turn passes (a hit per step), each entry holding its
        # objects so the ids stay theirs; then by value, so a run whose turn was built from
        # an equal definition reuses a head instead of building one (~0.4 ms).
        self._heads: OrderedDict[tuple[object, ...], tuple[RequestHead, tuple[object, ...]]] = (
            OrderedDict()
        )
        self._heads_by_value: OrderedDict[tuple[object, ...], RequestHead] = OrderedDict()

    def head_for(
        self,
        *,
        model: str,
        system_instruction: str | None,
        tools: Sequence[types.Tool],
        config: types.GenerateContentConfig | None,
    ) -> RequestHead:
        """The request head of a turn; built once per distinct (model, system, tools, config),
        so a run's steps share one, and so do runs of equal definitions."""
        key = (model, system_instruction, id(config), *map(id, tools))
        entry = self._heads.get(key)
        if entry is not None:
            self._heads.move_to_end(key)
            return entry[0]
        value = _value_key(model, system_instruction, tools, config)
        head = self._heads_by_value.get(value) if value is not None else None
        if head is None:
            built = request_config(system_instruction, tools, config)
            head = self._build_head(model, built, keep=(config, *tools))
            if value is not None:
                _remember(self._heads_by_value, value, head)
        else:
            self._heads_by_value.move_to_end(value)
        _remember(self._heads, key, (head, (config, *tools)))
        return head

    def supports(self, head: RequestHead, contents: Sequence[object]) -> bool:
        """True when the cheap path sends exactly what the SDK would."""
        # The distinct types (map and set run in C): a long conversation has one or two.
        if not contents or not all(issubclass(t, types.Content) for t in set(map(type, contents))):
            return False
        # MCP tools make the SDK open sessions and rewrite the tools: leave them to it.
        return not any(
            not isinstance(tool, types.Tool) or tool.mcp_servers for tool in head.config.tools or []
        )

    async def generate(
        self, head: RequestHead, contents: Sequence[types.Content]
    ) -> types.GenerateContentResponse:
        """One ``generateContent`` call (plus continuation hops, as the SDK does them)."""
        response = await self._post(head, contents)
        config = head.config
        if not _extra_utils.should_enable_automatic_continuation(config, default_enabled=True):
            return response
        token = _extra_utils.should_continue_generation(response)
        if token is None:
            return response
        # Rare: the model paused mid-answer. Follow the SDK's own continuation loop.
        responses = [response]
        while token is not None:
            hop = _extra_utils.prepare_continuation_config(config, token)
            response = await self._client.aio.models._generate_content(
                model=head.parameters.model or "", contents=list(contents), config=hop
            )
            responses.append(response)
            token = _extra_utils.should_continue_generation(response)
        return _extra_utils.merge_continuation_responses(responses, config=config)

    async def _post(
        self, head: RequestHead, contents: Sequence[types.Content]
    ) -> types.GenerateContentResponse:
        body, encoded = self.request_body(head, contents)
        response = await Post(self._api, head.path, body, encoded, head.http_options).answer()
        return self.parse(head, response)

    async def stream(
        self, head: RequestHead, contents: Sequence[types.Content]
    ) -> AsyncIterator[types.GenerateContentResponse]:
        """The chunks of one streamed call, as ``generate_content_stream`` yields them."""
        state = _extra_utils.StreamContinuation(head.config)
        while True:
            config = state.start_hop()
            error: Exception | None = None
            try:
                if config is head.config:  # no continuation token: the request as built
                    chunks = self._stream_once(head, contents)
                else:  # rare: the model paused mid-answer; the SDK sends the next hop
                    chunks = await self._client.aio.models._generate_content_stream(
                        model=head.parameters.model or "", contents=list(contents), config=config
                    )
                async for chunk in chunks:
                    yield state.observe(chunk)
            except Exception as exc:  # as the SDK's loop: the state decides what it means
                error = exc
            if not state.end_hop(error):
                return

    async def _stream_once(
        self, head: RequestHead, contents: Sequence[types.Content]
    ) -> AsyncIterator[types.GenerateContentResponse]:
        body, encoded = self.request_body(head, contents)
        post = Post(self._api, head.stream_path, body, encoded, head.http_options)
        async for chunk, headers in post.chunks():
            yield self.response(head, chunk, headers)

    def request_body(
        self, head: RequestHead, contents: Sequence[types.Content]
    ) -> tuple[dict[str, Any], bytes | None]:
        """The request dict of a call, and its JSON text when this path may send that
        (None: google-genai encodes the dict itself)."""
        values, texts = self.wires.of(contents)
        body = dict(head.body)
        body["contents"] = values
        if head.prefix is None:
            return body, None
        return body, encode_body(head.prefix, texts)

    def parse(
        self, head: RequestHead, response: types.HttpResponse
    ) -> types.GenerateContentResponse:
        """The response object of an answer, exactly as ``AsyncModels._generate_content``
        makes it."""
        response_dict = {} if not response.body else json.loads(response.body)
        return self.response(head, response_dict, response.headers)

    def response(
        self, head: RequestHead, response_dict: dict[str, Any], headers: dict[str, str]
    ) -> types.GenerateContentResponse:
        """The response object of a decoded answer (or streamed chunk), as the SDK makes it."""
        parameters = head.parameters
        if self._vertex:
            response_dict = models._GenerateContentResponse_from_vertex(
                response_dict, None, parameters
            )
        else:
            response_dict = models._GenerateContentResponse_from_mldev(
                response_dict, None, parameters
            )
        config = head.config
        if not getattr(config, "include_all_fields", None):
            prune_extra_fields(types.GenerateContentResponse, response_dict)
        result = types.GenerateContentResponse._from_response(
            response=response_dict,
            kwargs={
                "config": {
                    "response_schema": config.response_schema,
                    "response_json_schema": config.response_json_schema,
                    # Pruned above, as the SDK would; this skips its slower pruning only.
                    "include_all_fields": True,
                }
            },
        )
        result.sdk_http_response = types.HttpResponse(headers=headers)
        self._api._verify_response(result)
        return result

    def _build_head(
        self, model: str, config: types.GenerateContentConfig, *, keep: tuple[object, ...]
    ) -> RequestHead:
        # Exactly what AsyncModels._generate_content does, without the contents.
        parameters = types._GenerateContentParameters(model=model, config=config)
        if self._vertex:
            request = models._GenerateContentParameters_to_vertex(
                self._api, parameters, None, parameters
            )
        else:
            request = models._GenerateContentParameters_to_mldev(
                self._api, parameters, None, parameters
            )
        url = request.get("_url")
        query = request.get("_query")
        path, stream_path = (
            _path(method, url, query)
            for method in ("generateContent", "streamGenerateContent?alt=sse")
        )
        request.pop("config", None)
        body = _common.encode_unserializable_types(_common.convert_to_dict(request))
        rewrites = self._api._http_options.extra_body or (
            config.http_options is not None and config.http_options.extra_body
        )
        return RequestHead(
            path=path,
            stream_path=stream_path,
            body=body,
            prefix=None if rewrites else body_prefix(body),
            http_options=config.http_options,
            parameters=parameters,
            config=config,
            keep=keep,
        )


def request_config(
    system_instruction: str | None,
    tools: Sequence[types.Tool],
    config: types.GenerateContentConfig | None,
) -> types.GenerateContentConfig:
    """The config a call sends: ``config`` with the turn's system instruction and tools, and
    google-genai's automatic function calling off (the executor runs every tool call)."""
    return (config or types.GenerateContentConfig()).model_copy(
        update={
            "system_instruction": system_instruction,
            "tools": list(tools) or None,
            "automatic_function_calling": types.AutomaticFunctionCallingConfig(disable=True),
        },
        deep=True,
    )


def _path(method: str, url: dict[str, str] | None, query: dict[str, str] | None) -> str:
    """A request's path as the SDK spells it (a query after a streaming path's own ``?alt=sse``
    is joined with a second ``?``, as there)."""
    path = ("{model}:" + method).format_map(url) if url else "{model}:" + method
    return f"{path}?{urlencode(query)}" if query else path


def _remember(cache: OrderedDict[_K, _V], key: _K, value: _V) -> None:
    cache[key] = value
    if len(cache) > _HEAD_CACHE_SIZE:
        cache.popitem(last=False)


def _value_key(
    model: str,
    system_instruction: str | None,
    tools: Sequence[object],
    config: types.GenerateContentConfig | None,
) -> tuple[object, ...] | None:
    """What a turn sends besides its contents, as JSON text; None when that text might not
    tell two turns apart: a response schema may be a Python class, HTTP options may hold
    clients, a tool may not be a ``types.Tool``."""
    if not all(isinstance(tool, types.Tool) for tool in tools):
        return None
    if config is not None and (config.response_schema is not None or config.http_options):
        return None
    try:
        dumped = [item.model_dump_json() for item in (config, *tools) if item is not None]
    except (pydantic_core.PydanticSerializationError, TypeError, ValueError):
        return None
    return (model, system_instruction, config is None, *dumped)
