"""The stub Gemini server: a real aiohttp server speaking the Gemini REST API.

Routes (any API key accepted, none required)::

    POST /{v1,v1beta,v1alpha}/models/{model}:generateContent
    POST /{v1,v1beta,v1alpha}/models/{model}:streamGenerateContent[?alt=sse]
    POST /{v1,v1beta1}/projects/*/locations/*/publishers/google/models/{model}:...  (Vertex)
    POST /_stub/scripts     add reply-sequence scripts (JSON, see codec)
    GET  /_stub/scripts     names and remaining replies
    GET  /_stub/requests    recorded requests (?script=NAME to filter)
    POST /_stub/reset       forget scripts, requests and quota counts, release hung replies
    GET  /_stub/quota       the quota mode's limits and per-window counts (quota.py)
    POST /_stub/quota       {"quota": "rpm=20/10s,tpm=100000"} sets it, {"quota": null} ends it
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import time
from typing import Any

from aiohttp import web

from agentfleet.gemini_stub import wire
from agentfleet.gemini_stub.codec import ScriptFormatError, scripts_from_json
from agentfleet.gemini_stub.quota import Admission, QuotaLedger, Refusal, StubQuota, parse_quota
from agentfleet.gemini_stub.request import StubRequest
from agentfleet.gemini_stub.script import Reply, Script, ScriptBook, ScriptExhausted

_API_VERSIONS = frozenset({"v1", "v1beta", "v1alpha", "v1beta1"})
_METHODS = frozenset({"generateContent", "streamGenerateContent"})


class GeminiStub:
    """A scripted offline model. Start it, point google-genai's ``base_url`` at it."""

    def __init__(
        self,
        *,
        record_requests: bool = True,
        fallback: Script | None = None,
        quota: StubQuota | None = None,
    ) -> None:
        """``fallback`` answers requests no script matches (see :class:`ScriptBook`); without
        one they get HTTP 500. ``record_requests`` False keeps no request once it is answered, so
        :attr:`requests` stays empty. For long benchmarks: every recorded body (a whole
        conversation, parsed) stays alive, and over a run of hundreds of steps that heap
        makes the stub's full garbage collections pause for 100 ms and more, which then
        shows up as slow model calls. ``quota`` switches the quota mode on
        (:mod:`agentfleet.gemini_stub.quota`)."""
        self._book = ScriptBook(fallback=fallback)
        self._quota = QuotaLedger(quota) if quota is not None else None
        self._record_requests = record_requests
        self._requests: list[StubRequest] = []
        self._arrived = asyncio.Condition()
        # Set to release every delayed or hung reply at once (stop and reset).
        self._release = asyncio.Event()
        self._ids = itertools.count(1)
        self._runner: web.AppRunner | None = None
        self.base_url: str | None = None

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        """Serves on ``host:port`` (0 picks a free port); returns the base URL."""
        if self._runner is not None:
            raise RuntimeError("the gemini stub is already started")
        self._release = asyncio.Event()
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.add_routes(
            [
                web.post("/_stub/scripts", self._post_scripts),
                web.get("/_stub/scripts", self._get_scripts),
                web.get("/_stub/requests", self._get_requests),
                web.post("/_stub/reset", self._post_reset),
                web.get("/_stub/quota", self._get_quota),
                web.post("/_stub/quota", self._post_quota),
                web.post("/{version}/models/{target}", self._generate),
                web.post(
                    "/{version}/projects/{project}/locations/{location}"
                    "/publishers/google/models/{target}",
                    self._generate,
                ),
            ]
        )
        # handler_cancellation: a client that gives up on a hung reply ends its handler.
        runner = web.AppRunner(
            app, handler_cancellation=True, shutdown_timeout=1.0, access_log=None
        )
        await runner.setup()
        site = web.TCPSite(runner, host, port)
        await site.start()
        self._runner = runner
        bound_host, bound_port = runner.addresses[0][:2]
        self.base_url = f"http://{_url_host(bound_host)}:{bound_port}"
        return self.base_url

    async def stop(self) -> None:
        """Releases hung replies and stops serving; safe to call twice."""
        self._release.set()
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()

    def add_script(self, script: Script) -> Script:
        """Adds a script (first added, first matched; one without matchers is the default)."""
        self._book.add(script)
        return script

    def set_quota(self, quota: StubQuota | None) -> None:
        """Switches the quota mode on with ``quota`` (counting afresh), or off with None."""
        self._quota = QuotaLedger(quota) if quota is not None else None

    @property
    def quota(self) -> QuotaLedger | None:
        """The quota mode's ledger (what each window accepted and refused); None when off."""
        return self._quota

    def reset(self) -> None:
        """Forgets scripts, counters, quota counts and recorded requests; releases hung
        replies. The quota's limits stay."""
        self._book.clear()
        if self._quota is not None:
            self.set_quota(self._quota.quota)
        self._requests.clear()
        self._release.set()
        self._release = asyncio.Event()

    def scripts(self) -> list[Script]:
        """The scripts in matching order (the default last)."""
        return self._book.scripts()

    @property
    def requests(self) -> list[StubRequest]:
        """Every request received, oldest first."""
        return list(self._requests)

    def requests_for(self, script_name: str) -> list[StubRequest]:
        """The requests the named script answered (or ran out on)."""
        return [r for r in self._requests if r.script == script_name]

    def used(self, script_name: str) -> int:
        """How many requests the named script has been asked to answer."""
        return self._book.used(script_name)

    async def wait_for_requests(
        self, count: int, *, script: str | None = None
    ) -> list[StubRequest]:
        """Waits until ``count`` requests (of ``script``, if given) have arrived; bound it
        with ``asyncio.timeout`` where a missing request must fail rather than hang."""

        def seen() -> list[StubRequest]:
            return self.requests_for(script) if script is not None else self.requests

        if not self._record_requests:
            raise RuntimeError("this gemini stub does not record requests")
        async with self._arrived:
            await self._arrived.wait_for(lambda: len(seen()) >= count)
        return seen()

    async def _record(self, record: StubRequest) -> None:
        if not self._record_requests:
            return
        async with self._arrived:
            self._requests.append(record)
            self._arrived.notify_all()

    async def _generate(self, request: web.Request) -> web.StreamResponse:
        version = request.match_info["version"]
        model, _, method = request.match_info["target"].rpartition(":")
        if version not in _API_VERSIONS or method not in _METHODS or not model:
            return _error(404, f"gemini stub: no such method {request.path}")
        raw = await request.read()
        try:
            body = json.loads(raw)
        except ValueError:
            return _error(400, "gemini stub: request body is not JSON")
        if not isinstance(body, dict):
            return _error(400, "gemini stub: request body must be a JSON object")
        model = model.removeprefix("models/")
        admission: Admission | None = None
        if self._quota is not None:
            verdict = self._quota.admit(model, time.time())
            if isinstance(verdict, Refusal):
                return web.json_response(verdict.body(), status=429)
            admission = verdict
        record = StubRequest(
            model=model,
            method=method,
            api_version=version,
            path=request.path_qs,
            body=body,
            received_at=time.time(),
            body_chars=len(raw),
        )
        matched = self._book.find(record)
        record.script = matched.name if matched is not None else None
        await self._record(record)
        try:
            _, reply = await self._book.next_reply(record)
        except ScriptExhausted as exc:
            return _error(500, str(exc))
        except Exception as exc:  # a failing policy must fail the test loudly, not hang it
            return _error(500, f"gemini stub: policy of script {record.script!r} raised {exc!r}")
        if admission is not None and reply.error_status is None:
            admission.charge_tokens(wire.usage_metadata(reply, record)["totalTokenCount"])
        return await self._answer(request, record, reply)

    async def _answer(
        self, request: web.Request, record: StubRequest, reply: Reply
    ) -> web.StreamResponse:
        release = self._release
        if reply.delay_s:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(release.wait(), reply.delay_s)
        if reply.hang:
            await release.wait()
        if release.is_set():
            return _error(503, "gemini stub: stopped or reset while the reply was pending")
        if reply.error_status is not None:
            return web.json_response(wire.reply_error_body(reply), status=reply.error_status)
        response_id = f"stub-{next(self._ids)}"
        if record.method == "generateContent":
            if reply.malformed:
                return web.Response(text=wire.MALFORMED_BODY, content_type="application/json")
            return web.json_response(wire.generate_response(reply, record, response_id))
        chunks = wire.stream_responses(reply, record, response_id)
        if request.query.get("alt") != "sse":
            # Without alt=sse the real API answers a JSON array of the chunks.
            text = wire.MALFORMED_BODY if reply.malformed else json.dumps(chunks)
            return web.Response(text=text, content_type="application/json")
        stream = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await stream.prepare(request)
        payloads = [wire.MALFORMED_BODY] if reply.malformed else [json.dumps(c) for c in chunks]
        for index, payload in enumerate(payloads):
            if index and reply.stream_chunk_delay_s:
                # Each chunk leaves on its own, as a model produces tokens over time.
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(release.wait(), reply.stream_chunk_delay_s)
            await stream.write(f"data: {payload}\r\n\r\n".encode())
        await stream.write_eof()
        return stream

    async def _post_scripts(self, request: web.Request) -> web.Response:
        try:
            scripts = scripts_from_json(await request.json())
            for script in scripts:
                self._book.add(script)
        except (ScriptFormatError, ValueError) as exc:
            return _error(400, f"gemini stub: {exc}")
        return web.json_response({"added": [s.name for s in scripts]})

    async def _get_scripts(self, request: web.Request) -> web.Response:
        scripts = [
            {
                "name": s.name,
                "used": self._book.used(s.name),
                "remaining": self._book.remaining(s.name),
            }
            for s in self._book.scripts()
        ]
        return web.json_response({"scripts": scripts})

    async def _get_requests(self, request: web.Request) -> web.Response:
        name = request.query.get("script")
        records = self.requests_for(name) if name is not None else self.requests
        return web.json_response({"requests": [r.to_json() for r in records]})

    async def _get_quota(self, request: web.Request) -> web.Response:
        quota = self._quota
        return web.json_response(quota.to_json() if quota is not None else {"quota": None})

    async def _post_quota(self, request: web.Request) -> web.Response:
        try:
            body = await request.json()
            text = body.get("quota") if isinstance(body, dict) else ...
            if text is not None and not isinstance(text, str):
                raise ValueError('expected {"quota": "rpm=N/WINDOW,..."} or {"quota": null}')
            self.set_quota(parse_quota(text) if text is not None else None)
        except ValueError as exc:
            return _error(400, f"gemini stub: {exc}")
        return await self._get_quota(request)

    async def _post_reset(self, request: web.Request) -> web.Response:
        self.reset()
        return web.json_response({})


def _error(code: int, message: str) -> web.Response:
    return web.json_response(wire.error_body(code, message), status=code)


def _url_host(host: Any) -> str:
    return f"[{host}]" if ":" in str(host) else str(host)
