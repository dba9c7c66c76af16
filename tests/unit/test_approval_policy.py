"""The pure parts of approvals and threads: which calls a policy holds, how a bad policy is
named, and where a thread's context is cut."""

from __future__ import annotations

import pytest
from google.genai import types

from agentfleet.errors import InvalidArgument
from services.executor.approvals.approvals import parse_approval_policy, resolve_pointer
from services.executor.threads import last_turns, parse_thread_policy


def test_globs_and_argument_rules_decide_what_waits() -> None:
    policy = parse_approval_policy(
        {
            "approvals": {
                "rules": [
                    {"tools": ["delete_*"], "deadline_s": 60, "on_deadline": "fail"},
                    {"tools": ["create_entity"], "when": {"pointer": "/type", "matches": "^Sec"}},
                ]
            }
        }
    )
    held = policy.rule_for("delete_entity", {})
    assert held is not None
    assert held.deadline_s == 60
    assert held.on_deadline == "fail"
    assert policy.rule_for("create_entity", {"type": "Secret"}) is not None
    assert policy.rule_for("create_entity", {"type": "Note"}) is None
    assert policy.rule_for("create_entity", {}) is None  # the pointer finds nothing
    assert policy.rule_for("get_entity", {"type": "Secret"}) is None
    assert parse_approval_policy({}).rule_for("delete_entity", {}) is None


def test_pointers_follow_rfc_6901() -> None:
    document = {"a/b": {"c~d": [10, 20]}}
    assert resolve_pointer(document, "/a~1b/c~0d/1") == (True, 20)
    assert resolve_pointer(document, "/a~1b/missing") == (False, None)
    assert resolve_pointer(document, "") == (True, document)


@pytest.mark.parametrize(
    ("approvals", "field"),
    [
        ("yes", "config.approvals"),
        ({"rules": [{"tools": []}]}, "config.approvals.rules[0].tools"),
        ({"rules": [{"tools": ["x"], "deadline_s": -1}]}, "config.approvals.rules[0].deadline_s"),
        ({"rules": [{"tools": ["x"], "on_deadline": "ignore"}]}, "rules[0].on_deadline"),
        ({"rules": [{"tools": ["x"], "when": {"pointer": "/a", "matches": "("}}]}, "matches"),
        ({"rules": [{"tools": ["x"], "when": {"pointer": "a", "matches": "."}}]}, "pointer"),
        ({"count_waiting_in_timeout": "no"}, "count_waiting_in_timeout"),
    ],
)
def test_a_malformed_policy_names_its_field(approvals: object, field: str) -> None:
    with pytest.raises(InvalidArgument) as refused:
        parse_approval_policy({"approvals": approvals})
    assert field in str(refused.value)


def _message(role: str, text: str) -> tuple[str, types.Content]:
    return role, types.Content(
        role="user" if role != "model" else "model", parts=[types.Part(text=text)]
    )


def test_a_thread_is_cut_at_turn_starts_never_between_a_call_and_its_answer() -> None:
    messages = [
        _message("user", "one"),
        _message("model", "calls a tool"),
        _message("tool", "tool result"),
        _message("model", "answer one"),
        _message("user", "two"),
        _message("model", "answer two"),
    ]
    assert [c.parts[0].text for _r, c in last_turns(messages, 1)] == ["two", "answer two"]
    assert len(last_turns(messages, 2)) == 6
    assert last_turns(messages, 10) == messages
    assert last_turns([], 3) == []


def test_the_thread_policy_is_bounded() -> None:
    assert parse_thread_policy({}).max_turns == 10
    assert parse_thread_policy({"thread": {"max_turns": 3}}).max_turns == 3
    for bad in (0, 101, "5", True):
        with pytest.raises(InvalidArgument):
            parse_thread_policy({"thread": {"max_turns": bad}})
