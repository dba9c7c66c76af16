"""Costs, budgets and fallback models on real processes (issue 31): the executor prices each
model call by AGENTFLEET_MODEL_PRICES and history shows it per message, run, tree and agent;
a project budget warns, then pauses a run with the reason, and ResumeRun continues it once the
budget is raised; a definition's fallback model answers when the primary keeps answering 503,
with tools working across the switch and the answering model recorded."""

from __future__ import annotations

import asyncio

from agentfleet.gemini_stub import Call, Reply, Script, Usage
from agentfleet.v1 import common_pb2, executor_pb2, history_pb2, registry_pb2
from tests.e2e.conftest import Fleet, Project

T = common_pb2.RunEventType
USAGE = Usage(prompt_tokens=1000, candidates_tokens=100)
CALL_COST_NANOS = 1000 * 1000 + 100 * 10_000
"""One gemini-e2e call of USAGE at E2E_PRICES: $1/M input, $10/M output."""


async def define(project: Project, name: str, marker: str, **model: object) -> None:
    await project.registry().UpsertAgentDefinition(
        registry_pb2.UpsertAgentDefinitionRequest(
            project_id=project.project_id,
            agent_definition=common_pb2.AgentDefinition(
                name=name,
                system_prompt=f"You step. {marker}",
                model=common_pb2.ModelConfig(name="gemini-e2e", **model),
                tools=["create_entity"],
            ),
        )
    )


def steps(marker: str, count: int, *, model: str | None = None) -> Script:
    replies = [
        Reply(
            text=f"Step {n}.",
            calls=[Call("create_entity", {"type": "Note", "key": f"n{n}"})],
            usage=USAGE,
        )
        for n in range(1, count + 1)
    ]
    return Script(
        name=f"{marker}{model or ''}",
        match_system=marker,
        match_model=model,
        per_conversation=True,
        replies=[*replies, Reply(text="All steps done.", usage=USAGE)],
    )


async def run_to_end(
    project: Project, agent: str, *, resume_of: str | None = None
) -> list[common_pb2.RunEvent]:
    executor = project.executor()
    if resume_of is None:
        stream = executor.StartRun(
            executor_pb2.StartRunRequest(
                project_id=project.project_id, agent_name=agent, input="go"
            )
        )
    else:
        stream = executor.ResumeRun(
            executor_pb2.ResumeRunRequest(project_id=project.project_id, run_id=resume_of)
        )
    async with asyncio.timeout(30):
        return [event async for event in stream]


def safety(events: list[common_pb2.RunEvent], kind: int) -> list[common_pb2.Safety]:
    return [e.safety for e in events if e.type == T.RUN_EVENT_TYPE_SAFETY and e.safety.kind == kind]


async def test_cost_is_recorded_per_message_and_rolled_up_in_history(fleet: Fleet) -> None:
    project = await fleet.project("cost")
    marker = f"[{project.project_id}]"
    await define(project, "stepper", marker)
    fleet.stub.add_script(steps(marker, 1))

    events = await run_to_end(project, "stepper")
    assert events[-1].run_finished.run.status == common_pb2.RUN_STATUS_COMPLETED
    run_id = events[0].run_id
    history = project.history()
    run = (
        await history.GetRun(
            history_pb2.GetRunRequest(project_id=project.project_id, run_id=run_id)
        )
    ).run
    assert run.cost_nanos == 2 * CALL_COST_NANOS
    assert run.cost_total_tree_nanos == 2 * CALL_COST_NANOS
    tree = await history.GetRunTree(
        history_pb2.GetRunTreeRequest(project_id=project.project_id, run_id=run_id)
    )
    assert tree.cost_total_nanos == 2 * CALL_COST_NANOS
    assert tree.nodes[0].cost_nanos == 2 * CALL_COST_NANOS
    stats = await history.GetAgentStats(
        history_pb2.GetAgentStatsRequest(project_id=project.project_id, agent_name="stepper")
    )
    assert stats.stats[0].cost_nanos == 2 * CALL_COST_NANOS
    messages = await history.ListRunMessages(
        history_pb2.ListRunMessagesRequest(project_id=project.project_id, run_id=run_id)
    )
    model_messages = [m for m in messages.messages if m.role == common_pb2.MESSAGE_ROLE_MODEL]
    assert [(m.model_name, m.cost_nanos) for m in model_messages] == [
        ("gemini-e2e", CALL_COST_NANOS)
    ] * 2
    assert all(m.cost_nanos == 0 for m in messages.messages if m not in model_messages)


