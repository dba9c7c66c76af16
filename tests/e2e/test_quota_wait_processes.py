"""Waiting, not failing, and the run shows it (issue 31): a run whose model answers 429 with
Gemini's RetryInfo waits the retryDelay, and while it waits its events (WatchRun on one
history process) and its row (GetRun on the other) say what for; it then completes.

The fleet of real processes (tests/e2e/conftest.py) retries after 10 ms; the stub's 429
asks for RETRY_S, so the wait is long enough to be seen on a loaded machine, with every
wait bounded by a deadline and none by a sleep.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from agentfleet.gemini_stub import Reply, Script
from agentfleet.llm.limiter.quota import WAIT_SHOWN_AFTER_S
from agentfleet.v1 import common_pb2, executor_pb2, history_pb2
from tests.e2e.conftest import Fleet, Project
from tests.e2e.test_executor_processes import stored_protos

T = common_pb2.RunEventType
RETRY_S = 6
"""The stub's retryDelay: under the executors' ceiling (max_delay_s, 8 s)."""


async def next_event(events: AsyncIterator[common_pb2.RunEvent], type_: int, timeout_s: float):  # type: ignore[no-untyped-def]
    """The stream's next event of ``type_`` (others skipped), within ``timeout_s``."""
    async with asyncio.timeout(timeout_s):
        async for event in events:
            if event.type == type_:
                return event
    raise AssertionError(f"the stream ended before a {T.Name(type_)}")


async def quota_limited_run(
    fleet: Fleet, project: Project, marker: str, *, retry_s: float = RETRY_S
) -> str:
    """A run of an agent whose first model call is answered 429 with a RetryInfo."""
    await project.define("limited", system_prompt=marker)
    fleet.stub.add_script(
        Script(
            name=marker,
            match_system=marker,
            replies=[
                Reply(
                    error_status=429,
                    error_message="Resource has been exhausted",
                    retry_delay_s=retry_s,
                    quota_id="GenerateRequestsPerMinutePerProjectPerModel-FreeTier",
                ),
                Reply(text="done within the quota"),
            ],
        )
    )
    run = await project.executor("executor-a").TriggerRun(
        executor_pb2.StartRunRequest(
            project_id=project.project_id, agent_name="limited", input="go"
        )
    )
    return run.id


async def test_a_429_is_waited_out_and_the_run_shows_the_wait(fleet: Fleet) -> None:
    project = await fleet.project("quota")
    run_id = await quota_limited_run(fleet, project, f"[{project.project_id}-quota]")
    watch = project.history("history-a").WatchRun(
        history_pb2.WatchRunRequest(project_id=project.project_id, run_id=run_id)
    )
    events = aiter(watch)

    started = await next_event(events, T.RUN_EVENT_TYPE_MODEL_QUOTA_WAIT, timeout_s=30)
    wait = started.model_quota_wait
    assert wait.waiting
    assert (wait.model, wait.limit, wait.step) == ("gemini-e2e", "requests_per_minute", 1)
    # The limiter blocks the model's budget for the retryDelay and shows the wait once it
    # has lasted WAIT_SHOWN_AFTER_S, with what is left of it.
    expected_s = wait.expected_wait.ToTimedelta().total_seconds()
    assert RETRY_S - WAIT_SHOWN_AFTER_S - 1 <= expected_s <= RETRY_S
    expected_message = f"waiting for model quota: gemini-e2e, about {round(expected_s)} s"
    assert wait.message == expected_message

    # The other history process reads the same wait from the run's row: still RUNNING.
    during = (
        await project.history("history-b").GetRun(
            history_pb2.GetRunRequest(project_id=project.project_id, run_id=run_id)
        )
    ).run
    assert during.status == common_pb2.RUN_STATUS_RUNNING
    assert during.HasField("waiting_for"), "GetRun during the wait shows no waiting_for"
    assert during.waiting_for.message == expected_message
    assert (during.waiting_for.model, during.waiting_for.limit) == (
        "gemini-e2e",
        "requests_per_minute",
    )
    # Set in the statement that stored the event: the same moment.
    assert during.waiting_for.since == started.create_time
    # Only the first model call was made: the retry waits for the hinted delay.
    assert fleet.stub.used(f"[{project.project_id}-quota]") == 1

    ended = await next_event(events, T.RUN_EVENT_TYPE_MODEL_QUOTA_WAIT, timeout_s=30)
    assert not ended.model_quota_wait.waiting
    assert ended.model_quota_wait.waited.ToTimedelta().total_seconds() >= expected_s - 0.5
    finished = await next_event(events, T.RUN_EVENT_TYPE_RUN_FINISHED, timeout_s=30)
    assert finished.run_finished.run.status == common_pb2.RUN_STATUS_COMPLETED
    assert finished.run_finished.run.summary == "done within the quota"
    assert not finished.run_finished.run.HasField("waiting_for")
    watch.cancel()

    after = (
        await project.history("history-b").GetRun(
            history_pb2.GetRunRequest(project_id=project.project_id, run_id=run_id)
        )
    ).run
    assert not after.HasField("waiting_for")
    stored = await stored_protos(fleet, project.project_id, run_id)
    kinds = [e.type for e in stored]
    assert kinds.count(T.RUN_EVENT_TYPE_MODEL_QUOTA_WAIT) == 2
    # The wait comes between the run's start and its reply.
    assert (
        kinds.index(T.RUN_EVENT_TYPE_RUN_STARTED)
        < kinds.index(T.RUN_EVENT_TYPE_MODEL_QUOTA_WAIT)
        < kinds.index(T.RUN_EVENT_TYPE_MODEL_TEXT)
    )
    assert started in stored
    assert ended in stored


async def test_a_run_cancelled_while_it_waits_ends_the_wait_and_stops(fleet: Fleet) -> None:
    project = await fleet.project("quota-cancel")
    marker = f"[{project.project_id}-quota]"
    run_id = await quota_limited_run(fleet, project, marker, retry_s=8)
    watch = project.history("history-b").WatchRun(
        history_pb2.WatchRunRequest(project_id=project.project_id, run_id=run_id)
    )
    events = aiter(watch)
    await next_event(events, T.RUN_EVENT_TYPE_MODEL_QUOTA_WAIT, timeout_s=30)
    # The other executor takes the cancel; the run's own worker stops its wait.
    await project.executor("executor-b").CancelRun(
        executor_pb2.CancelRunRequest(project_id=project.project_id, run_id=run_id, reason="stop")
    )
    ended = await next_event(events, T.RUN_EVENT_TYPE_MODEL_QUOTA_WAIT, timeout_s=30)
    assert not ended.model_quota_wait.waiting
    finished = await next_event(events, T.RUN_EVENT_TYPE_RUN_FINISHED, timeout_s=30)
    watch.cancel()
    run = finished.run_finished.run
    assert run.status == common_pb2.RUN_STATUS_CANCELLED
    assert not run.HasField("waiting_for")
    # Cut short: the wait ended before its 8 s, and the retry was never sent.
    assert ended.model_quota_wait.waited.ToTimedelta().total_seconds() < 8
    assert fleet.stub.used(marker) == 1
