"""services.dispatcher.triage.usable_decision: what of a triage model's answer is applied.
The model is untrusted: anything but one of the three decisions, a reassignment outside the
candidates (another project's agent, an agent that does not exist, the same agent), or an
answer that is not an object is the mechanical retry (None); texts are bounded."""

from __future__ import annotations

import pytest

from agentfleet.dagfile import graph_request
from agentfleet.errors import InvalidArgument
from services.dispatcher.triage import MAX_REASON_CHARS, TriageDecision, usable_decision

CANDIDATES = ["strong", "reviewer"]


def decide(answer: object) -> TriageDecision | None:
    return usable_decision(answer, agent="weak", candidates=CANDIDATES)


def test_the_three_decisions() -> None:
    assert decide({"decision": "retry", "reason": "r", "advice": "a"}) == TriageDecision(
        decision="retry", reason="r", advice="a"
    )
    assert decide({"decision": "reassign", "reason": "r", "agent": "strong"}) == TriageDecision(
        decision="reassign", reason="r", agent="strong"
    )
    assert decide({"decision": "escalate", "reason": "r", "agent": "strong"}) == TriageDecision(
        decision="escalate", reason="r"
    )


@pytest.mark.parametrize(
    "answer",
    [
        None,
        "retry",
        ["retry"],
        {},
        {"decision": "drop_the_task", "reason": "r"},
        {"decision": "reassign", "reason": "r"},
        {"decision": "reassign", "reason": "r", "agent": "weak"},
        {"decision": "reassign", "reason": "r", "agent": "other-projects-agent"},
        {"decision": "reassign", "reason": "r", "agent": ["strong"]},
    ],
)
def test_unusable_answers_are_the_mechanical_retry(answer: object) -> None:
    assert decide(answer) is None


def test_texts_are_bounded() -> None:
    huge = "x" * (MAX_REASON_CHARS * 10)
    decision = decide({"decision": "retry", "reason": huge, "advice": huge})
    assert decision is not None
    assert len(decision.reason) == len(decision.advice) == MAX_REASON_CHARS


def test_dag_files_opt_in_to_triage() -> None:
    tasks = [{"key": "a", "title": "A"}]
    assert graph_request({"tasks": tasks, "llm_triage": True}, project_id="p").llm_triage
    assert not graph_request({"tasks": tasks}, project_id="p").llm_triage
    with pytest.raises(InvalidArgument, match="llm_triage"):
        graph_request({"tasks": tasks, "llm_triage": "yes"}, project_id="p")
