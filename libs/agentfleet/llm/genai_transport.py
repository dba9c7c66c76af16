"""Per-request costs of google-genai's transport that our settings make pointless.

Three, each paid on every model call of every step:

- its HTTP retry wrapper: a ``tenacity.AsyncRetrying`` call even when the client makes a
  single attempt (as :func:`agentfleet.llm.genai_client.build_genai_client` sets it up: our
  :class:`~agentfleet.llm.client.RetryPolicy` is the only retry). :func:`send_once` stands
  in for it on such a client: one call, its exception raised as is, which is what
  ``stop_after_attempt(1)`` with ``reraise=True`` does;
- the request body: ``json.dumps`` of the whole conversation, O(run length) per call.
  :class:`EncodedBody` carries the JSON text assembled from contents encoded once (same
  bytes as ``json.dumps`` of the dict), and :func:`send_once` sends it;
- its aiohttp session trusts the environment, so each request looks up ``.netrc`` and the
  proxy variables in worker threads: two thread hand-offs per call. When the environment
  names no proxy and no ``.netrc`` exists (checked once per event loop),
  :func:`stop_trusting_env` turns that off on the session; with either present, nothing
  changes. Only a proxy or ``.netrc`` that appears while the process runs is missed.

Like :mod:`agentfleet.llm.genai_fast`, this reaches into google-genai 3.4 and aiohttp 3.14
internals (``BaseApiClient._async_retry``, ``_get_aiohttp_session``, the session's
``_trust_env``); ``tests/unit/test_genai_transport.py`` checks each against the pinned
versions, and every step falls back to the SDK's behaviour when its precondition fails.
"""

from __future__ import annotations

import asyncio
import json
import urllib.request
import weakref
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from aiohttp import helpers as aiohttp_helpers
from google.genai import _api_client

_PROXY_SCHEMES = ("http", "https", "ws", "wss")
"""The proxy variables aiohttp reads (``aiohttp.helpers.proxies_from_env``)."""


class EncodedBody(dict[str, Any]):
    """A request dict that also carries its exact ``json.dumps`` encoding, as bytes."""

    __slots__ = ("encoded",)

    def __init__(self, fields: Mapping[str, Any], encoded: bytes) -> None:
        super().__init__(fields)
        self.encoded = encoded


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


async def send_once(
    send: Callable[..., Awaitable[Any]], http_request: Any, *args: Any, **kwargs: Any
) -> Any:
    """One attempt of ``send`` (``BaseApiClient._async_request_once``); an
    :class:`EncodedBody` goes out as its bytes."""
    body = http_request.data
    if isinstance(body, EncodedBody):
        http_request.data = body.encoded
    return await send(http_request, *args, **kwargs)


def makes_one_attempt(api: _api_client.BaseApiClient) -> bool:
    """True when the client's HTTP retry options allow a single attempt (``retry_args``:
    no options, or attempts 0 or 1)."""
    options = api._http_options.retry_options
    return options is None or options.attempts in (0, 1)


def drop_retry_wrapper(api: _api_client.BaseApiClient) -> bool:
    """Replaces the tenacity wrapper of a single-attempt client by :func:`send_once`;
    False (and nothing changed) when the client retries."""
    if not makes_one_attempt(api):
        return False
    api._async_retry = send_once  # type: ignore[assignment]
    return True


def environment_configures_http() -> bool:
    """True when a trusting aiohttp session would use the environment: a proxy variable
    for http(s) or ws(s), or a readable ``.netrc`` (``NETRC`` or the home default)."""
    proxies = urllib.request.getproxies()
    if any(proxies.get(scheme) for scheme in _PROXY_SCHEMES):
        return True
    return aiohttp_helpers.netrc_from_env() is not None


_CHECKED: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, weakref.WeakSet[Any]] = (
    weakref.WeakKeyDictionary()
)
"""The API clients :func:`stop_trusting_env` already handled, per event loop."""


async def stop_trusting_env(api: _api_client.BaseApiClient) -> None:
    """Turns off environment lookups on the client's aiohttp session of this loop when the
    environment configures nothing; once per client and loop (cheap afterwards)."""
    loop = asyncio.get_running_loop()
    seen = _CHECKED.setdefault(loop, weakref.WeakSet())
    if api in seen:
        return
    seen.add(api)
    if (
        api._http_options.aiohttp_client is not None
        or not api._use_aiohttp()
        or api._use_google_auth_async()
        or environment_configures_http()
    ):
        return
    session = await api._get_aiohttp_session()
    if getattr(session, "_trust_env", False):
        session._trust_env = False
