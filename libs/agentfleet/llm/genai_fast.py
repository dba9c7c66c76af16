"""A cheaper ``generate_content`` through google-genai's own pieces.

``client.aio.models.generate_content`` re-validates and re-converts the whole conversation
on every call (``_GenerateContentParameters`` pydantic validation, then ``_Content_to_mldev``
walking every part through ``getv``): about 1 ms of CPU per content, so a run's model calls
cost O(n²) in its length. A conversation only grows, and a sent content never changes, so
:class:`FastGenerate` converts each content once, with google-genai's own converter, and the
request's constant head (model path, system instruction, tools, generation config) once per
turn, then posts through google-genai's API client (same auth, base URL, headers, error
types) and parses the answer exactly as ``AsyncModels._generate_content`` does.

Relies on google-genai internals of the pinned version (``models._Content_to_mldev`` and
friends); ``tests/unit/test_genai_fast.py`` compares the bodies with the SDK's own, so a
version bump that changes them fails there rather than in production. Anything unusual (no
contents, a content that is not a ``types.Content``, MCP tools) takes the SDK's public path.
"""

from __future__ import annotations

import json
import weakref
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from google import genai
from google.genai import _common, _extra_utils, models, types

_HEAD_CACHE_SIZE = 256


@dataclass(frozen=True, slots=True)
class RequestHead:
    """A request minus its contents: what every call of one turn sends besides them."""

    path: str
    body: dict[str, Any]
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
        self._contents: dict[int, tuple[weakref.ref[types.Content], dict[str, Any]]] = {}
        self._heads: OrderedDict[tuple[object, ...], RequestHead] = OrderedDict()

    def head_for(
        self,
        *,
        model: str,
        system_instruction: str | None,
        tools: Sequence[types.Tool],
        config: types.GenerateContentConfig | None,
    ) -> RequestHead:
        """The request head of a turn; built once per distinct (model, system, tools, config)
        objects, so a run's steps share one."""
        key = (model, system_instruction, id(config), *map(id, tools))
        head = self._heads.get(key)
        if head is not None:
            self._heads.move_to_end(key)
            return head
        request_config = (config or types.GenerateContentConfig()).model_copy(
            update={
                "system_instruction": system_instruction,
                "tools": list(tools) or None,
                "automatic_function_calling": types.AutomaticFunctionCallingConfig(disable=True),
            },
            deep=True,
        )
        head = self._build_head(model, request_config, keep=(config, *tools))
        self._heads[key] = head
        if len(self._heads) > _HEAD_CACHE_SIZE:
            self._heads.popitem(last=False)
        return head

    def supports(self, head: RequestHead, contents: Sequence[object]) -> bool:
        """True when the cheap path sends exactly what the SDK would."""
        if not contents or not all(isinstance(c, types.Content) for c in contents):
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
        body = dict(head.body)
        body["contents"] = [self._content(c) for c in contents]
        response = await self._api.async_request("post", head.path, body, head.http_options)
        response_dict = {} if not response.body else json.loads(response.body)
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
        result = types.GenerateContentResponse._from_response(
            response=response_dict,
            kwargs={
                "config": {
                    "response_schema": config.response_schema,
                    "response_json_schema": config.response_json_schema,
                    "include_all_fields": getattr(config, "include_all_fields", None),
                }
            },
        )
        result.sdk_http_response = types.HttpResponse(headers=response.headers)
        self._api._verify_response(result)
        return result

    def _content(self, content: types.Content) -> dict[str, Any]:
        """The wire JSON of one content, converted once while the content lives."""
        key = id(content)
        cached = self._contents.get(key)
        if cached is not None and cached[0]() is content:
            return cached[1]
        convert = models._Content_to_vertex if self._vertex else models._Content_to_mldev
        # The converter reads a model through getv, which scans every field per lookup;
        # on the model's own dump (what convert_to_dict makes of it anyway) each lookup is
        # a dict hit, and the result is the same.
        wire = _common.encode_unserializable_types(
            _common.convert_to_dict(convert(content.model_dump(exclude_none=True), None, None))
        )
        contents = self._contents

        def forget(_: object, key: int = key) -> None:
            contents.pop(key, None)

        self._contents[key] = (weakref.ref(content, forget), wire)
        return wire

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
        path = "{model}:generateContent".format_map(url) if url else "{model}:generateContent"
        query = request.get("_query")
        if query:
            path = f"{path}?{urlencode(query)}"
        request.pop("config", None)
        body = _common.encode_unserializable_types(_common.convert_to_dict(request))
        return RequestHead(
            path=path,
            body=body,
            http_options=config.http_options,
            parameters=parameters,
            config=config,
            keep=keep,
        )
