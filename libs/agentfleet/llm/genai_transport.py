"""How the fast path's requests travel, without changing any google-genai object.

Two per-call costs of google-genai's transport are avoided, each measured by
``bench/genai_calls.py``:

- its HTTP retry wrapper (a ``tenacity.AsyncRetrying`` call even for a single attempt) and
  its ``json.dumps`` of the whole conversation on every call (O(run length)): when the client
  makes a single attempt (as :func:`agentfleet.llm.genai_client.build_genai_client` sets it
  up: our :class:`~agentfleet.llm.client.RetryPolicy` is the only retry), :meth:`Post.answer` builds
  the request with the client's own ``_build_request`` and sends it once with its own
  ``_async_request_once``, the body as bytes assembled from contents encoded once (the same
  bytes ``json.dumps`` makes). That is what the wrapper does with ``stop_after_attempt(1)``
  and ``reraise=True``. A retrying client keeps its wrapper (:meth:`Post.answer` calls
  ``async_request``). :meth:`Post.chunks` does the same for a streamed call
  (``async_request_streamed``), and also skips its ``json.dumps`` then ``json.loads`` of
  every chunk it has already decoded;
- environment lookups: an aiohttp session that trusts the environment looks up ``.netrc``
  and the proxy variables in worker threads on every request (two thread hand-offs per
  call). :func:`new_session` makes the session we hand to google-genai through its public
  ``HttpOptions(aiohttp_client=...)``, trusting the environment only when it configures a
  proxy or a ``.netrc``.

The private names used here are in :data:`agentfleet.llm.genai_selfcheck.PRIVATE_NAMES`;
the self-check verifies them before the fast path is used.
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import aiohttp
from aiohttp import helpers as aiohttp_helpers
from google.genai import _api_client, errors, types

_PROXY_SCHEMES = ("http", "https", "ws", "wss")
"""The proxy variables aiohttp reads (``aiohttp.helpers.proxies_from_env``)."""

_READ_BUFFER_SIZE = 2**22
"""As google-genai's own sessions (``_api_client.READ_BUFFER_SIZE``): room for large replies."""


def body_prefix(fields: Mapping[str, Any]) -> bytes:
    """``json.dumps`` of ``fields`` plus a last key ``contents``, up to the list's ``[``.

    Keys starting with ``_`` (``_url``, ``_query``) are left out: google-genai strips them
    before it encodes a request.
    """
    sent = {k: v for k, v in fields.items() if not k.startswith("_")}
    head = json.dumps(sent)[:-1]
    return (head + (", " if sent else "") + '"contents": [').encode()


def encode_body(prefix: bytes, contents: Sequence[bytes]) -> bytes:
    """The body ``json.dumps`` would make, from :func:`body_prefix` and encoded contents."""
    return b"".join((prefix, b", ".join(contents), b"]}"))


def makes_one_attempt(
    api: _api_client.BaseApiClient, http_options: types.HttpOptions | None
) -> bool:
    """True when a request makes a single attempt: no per-request retry options, and the
    client's allow one (``retry_args``: no options, or attempts 0 or 1)."""
    if http_options is not None and http_options.retry_options is not None:
        return False
    options = api._http_options.retry_options
    return options is None or options.attempts in (0, 1)


Chunk = tuple[Any, dict[str, str]]
"""One decoded chunk of a streamed answer and the answer's headers."""


@dataclass(frozen=True, slots=True)
class Post:
    """One POST of the fast path: ``body``, sent as ``encoded`` when given (its exact JSON)."""

    api: _api_client.BaseApiClient
    path: str
    body: dict[str, Any]
    encoded: bytes | None
    http_options: types.HttpOptions | None

    async def answer(self) -> types.HttpResponse:
        """The answer, as ``BaseApiClient.async_request`` returns it."""
        if not makes_one_attempt(self.api, self.http_options):
            return await self.api.async_request("post", self.path, self.body, self.http_options)
        response = await self._once(stream=False)
        stream = response.response_stream
        return types.HttpResponse(headers=response.headers, body=stream[0] if stream else "")

    async def chunks(self) -> AsyncIterator[Chunk]:
        """Each chunk of a streamed answer as ``BaseApiClient.async_request_streamed``
        yields it (decoded here): an error chunk raised as its ``APIError``."""
        api = self.api
        if not makes_one_attempt(api, self.http_options):
            async for piece in await api.async_request_streamed(
                "post", self.path, self.body, self.http_options
            ):
                yield json.loads(piece.body), piece.headers
            return
        response = await self._once(stream=True)
        async for chunk in response:
            # The SDK's test is json.dumps(chunk).startswith('{"error":'): a dict whose
            # first key is "error".
            if isinstance(chunk, dict) and next(iter(chunk), None) == "error":
                await errors.APIError.raise_error_async(
                    chunk.get("error", {}).get("code"), chunk, response
                )
            yield chunk, response.headers

    async def _once(self, *, stream: bool) -> _api_client.HttpResponse:
        request = self.api._build_request("post", self.path, self.body, self.http_options)
        if self.encoded is not None:
            # Our own request object: the SDK sends bytes as they are.
            request.data = self.encoded
        return await self.api._async_request_once(request, stream)


def environment_configures_http() -> bool:
    """True when a trusting aiohttp session would use the environment: a proxy variable
    for http(s) or ws(s), or a readable ``.netrc`` (``NETRC`` or the home default)."""
    proxies = urllib.request.getproxies()
    if any(proxies.get(scheme) for scheme in _PROXY_SCHEMES):
        return True
    return aiohttp_helpers.netrc_from_env() is not None


def new_session() -> aiohttp.ClientSession:
    """An aiohttp session for google-genai on the running loop, set up as the SDK sets up
    its own (no connection cap, a 4 MiB read buffer), but trusting the environment only
    when it configures something; the caller closes it."""
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0),
        trust_env=environment_configures_http(),
        read_bufsize=_READ_BUFFER_SIZE,
    )
