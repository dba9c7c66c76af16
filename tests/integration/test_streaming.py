"""Token streaming (issue #19) through real gRPC (the in-process stack, auth on), real
PostgreSQL and the stub Gemini server streaming SSE in chunks to the real google-genai
client: MODEL_TEXT_DELTA pieces reach StartRun and WatchRun followers before the step's
stored MODEL_TEXT and concatenate to it; they are never stored, so a replay is the live
stream without them."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import asyncpg
import grpc

from agentfleet.gemini_stub import Call, GeminiStub, Reply, Script, StubRequest
from agentfleet.testing.services import Stack
from agentfleet.v1 import (
    common_pb2,
    executor_pb2,
    executor_pb2_grpc,
    history_pb2,
    history_pb2_grpc,
    registry_pb2,
    registry_pb2_grpc,
)

P = "streaming"
STEP = 20.0  # deadline of each wait, seconds
SYSTEM = "You stream your answers."
DELTA = common_pb2.RUN_EVENT_TYPE_MODEL_TEXT_DELTA
FIRST_TEXT = "Let me look that up first, it will take a moment. " * 3
THOUGHT = "The user wants facts; a tool call is needed before answering."
FINAL_TEXT = "Gemini is a family of multimodal models.\nEach answer streams in pieces. " * 4


async def _define(stack: Stack, token: str, *, name: str, streaming: bool | None) -> None:
    registry = registry_pb2_grpc.AgentRegistryServiceStub(stack.channel("executor", token=token))
    await registry.UpsertAgentDefinition(
        registry_pb2.UpsertAgentDefinitionRequest(
            project_id=P,
            agent_definition=common_pb2.AgentDefinition(
                name=name,
                system_prompt=SYSTEM,
                model=common_pb2.ModelConfig(name="gemini-2.5-flash"),
                streaming=streaming,
            ),
        )
    )


def _two_steps(gate: asyncio.Event | None = None, *, runs: int = 1) -> Script:
    """Step 1: a thought, text and a call (of a tool the agent does not have: refused);
    step 2: the final text. Each streamed in 9-character chunks, 5 ms apart."""
    replies = [
        Reply(
            text=FIRST_TEXT,
            thought=THOUGHT,
            calls=[Call(name="web_search", args={"query": "gemini"})],
            stream_chunk_chars=9,
            stream_chunk_delay_s=0.005,
        ),
        Reply(text=FINAL_TEXT, stream_chunk_chars=9, stream_chunk_delay_s=0.005),
    ]
    used = iter(replies * runs)

    async def policy(request: StubRequest) -> Reply:
        if gate is not None:
            await gate.wait()
        return next(used)

    return Script(name="streamer", match_system=SYSTEM, policy=policy)


async def _read_all(call) -> list[common_pb2.RunEvent]:  # type: ignore[no-untyped-def]
    out: list[common_pb2.RunEvent] = []
    async with asyncio.timeout(STEP):
        async for event in call:
            out.append(event)
    return out


def _assert_deltas_precede_and_build_text(live: Sequence[common_pb2.RunEvent]) -> int:
    """Every stored MODEL_TEXT is preceded by its step's deltas, which concatenate (in
    offset order, with no gap) to its text; no delta of a step follows its MODEL_TEXT.
    Returns how many deltas were checked."""
    checked = 0
    texts = [
        (i, e)
        for i, e in enumerate(live)
        if e.type == common_pb2.RUN_EVENT_TYPE_MODEL_TEXT and not e.model_text.thought
    ]
    assert len(texts) == 2
    for index, text in texts:
        step = text.model_text.step
        before = [
            e.model_text_delta
            for e in live[:index]
            if e.type == DELTA
            and e.model_text_delta.step == step
            and not e.model_text_delta.thought
        ]
        after = [e for e in live[index:] if e.type == DELTA and e.model_text_delta.step == step]
        assert after == []
        assert len(before) > 1, "the text came in pieces"
        # The pieces precede the step's first stored event: its thought when it has one.
        first = min(e.seq for e in live if e.HasField("model_text") and e.model_text.step == step)
        offset = 0
        for piece in before:
            assert piece.offset == offset
            assert piece.before_seq == first
            offset += len(piece.text)
        assert "".join(p.text for p in before) == text.model_text.text
        checked += len(before)
    return checked


def _stored(events: Sequence[common_pb2.RunEvent]) -> list[bytes]:
    return [e.SerializeToString(deterministic=True) for e in events if e.type != DELTA]


async def test_start_run_streams_deltas_before_the_stored_text_and_replay_has_none(
    stub_stack: Stack, db_pool: asyncpg.Pool, gemini_stub: GeminiStub
) -> None:
    token = await stub_stack.create_token(P, "admin")
    await _define(stub_stack, token, name="streamer", streaming=True)
    gemini_stub.add_script(_two_steps())
    executor = executor_pb2_grpc.ExecutorServiceStub(stub_stack.channel("executor", token=token))

    live = await _read_all(
        executor.StartRun(
            executor_pb2.StartRunRequest(project_id=P, agent_name="streamer", input="Gemini?")
        )
    )

    assert live[-1].type == common_pb2.RUN_EVENT_TYPE_RUN_FINISHED
    assert live[-1].run_finished.run.status == common_pb2.RUN_STATUS_COMPLETED
    assert _assert_deltas_precede_and_build_text(live) > 10
    thought = [e.model_text_delta for e in live if e.type == DELTA and e.model_text_delta.thought]
    assert "".join(d.text for d in thought) == THOUGHT
    # The whole thought is stored too, before the step's text, after its pieces.
    (stored_thought,) = [e for e in live if e.HasField("model_text") and e.model_text.thought]
    assert stored_thought.model_text.text == THOUGHT
    assert all(e.seq == 0 for e in live if e.type == DELTA)
    stored_seqs = [e.seq for e in live if e.type != DELTA]
    assert stored_seqs == list(range(1, len(stored_seqs) + 1))
    # The tool call was acted on once step 1's stream was complete: refused (unknown).
    responses = [e for e in live if e.type == common_pb2.RUN_EVENT_TYPE_TOOL_RESPONSE]
    assert [r.tool_response.status for r in responses] == [common_pb2.TOOL_CALL_STATUS_REFUSED]
    # The stub was asked for SSE streams, and the persisted replies are whole.
    assert {r.method for r in gemini_stub.requests_for("streamer")} == {"streamGenerateContent"}
    assert all("alt=sse" in r.path for r in gemini_stub.requests_for("streamer"))
    run_id = live[0].run_id
    rows = await db_pool.fetch(
        "SELECT content FROM kb.agent_run_messages WHERE run_id = $1::uuid AND role = 'model' "
        "ORDER BY seq",
        run_id,
    )
    first, final = (r["content"]["parts"] for r in rows)
    assert [p.get("text") for p in first if not p.get("thought") and "text" in p] == [FIRST_TEXT]
    assert [p["text"] for p in first if p.get("thought")] == [THOUGHT]
    assert [p["text"] for p in final] == [FINAL_TEXT]
    # Deltas are not stored: the events table holds what the stream showed minus them.
    assert await db_pool.fetchval(
        "SELECT count(*) FROM kb.agent_run_events WHERE run_id = $1::uuid", run_id
    ) == len(stored_seqs)

    history = history_pb2_grpc.HistoryServiceStub(stub_stack.channel("history", token=token))
    replay = await _read_all(
        history.WatchRun(history_pb2.WatchRunRequest(project_id=P, run_id=run_id))
    )
    assert all(e.type != DELTA for e in replay)
    assert _stored(replay) == _stored(live)
    got = await history.GetRun(history_pb2.GetRunRequest(project_id=P, run_id=run_id))
    assert got.run.summary == FINAL_TEXT


async def test_watch_run_follower_gets_the_deltas_live(
    stub_stack: Stack, gemini_stub: GeminiStub
) -> None:
    token = await stub_stack.create_token(P, "member")
    admin = await stub_stack.create_token(P, "admin")
    await _define(stub_stack, admin, name="streamer", streaming=True)
    gate = asyncio.Event()
    gemini_stub.add_script(_two_steps(gate))
    executor = executor_pb2_grpc.ExecutorServiceStub(stub_stack.channel("executor", token=token))
    history = history_pb2_grpc.HistoryServiceStub(stub_stack.channel("history", token=token))

    run = await executor.TriggerRun(
        executor_pb2.StartRunRequest(project_id=P, agent_name="streamer", input="Gemini?")
    )
    watch = history.WatchRun(history_pb2.WatchRunRequest(project_id=P, run_id=run.id))
    first = await asyncio.wait_for(watch.read(), STEP)
    assert first.type == common_pb2.RUN_EVENT_TYPE_RUN_QUEUED
    gate.set()  # the watcher is attached: let the model answer
    live = [first, *await _read_all(watch)]
    assert await watch.code() == grpc.StatusCode.OK

    assert live[-1].run_finished.run.status == common_pb2.RUN_STATUS_COMPLETED
    assert _assert_deltas_precede_and_build_text(live) > 10
    replay = await _read_all(
        history.WatchRun(history_pb2.WatchRunRequest(project_id=P, run_id=run.id))
    )
    assert _stored(replay) == _stored(live)


async def test_definition_without_streaming_sends_no_deltas(
    stub_stack: Stack, gemini_stub: GeminiStub
) -> None:
    token = await stub_stack.create_token(P, "admin")
    await _define(stub_stack, token, name="streamer", streaming=False)
    gemini_stub.add_script(_two_steps())
    executor = executor_pb2_grpc.ExecutorServiceStub(stub_stack.channel("executor", token=token))

    live = await _read_all(
        executor.StartRun(
            executor_pb2.StartRunRequest(project_id=P, agent_name="streamer", input="Gemini?")
        )
    )

    assert live[-1].run_finished.run.status == common_pb2.RUN_STATUS_COMPLETED
    assert all(e.type != DELTA for e in live)
    assert {r.method for r in gemini_stub.requests_for("streamer")} == {"generateContent"}


async def test_unset_switch_streams_a_followed_run_and_not_a_queued_one(
    stub_stack: Stack, gemini_stub: GeminiStub
) -> None:
    """The default: StartRun's caller follows the run from its start, so it streams;
    TriggerRun only queues it, so its model calls take the plain (cheaper) path."""
    token = await stub_stack.create_token(P, "admin")
    await _define(stub_stack, token, name="streamer", streaming=None)
    executor = executor_pb2_grpc.ExecutorServiceStub(stub_stack.channel("executor", token=token))
    history = history_pb2_grpc.HistoryServiceStub(stub_stack.channel("history", token=token))

    gemini_stub.add_script(_two_steps(runs=2))
    followed = await _read_all(
        executor.StartRun(
            executor_pb2.StartRunRequest(project_id=P, agent_name="streamer", input="Gemini?")
        )
    )
    assert followed[-1].run_finished.run.status == common_pb2.RUN_STATUS_COMPLETED
    assert _assert_deltas_precede_and_build_text(followed) > 10
    assert {r.method for r in gemini_stub.requests_for("streamer")} == {"streamGenerateContent"}

    queued = await executor.TriggerRun(
        executor_pb2.StartRunRequest(project_id=P, agent_name="streamer", input="Gemini?")
    )
    watched = await _read_all(
        history.WatchRun(history_pb2.WatchRunRequest(project_id=P, run_id=queued.id))
    )
    assert watched[-1].run_finished.run.status == common_pb2.RUN_STATUS_COMPLETED
    assert all(e.type != DELTA for e in watched)
    methods = [r.method for r in gemini_stub.requests_for("streamer")]
    assert methods[-2:] == ["generateContent", "generateContent"]
