"""What a step's writes leave behind (issue #4): its events numbered in order, stored in the
statement that records the step, with nothing rebuilt from the rows in the process (followers
read them from the table). And the tool message a step records is the content validation
would have built."""

from __future__ import annotations

import asyncpg
import pytest
from google.genai import types

from agentfleet import events as ev
from agentfleet.llm import ModelReply, TokenUsage, content_to_json
from agentfleet.testing import factories as f
from services.executor.calls import CallResult, PlannedCall
from services.executor.runs import RunRecord
from services.executor.store.persistence import RunRecorder

PROJECT = "publish-proj"
OWNER = "worker-1"


async def _running_run(pool: asyncpg.Pool) -> RunRecord:
    row = await f.insert_leased_run(pool, owner=OWNER, project_id=PROJECT, agent_name="pub")
    return RunRecord.from_row(row)


def _step(step: int) -> tuple[ModelReply, list[PlannedCall], list[CallResult]]:
    calls = [
        types.FunctionCall(id=f"c{step}", name="echo", args={"text": str(step)}),
        types.FunctionCall(name="echo", args={"n": [1, 2]}),
    ]
    reply = ModelReply(
        content=types.Content(
            role="model",
            parts=[types.Part(text="go"), *(types.Part(function_call=c) for c in calls)],
        ),
        text="go",
        function_calls=tuple(calls),
        finish_reason="STOP",
        usage=TokenUsage(prompt_tokens=4, output_tokens=2, total_tokens=6),
        model_version=None,
        response_id=None,
        attempts=1,
    )
    planned = [
        PlannedCall(
            tool_call_id=f"id-{step}-{i}",
            tool_name="echo",
            arguments=dict(c.args or {}),
            source="builtin",
            call=c,
        )
        for i, c in enumerate(calls)
    ]
    results = [
        CallResult(planned=p, status="completed", response={"output": {"nested": p.arguments}})
        for p in planned
    ]
    return reply, planned, results


async def test_a_step_rebuilds_no_event(
    db_pool: asyncpg.Pool, monkeypatch: pytest.MonkeyPatch
) -> None:
    rebuilt: list[object] = []
    rebuild = ev.persisted_from_row

    def counting(row: object) -> ev.PersistedEvent:
        rebuilt.append(row)
        return rebuild(row)  # type: ignore[arg-type]

    monkeypatch.setattr(ev, "persisted_from_row", counting)
    run = await _running_run(db_pool)
    recorder = RunRecorder(db_pool, run, owner=OWNER, next_message_seq=1)
    for step in (1, 2):
        reply, planned, results = _step(step)
        await recorder.record_model_reply(step=step, reply=reply, calls=planned)
        await recorder.record_tool_results(step=step, results=results)
    assert rebuilt == []
    stored = await ev.read_events(db_pool, project_id=PROJECT, run_id=run.id)
    assert [p.seq for p in stored] == list(range(1, 11))
    assert [p.event.type for p in stored[:5]] == ["model_text"] + ["tool_request"] * 2 + [
        "tool_response"
    ] * 2


async def test_the_tool_message_is_what_validation_would_build(db_pool: asyncpg.Pool) -> None:
    run = await _running_run(db_pool)
    recorder = RunRecorder(db_pool, run, owner=OWNER, next_message_seq=1)
    reply, planned, results = _step(1)
    await recorder.record_model_reply(step=1, reply=reply, calls=planned)
    content = await recorder.record_tool_results(step=1, results=results)
    validated = types.Content(
        role="user",
        parts=[
            types.Part(
                function_response=types.FunctionResponse(
                    id=r.planned.call.id, name=r.planned.tool_name, response=r.response
                )
            )
            for r in results
        ],
    )
    assert content == validated
    assert content_to_json(content) == content_to_json(validated)
    stored = await db_pool.fetchval(
        "SELECT content FROM kb.agent_run_messages WHERE run_id = $1::uuid AND role = 'tool'",
        run.id,
    )
    assert stored == content_to_json(validated)
    assert types.Content.model_validate(stored) == validated
