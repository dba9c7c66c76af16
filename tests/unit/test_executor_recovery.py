"""Rebuilding a run's state from its rows (pure part of crash recovery)."""

from __future__ import annotations

from google.genai import types

from agentfleet.llm import content_to_json
from services.executor.run_path.recovery import build_continuation
from services.executor.store.messages import MessageRow
from services.executor.store.tool_calls import ToolCallRow


def _message(seq: int, step: int, role: str, content: types.Content) -> MessageRow:
    return MessageRow(seq=seq, step_number=step, role=role, content=content_to_json(content))


def _call(tool_call_id: str, name: str, status: str, step: int = 1) -> ToolCallRow:
    return ToolCallRow(
        tool_call_id=tool_call_id,
        tool_name=name,
        source="builtin",
        input={"q": name},
        step_number=step,
        status=status,
    )


def test_open_calls_of_the_last_reply_are_paired_in_model_order() -> None:
    reply = types.Content(
        role="model",
        parts=[
            types.Part(text="looking"),
            types.Part(function_call=types.FunctionCall(name="a", args={"q": "a"})),
            types.Part(function_call=types.FunctionCall(name="b", args={"q": "b"}, id="fc-b")),
        ],
    )
    messages = [
        _message(0, 0, "system", types.Content(parts=[types.Part(text="sys")])),
        _message(1, 0, "user", types.Content(role="user", parts=[types.Part(text="go")])),
        _message(2, 1, "model", reply),
    ]
    calls = [_call("fc-b", "b", "started"), _call("call-1-1-abcd1234", "a", "started")]
    state = build_continuation(messages, calls)
    assert state.next_message_seq == 3
    assert state.step == 1
    assert len(state.contents) == 2  # the system message is not part of the conversation
    assert [c.tool_call_id for c in state.open_calls] == ["call-1-1-abcd1234", "fc-b"]
    assert state.open_calls[1].call.id == "fc-b"
    assert state.last_text == "looking"
    assert state.final_text is None
    assert state.used_ids == {"fc-b", "call-1-1-abcd1234"}
    assert state.past_calls == [("a", {"q": "a"}), ("b", {"q": "b"})]


def test_a_final_answer_whose_completion_was_lost_is_recognised() -> None:
    messages = [
        _message(0, 0, "user", types.Content(role="user", parts=[types.Part(text="go")])),
        _message(1, 1, "model", types.Content(role="model", parts=[types.Part(text="done")])),
    ]
    state = build_continuation(messages, [])
    assert state.final_text == "done"
    assert state.open_calls == []


def test_a_run_without_messages_starts_fresh() -> None:
    assert not build_continuation([], []).has_messages