async def test_budget_warns_then_pauses_and_resumes_once_raised(fleet: Fleet) -> None:
    project = await fleet.project("budget")
    marker = f"[{project.project_id}]"
    await define(project, "stepper", marker)
    fleet.stub.add_script(steps(marker, 3))
    registry = project.registry()
    # 1,100 tokens a call: the warning (at 1,000) after the first, the stop after the second.
    await registry.SetProjectBudget(
        registry_pb2.SetProjectBudgetRequest(
            project_id=project.project_id,
            budget=registry_pb2.ProjectBudget(daily_tokens=2000, warn_fraction=0.5),
        )
    )

    events = await run_to_end(project, "stepper")
    finished = events[-1].run_finished.run
    assert finished.status == common_pb2.RUN_STATUS_PAUSED
    assert finished.total_steps == 2
    (warning,) = safety(events, common_pb2.SAFETY_KIND_BUDGET_WARNING)
    (stop,) = safety(events, common_pb2.SAFETY_KIND_BUDGET_STOP)
    assert "daily_tokens 2200 of 2000" in stop.message
    assert "ResumeRun" in stop.message
    assert "daily_tokens 1100 of 2000" in warning.message
    changed = [e.status_changed for e in events if e.type == T.RUN_EVENT_TYPE_STATUS_CHANGED]
    assert changed[-1].reason == stop.message

    # Still over: a resume pauses again at once, with no model call.
    again = await run_to_end(project, "stepper", resume_of=finished.id)
    assert again[-1].run_finished.run.status == common_pb2.RUN_STATUS_PAUSED
    assert again[-1].run_finished.run.total_steps == 2

    await registry.SetProjectBudget(
        registry_pb2.SetProjectBudgetRequest(
            project_id=project.project_id,
            budget=registry_pb2.ProjectBudget(daily_tokens=100_000),
        )
    )
    resumed = await run_to_end(project, "stepper", resume_of=finished.id)
    assert resumed[-1].run_finished.run.status == common_pb2.RUN_STATUS_COMPLETED
    assert resumed[-1].run_finished.run.total_steps == 4
    usage = (
        await registry.GetProjectBudget(
            registry_pb2.GetProjectBudgetRequest(project_id=project.project_id)
        )
    ).usage
    assert usage.day_tokens == usage.month_tokens == 4 * 1100
    assert usage.day_cost_nanos == 4 * CALL_COST_NANOS


async def test_fallback_model_answers_when_the_primary_keeps_answering_503(fleet: Fleet) -> None:
    project = await fleet.project("fallback")
    marker = f"[{project.project_id}]"
    await define(project, "stepper", marker, fallback_models=["gemini-e2e-fallback"])
    fleet.stub.add_script(
        Script(
            name=f"{marker}primary",
            match_system=marker,
            match_model="gemini-e2e",
            replies=[Reply(error_status=503, error_message="The model is overloaded.")] * 100,
        )
    )
    fleet.stub.add_script(steps(marker, 1, model="gemini-e2e-fallback"))

    events = await run_to_end(project, "stepper")
    assert events[-1].run_finished.run.status == common_pb2.RUN_STATUS_COMPLETED
    assert [e for e in events if e.type == T.RUN_EVENT_TYPE_TOOL_RESPONSE], "the tool did not run"
    switches = safety(events, common_pb2.SAFETY_KIND_MODEL_FALLBACK)
    assert len(switches) == 2  # each step's call went to the fallback
    assert switches[0].details["model"] == "gemini-e2e-fallback"
    assert "gemini-e2e: 503" in switches[0].message
    messages = await project.history().ListRunMessages(
        history_pb2.ListRunMessagesRequest(project_id=project.project_id, run_id=events[0].run_id)
    )
    answered = [m.model_name for m in messages.messages if m.role == common_pb2.MESSAGE_ROLE_MODEL]
    assert answered == ["gemini-e2e-fallback"] * 2
    # The run says which model answered, on its completion event and in GetRun, while its
    # agent still names the definition's model.
    assert events[-1].run_finished.run.model_name == "gemini-e2e-fallback"
    got = await project.history().GetRun(
        history_pb2.GetRunRequest(project_id=project.project_id, run_id=events[0].run_id)
    )
    assert got.run.model_name == "gemini-e2e-fallback"
    assert got.agent.model_name == "gemini-e2e"
    # Priced at the fallback's own rate: $2/M input, $20/M output.
    assert events[-1].run_finished.run.cost_nanos == 2 * 2 * CALL_COST_NANOS


async def test_a_trees_cost_limit_pauses_it_and_a_resume_waits_for_a_raise(fleet: Fleet) -> None:
    project = await fleet.project("treecost")
    marker = f"[{project.project_id}]"
    await define(project, "stepper", marker)
    fleet.stub.add_script(steps(marker, 4))
    request = executor_pb2.StartRunRequest(
        project_id=project.project_id,
        agent_name="stepper",
        input="go",
        max_tree_cost_nanos=2 * CALL_COST_NANOS,
    )
    async with asyncio.timeout(30):
        events = [event async for event in project.executor().StartRun(request)]
    finished = events[-1].run_finished.run
    assert finished.status == common_pb2.RUN_STATUS_PAUSED
    assert finished.total_steps == 2
    assert finished.max_tree_cost_nanos == 2 * CALL_COST_NANOS
    (stop,) = safety(events, common_pb2.SAFETY_KIND_BUDGET_STOP)
    assert stop.details["limit"] == "tree_cost_nanos"
    assert stop.message.startswith("tree cost limit reached: tree_cost $0.004000 of $0.004000")
