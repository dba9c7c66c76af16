"""CPU of one model call on the client side: google-genai's public path against our fast path.

The stub Gemini server runs in a process of its own (it answers at once) so only the caller's
work is counted. A run is ``--steps`` calls over one growing conversation, as an agent run
makes them: each call sends everything so far (user input, then per step the model's
function call and our function response), so call k sends 2k-1 contents.

The timed span is one ``generate`` call: building the request, the HTTP round trip on
loopback, parsing the answer into a ``ModelReply``. Measured with ``time.process_time`` (CPU
of this process, all threads), so the stub's work and machine noise move it little. Paths:

- ``sdk``: ``client.aio.models.generate_content`` (the public call), on a client of its own;
- ``client``: :class:`GenaiModelClient` as configured (the fast path unless switched off);
- ``client-off``: :class:`GenaiModelClient` with the fast path switched off, where the
  switch exists (it should cost what ``sdk`` costs);
- ``stream`` and ``stream-off``: :meth:`GenaiModelClient.generate_stream` (a streamed
  ``streamGenerateContent`` call, SSE), fast path on and off. A streamed answer carries a
  short text in a few chunks before its function call, so the timed span also holds the
  parse of every chunk and the hand-over of every text piece (to a sink that keeps them).

Paths alternate run by run, ``--runs`` runs each; the figure is the median over runs.
``python bench/genai_calls.py [--steps 100] [--runs 3]``
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import argparse
import asyncio
import statistics
import time
from collections.abc import Awaitable, Callable

from _stub_child import serve, stub_child
from google.genai import types

from agentfleet.config import load_settings
from agentfleet.gemini_stub import Call, GeminiStub, Reply, Script
from agentfleet.gemini_stub.request import StubRequest
from agentfleet.llm import (
    GenaiModelClient,
    ModelReply,
    RetryPolicy,
    TextDelta,
    build_genai_client,
)
from agentfleet.llm.genai_translate import reply_from_response

MODEL = "stub"
SYSTEM = "You are a bench agent. Call echo until told to stop."
TOOLS = [
    types.Tool(
        function_declarations=[
            types.FunctionDeclaration(
                name="echo",
                description="Echoes its text.",
                parameters_json_schema={
                    "type": "object",
                    "properties": {"text": {"type": "string"}},
                    "required": ["text"],
                },
            )
        ]
    )
]
CONFIG = types.GenerateContentConfig(temperature=0.2, max_output_tokens=512)

Generate = Callable[[list[types.Content]], Awaitable[ModelReply]]


def bench_stub() -> GeminiStub:
    """Answers every call with one echo call (a different argument each turn)."""

    def policy(request: StubRequest) -> Reply:
        call = Call("echo", {"text": f"step {request.turn} " + "x" * 200})
        if request.method == "streamGenerateContent":
            return Reply(text=f"working on step {request.turn}", calls=[call], stream_chunk_chars=8)
        return Reply(calls=[call])

    stub = GeminiStub(record_requests=False)
    stub.add_script(Script(name="bench", policy=policy))
    return stub


def model_client(base_url: str, *, fast_path: bool | None) -> GenaiModelClient | None:
    """A :class:`GenaiModelClient` on the stub, made as the services make it; None when
    ``fast_path`` is asked of a version that has no switch."""
    settings = load_settings({}).with_overrides(
        gemini_base_url=base_url, gemini_api_key=None, gemini_use_vertex=False
    )
    if fast_path is not None:
        if not hasattr(settings, "genai_fast_path"):
            return None
        settings = settings.with_overrides(genai_fast_path=fast_path)
    return GenaiModelClient.from_settings(settings, retry=RetryPolicy.for_tests())


def sdk_generate(base_url: str) -> tuple[Generate, Callable[[], Awaitable[None]]]:
    """The public call, with the request GenaiModelClient would make."""
    settings = load_settings({}).with_overrides(
        gemini_base_url=base_url, gemini_api_key=None, gemini_use_vertex=False
    )
    client = build_genai_client(settings)
    config = CONFIG.model_copy(
        update={
            "system_instruction": SYSTEM,
            "tools": TOOLS,
            "automatic_function_calling": types.AutomaticFunctionCallingConfig(disable=True),
        }
    )

    async def generate(contents: list[types.Content]) -> ModelReply:
        response = await client.aio.models.generate_content(
            model=MODEL, contents=contents, config=config
        )
        return reply_from_response(response, attempts=1)

    return generate, client.aio.aclose


def client_generate(client: GenaiModelClient) -> Generate:
    async def generate(contents: list[types.Content]) -> ModelReply:
        return await client.generate(
            model=MODEL, system_instruction=SYSTEM, contents=contents, tools=TOOLS, config=CONFIG
        )

    return generate


def stream_generate(client: GenaiModelClient) -> Generate:
    async def generate(contents: list[types.Content]) -> ModelReply:
        pieces: list[TextDelta] = []

        async def keep(piece: TextDelta) -> None:
            pieces.append(piece)

        reply = await client.generate_stream(
            model=MODEL,
            system_instruction=SYSTEM,
            contents=contents,
            tools=TOOLS,
            config=CONFIG,
            on_delta=keep,
        )
        assert pieces, "a streamed answer brought no text piece"
        return reply

    return generate


async def one_run(generate: Generate, steps: int) -> list[float]:
    """CPU seconds of each call of one run."""
    contents = [types.Content(role="user", parts=[types.Part(text="go")])]
    cpu: list[float] = []
    for _ in range(steps):
        began = time.process_time()
        reply = await generate(contents)
        cpu.append(time.process_time() - began)
        call = reply.function_calls[0]
        contents.append(reply.content)
        contents.append(
            types.Content(
                role="user",
                parts=[
                    types.Part(
                        function_response=types.FunctionResponse(
                            id=call.id, name=call.name, response={"output": call.args}
                        )
                    )
                ],
            )
        )
    return cpu


async def measure(base_url: str, steps: int, runs: int) -> None:
    sdk, sdk_close = sdk_generate(base_url)
    paths: dict[str, tuple[Generate, Callable[[], Awaitable[None]]]] = {"sdk": (sdk, sdk_close)}
    default = model_client(base_url, fast_path=None)
    assert default is not None
    paths["client"] = (client_generate(default), default.aclose)
    off = model_client(base_url, fast_path=False)
    if off is not None:
        paths["client-off"] = (client_generate(off), off.aclose)
    if hasattr(default, "generate_stream"):
        paths["stream"] = (stream_generate(default), _nothing)
        if off is not None:
            paths["stream-off"] = (stream_generate(off), _nothing)
    per_run: dict[str, list[list[float]]] = {name: [] for name in paths}
    try:
        for generate, _ in paths.values():
            await one_run(generate, 3)  # warm up: sessions, caches, first-use imports
        for _ in range(runs):
            for name, (generate, _) in paths.items():
                per_run[name].append(await one_run(generate, steps))
    finally:
        for _, close in paths.values():
            await close()
    print(
        f"n = {runs} runs x {steps} calls per path; timed span: one generate call "
        f"(request build, loopback HTTP round trip to the stub in its own process, reply "
        f"parse), CPU of this process (time.process_time); call k sends {2}k-1 contents"
    )
    for name, samples in per_run.items():
        mean = statistics.median(statistics.fmean(run) for run in samples) * 1000
        first = statistics.median(statistics.fmean(run[:10]) for run in samples) * 1000
        last = statistics.median(statistics.fmean(run[-10:]) for run in samples) * 1000
        print(
            f"{name:<11} CPU per call: mean {mean:6.3f} ms   first 10 calls {first:6.3f} ms   "
            f"last 10 calls ({2 * steps - 1} contents) {last:6.3f} ms"
        )


async def _nothing() -> None:
    """The stream paths share the clients above, closed once."""


async def main(steps: int, runs: int) -> None:
    async with stub_child(__file__) as base_url:
        await measure(base_url, steps, runs)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--serve-stub", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    asyncio.run(serve(bench_stub()) if args.serve_stub else main(args.steps, args.runs))
