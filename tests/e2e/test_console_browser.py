"""The console in a real headless Chromium (issue 34): Playwright drives the distribution's
chromium (/usr/bin/chromium, installed by the fixture when missing and this runs as root)
against a console process in front of real services, on the stub model. The tests marked
``IN_BOTH`` (signing in and the live run page, another project's run by URL, hostile
content) run in Debian's Firefox ESR too, through Playwright's WebDriver BiDi client
(``firefox_bidi_shim.py`` says why it stands between them). The screenshots of
README's "Console" section are taken here: into a temporary directory on an ordinary run, and
into docs/console/ only when ``AGENTFLEET_REFRESH_SCREENSHOTS=1`` asks for them (so a test
run leaves the checkout as it found it)."""

from __future__ import annotations

import os
import re
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio
from playwright.async_api import Browser, Page, async_playwright, expect

from agentfleet.gemini_stub import Call, Reply, Script
from agentfleet.rpc.clients import open_channel
from agentfleet.testing.console import ConsoleFleet, chromium_path, console_fleet, firefox_path
from agentfleet.testing.database import DatabaseFactory
from agentfleet.testing.waiting import wait_for_query
from agentfleet.v1 import common_pb2, triggers_pb2, triggers_pb2_grpc

DOCS_SHOTS = Path(__file__).parents[2] / "docs" / "console"
SHIM = Path(__file__).with_name("firefox_bidi_shim.py")
LIVE_S = 60_000  # ms: how long a run may take to reach what a test waits for (2 busy cores)
IN_BOTH = pytest.mark.parametrize("engine", ["chromium", "firefox"], indirect=True)
"""A test that runs in Chromium and in Firefox (the others run in Chromium only)."""


@pytest.fixture(scope="module")
def engine(request: pytest.FixtureRequest) -> str:
    return getattr(request, "param", "chromium")


@pytest.fixture(scope="module")
def screenshot_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """docs/console/ only when asked to refresh the screenshots; a temporary one otherwise."""
    if os.environ.get("AGENTFLEET_REFRESH_SCREENSHOTS") == "1":
        return DOCS_SHOTS
    return tmp_path_factory.mktemp("console-screenshots")


@pytest.fixture
def shots(engine: str, screenshot_dir: Path, tmp_path: Path) -> Path:
    """Where a test's screenshots go: README's are Chromium's."""
    return screenshot_dir if engine == "chromium" else tmp_path


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def fleet(
    database_factory: DatabaseFactory, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[ConsoleFleet]:
    async with console_fleet(database_factory, tmp_path_factory.mktemp("console-ui")) as f:
        yield f


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def browser(engine: str, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Browser]:
    found = chromium_path() if engine == "chromium" else firefox_path()
    if isinstance(found, str):
        pytest.skip(found)
    async with async_playwright() as playwright:
        if engine == "chromium":
            # --no-sandbox: CI runs as root, where Chromium's sandbox cannot start.
            launched = await playwright.chromium.launch(
                executable_path=str(found), headless=True, args=["--no-sandbox"]
            )
        else:
            # Playwright launches an executable: this one runs the shim in front of Firefox.
            wrapper = tmp_path_factory.mktemp("firefox") / "firefox"
            wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{SHIM}" "{found}" "$@"\n')
            wrapper.chmod(0o755)
            launched = await playwright.firefox.launch(
                channel="moz-firefox", executable_path=str(wrapper), headless=True
            )
        yield launched
        await launched.close()


@pytest_asyncio.fixture(loop_scope="session")
async def page(browser: Browser) -> AsyncIterator[Page]:
    context = await browser.new_context(viewport={"width": 1280, "height": 900})
    opened = await context.new_page()
    errors: list[str] = []
    # Firefox reports a CSP refusal as a page error too.
    opened.on(
        "pageerror", lambda exc: errors.extend([] if PLAYWRIGHT_PROBE in str(exc) else [str(exc)])
    )
    # Any dialog (alert from injected script) fails the test that caused it; so does anything
    # of the console's own that its CSP refused (the page must work under its policy).
    opened.on("dialog", lambda dialog: errors.append(f"dialog: {dialog.message}"))
    opened.on("console", lambda message: errors.extend(csp_refusals(message.text)))
    yield opened
    await context.close()
    assert not errors, errors


PLAYWRIGHT_PROBE = "sha256-YjaKGiklmzC6wjXA513HAMmzus8VE61XCOT+SmwNZWA="
"""The hash of ``body {}``, the <style> Playwright's screenshots add for a moment to settle
animations: Firefox reports our CSP refusing it. It is the test tool's, not the console's."""


def csp_refusals(text: str) -> list[str]:
    """A console message that says the page's CSP refused something (Chromium's words, then
    Firefox's), unless it is Playwright's own probe."""
    if PLAYWRIGHT_PROBE in text:
        return []
    refused = "Content Security Policy" in text or "settings blocked" in text
    return [text] if refused else []


async def sign_in(page: Page, fleet: ConsoleFleet, project_id: str, token: str) -> None:
    await page.goto(fleet.url)
    await page.get_by_label("Project").fill(project_id)
    await page.get_by_label("Token").fill(token)
    await page.get_by_role("button", name="Sign in").click()
    await expect(page.locator("#who")).to_have_text(f"project {project_id}")


async def start_run(page: Page, agent: str, text: str, labels: str = "") -> str:
    await page.get_by_role("link", name="Start a run").click()
    await page.get_by_label("Agent").fill(agent)
    await page.get_by_label("Input").fill(text)
    await page.get_by_label("Labels").fill(labels)
    await page.get_by_role("button", name="Start").click()
    await expect(page).to_have_url(re.compile(r"#/runs/[0-9a-f-]{36}$"))
    return page.url.rsplit("/", 1)[1]


def status_of(page: Page) -> object:
    return page.get_by_test_id("run-status")


@IN_BOTH
async def test_sign_in_start_a_run_watch_its_tree_open_a_tool_output_sign_out(
    fleet: ConsoleFleet, page: Page, shots: Path
) -> None:
    project_id, token = await fleet.project("ui-tour")
    marker = f"[{project_id}]"
    fleet.stub.add_script(
        Script(
            name=f"lead{marker}",
            match_system=f"lead {marker}",
            replies=[
                Reply(
                    calls=[
                        Call(
                            "spawn_agents",
                            {"tasks": [{"agent_name": "scribe", "prompt": "Write the note"}]},
                        )
                    ]
                ),
                Reply(text="The scribe wrote the note."),
            ],
        )
    )
    fleet.stub.add_script(
        Script(
            name=f"scribe{marker}",
            match_system=f"scribe {marker}",
            replies=[
                Reply(calls=[Call("create_entity", {"type": "Note", "key": "n1"})], delay_s=1.0),
                # A slow MCP tool: the child is seen calling it while the lead waits.
                Reply(calls=[Call("test__slow", {"seconds": 4})]),
                Reply(text="Note n1 written.", delay_s=0.5),
            ],
        )
    )
    await fleet.test_mcp_server(project_id, token)
    await fleet.define(
        project_id, token, "lead", system_prompt=f"lead {marker}", tools=("spawn_agents",)
    )
    await fleet.define(
        project_id,
        token,
        "scribe",
        system_prompt=f"scribe {marker}",
        tools=("create_entity", "test__slow"),
        visibility=common_pb2.VISIBILITY_PROJECT,
    )
    await sign_in(page, fleet, project_id, token)
    run_id = await start_run(page, "lead", "Have the note written.")

    tree = page.get_by_test_id("tree-node")
    # The child appears in the tree while the lead waits for it: the tree grows live, and
    # the lead is shown calling spawn_agents meanwhile.
    await expect(tree).to_have_count(2, timeout=LIVE_S)
    await expect(page.get_by_test_id("now")).to_have_text("calling spawn_agents")
    # The child's own steps show as they happen, from the one WatchRun include_descendants
    # stream (the page reads nothing on a timer, and GetRunTree has no current tool): the
    # child is seen calling its slow tool while the lead still waits, and its events are in
    # the timeline.
    child = tree.nth(1)
    await expect(child.get_by_test_id("node-calling")).to_contain_text(
        "calling test__slow", timeout=LIVE_S
    )
    await expect(page.get_by_test_id("now")).to_have_text("calling spawn_agents")
    timeline = page.locator("[data-testid=event][data-agent=scribe][data-type=tool_request]")
    await expect(timeline).to_have_count(2)
    await expect(tree.first).to_have_attribute("data-status", "completed", timeout=LIVE_S)
    await expect(tree.nth(1)).to_have_attribute("data-status", "completed")
    await expect(page.get_by_test_id("answer")).to_have_text("The scribe wrote the note.")
    await expect(page.get_by_test_id("event").first).to_be_visible()
    await page.screenshot(path=shots / "run-tree.png", full_page=True)

    # The child's create_entity call, in full.
    await tree.nth(1).get_by_role("link", name="scribe").click()
    await expect(page).not_to_have_url(re.compile(run_id))
    row = page.locator("[data-testid=call-row][data-tool=create_entity]")
    await row.get_by_role("button", name="Full content of create_entity").click()
    await expect(page.get_by_test_id("call-input")).to_contain_text('"key": "n1"')
    await expect(page.get_by_test_id("call-output")).not_to_have_text("null")
    await page.screenshot(path=shots / "tool-call.png", full_page=True)

    # The runs list shows the run; sign out ends the session on the server.
    await page.get_by_role("link", name="Runs").click()
    await expect(page.locator(f"[data-run-id='{run_id}']")).to_be_visible()
    await page.get_by_role("button", name="Sign out").click()
    await expect(page.get_by_role("heading", name="Sign in")).to_be_visible()
    reply = await page.request.get(f"{fleet.url}/api/runs")
    assert reply.status == 401
    await page.goto(f"{fleet.url}/#/runs/{run_id}")
    await expect(page.get_by_role("heading", name="Sign in")).to_be_visible()


async def test_approve_a_waiting_call_from_the_inbox(
    fleet: ConsoleFleet, page: Page, shots: Path
) -> None:
    project_id, token = await fleet.project("ui-approve")
    marker = f"[{project_id}]"
    fleet.stub.add_script(
        Script(
            name=marker,
            match_system=marker,
            replies=[
                Reply(calls=[Call("create_entity", {"type": "Note", "key": "careful-1"})]),
                Reply(text="Created after approval."),
            ],
        )
    )
    await fleet.define(
        project_id,
        token,
        "careful",
        system_prompt=f"careful {marker}",
        tools=("create_entity",),
        config={"approvals": {"rules": [{"tools": ["create_entity"], "deadline_s": 3600}]}},
    )
    await sign_in(page, fleet, project_id, token)
    run_id = await start_run(page, "careful", "Create the note, carefully.")
    await expect(page.get_by_test_id("tree-node").first).to_have_attribute(
        "data-status", "waiting", timeout=LIVE_S
    )
    await page.get_by_role("link", name="Approvals").click()
    card = page.locator("[data-testid=approval][data-tool=create_entity]")
    await expect(card).to_be_visible(timeout=LIVE_S)
    await expect(card.get_by_test_id("arguments")).to_contain_text("careful-1")
    await card.get_by_label(re.compile("Reason")).fill("looks right")
    await page.screenshot(path=shots / "approvals.png", full_page=True)
    await card.get_by_role("button", name="Approve").click()
    await expect(page.locator("#flash")).to_have_text("create_entity: approved")
    await page.goto(f"{fleet.url}/#/runs/{run_id}")
    await expect(status_of(page)).to_have_text("completed", timeout=LIVE_S)
    await expect(page.get_by_test_id("answer")).to_have_text("Created after approval.")


async def test_cancel_a_running_run(fleet: ConsoleFleet, page: Page) -> None:
    project_id, token = await fleet.project("ui-cancel")
    marker = f"[{project_id}]"
    fleet.stub.add_script(Script(name=marker, match_system=marker, replies=[Reply(hang=True)]))
    await fleet.define(project_id, token, "sleeper", system_prompt=f"sleeper {marker}")
    await sign_in(page, fleet, project_id, token)
    await start_run(page, "sleeper", "Think forever.")
    await expect(status_of(page)).to_have_text("running", timeout=LIVE_S)
    await page.get_by_role("button", name="Cancel run").click()
    await expect(status_of(page)).to_have_text("cancelled", timeout=LIVE_S)
    await expect(page.get_by_role("button", name="Cancel run")).to_be_disabled()


async def test_a_triggered_run_says_what_started_it_in_its_tree(
    fleet: ConsoleFleet, page: Page
) -> None:
    project_id, token = await fleet.project("ui-trigger")
    marker = f"[{project_id}]"
    fleet.stub.add_script(
        Script(name=f"listener{marker}", match_system=marker, replies=[Reply(text="heard")])
    )
    await fleet.define(
        project_id, token, "listener", system_prompt=f"listener {marker}", trigger="on_event:ping"
    )
    async with open_channel(fleet.stack.addresses["executor"], token=token) as channel:
        await triggers_pb2_grpc.TriggerServiceStub(channel).EmitEvent(
            triggers_pb2.EmitEventRequest(project_id=project_id, name="ping", request_id="ui-1")
        )
    await wait_for_query(
        fleet.pool,
        "SELECT count(*) = 1 FROM kb.agent_runs WHERE project_id = $1 AND status = 'completed'",
        project_id,
    )
    run_id = await fleet.pool.fetchval(
        "SELECT id::text FROM kb.agent_runs WHERE project_id = $1", project_id
    )
    await sign_in(page, fleet, project_id, token)
    await page.goto(f"{fleet.url}/#/runs/{run_id}")
    await expect(page.get_by_test_id("tree-trigger")).to_have_text(
        " started by event on_event:ping", timeout=LIVE_S
    )


@IN_BOTH
async def test_a_member_cannot_open_another_projects_run_by_url(
    fleet: ConsoleFleet, page: Page
) -> None:
    owner, owner_token = await fleet.project("ui-owner")
    marker = f"[{owner}]"
    fleet.stub.add_script(
        Script(name=marker, match_system=marker, replies=[Reply(text="owner-only answer")])
    )
    await fleet.define(owner, owner_token, "helper", system_prompt=f"helper {marker}")
    await sign_in(page, fleet, owner, owner_token)
    run_id = await start_run(page, "helper", "hello")
    await expect(status_of(page)).to_have_text("completed", timeout=LIVE_S)
    await page.get_by_role("button", name="Sign out").click()

    intruder, _ = await fleet.project("ui-intruder")
    await sign_in(page, fleet, intruder, await fleet.token(intruder, role="member"))
    await page.goto(f"{fleet.url}/#/runs/{run_id}")
    await expect(page.get_by_role("heading", name="Run not found")).to_be_visible()
    await expect(page.get_by_test_id("error")).to_contain_text("NOT_FOUND")
    assert "owner-only answer" not in await page.content()


HOSTILE = (
    '<script>window.__pwned = "script"; alert(1)</script>'
    "<img src=x onerror=\"window.__pwned = 'img'; alert(2)\">"
)


@IN_BOTH
async def test_a_hostile_model_answer_is_shown_as_text_and_runs_nothing(
    fleet: ConsoleFleet, page: Page, shots: Path
) -> None:
    project_id, token = await fleet.project("ui-xss")
    marker = f"[{project_id}]"
    fleet.stub.add_script(Script(name=marker, match_system=marker, replies=[Reply(text=HOSTILE)]))
    await fleet.define(project_id, token, "mallory", system_prompt=f"mallory {marker}")
    await sign_in(page, fleet, project_id, token)
    # A hostile input and label too.
    await start_run(page, "mallory", HOSTILE, labels='note=<img src=x onerror="alert(3)">')
    await expect(page.get_by_test_id("labels")).to_have_text('note=<img src=x onerror="alert(3)">')
    await expect(page.get_by_test_id("answer")).to_have_text(HOSTILE, timeout=LIVE_S)
    # The messages list shows the preview of the same text; open it in full as well.
    await page.get_by_test_id("message-row").last.get_by_role("button").click()
    await expect(page.get_by_test_id("message-content")).to_contain_text("<img src=x onerror")
    assert await page.evaluate("window.__pwned") is None
    assert await page.locator("main img").count() == 0
    assert await page.locator("main script").count() == 0
    await page.screenshot(path=shots / "hostile-answer.png")
    # The runs list shows the hostile input's preview, as text too.
    await page.get_by_role("link", name="Runs").click()
    await expect(page.get_by_test_id("run-row").first).to_contain_text("<script>window.__pwned")
    assert await page.locator("main img").count() == 0
    assert await page.evaluate("window.__pwned") is None


DAG = """
title: four tasks
tasks:
  - {key: plan, title: Plan, assigned_agent: worker, max_retries: 0}
  - {key: left, title: Research A, assigned_agent: worker, max_retries: 0, blocked_by: [plan]}
  - {key: right, title: Research B, assigned_agent: worker, max_retries: 0, blocked_by: [plan]}
  - {key: join, title: Write up, assigned_agent: worker, max_retries: 0,
     blocked_by: [left, right]}
"""


async def test_create_a_task_graph_from_a_dag_file_and_watch_it_complete(
    fleet: ConsoleFleet, page: Page, shots: Path, tmp_path: Path
) -> None:
    project_id, token = await fleet.project("ui-dag")
    marker = f"[{project_id}]"
    fleet.stub.add_script(
        Script(name=marker, match_system=marker, policy=lambda _: Reply(text="ok", delay_s=0.5))
    )
    await fleet.define(project_id, token, "worker", system_prompt=f"worker {marker}")
    dag_file = tmp_path / "four.yaml"
    dag_file.write_text(DAG)
    await sign_in(page, fleet, project_id, token)
    await page.get_by_role("link", name="Task graphs").click()
    await page.locator("#dag-file").set_input_files(dag_file)
    await expect(page.get_by_label("or its text")).to_have_value(DAG)
    await page.get_by_role("button", name="Create graph").click()
    await expect(page).to_have_url(re.compile(r"#/graphs/[0-9a-f-]{36}$"))
    nodes = page.get_by_test_id("task-node")
    await expect(nodes).to_have_count(4)
    await expect(page.get_by_test_id("graph-status")).to_have_text("completed", timeout=LIVE_S)
    for key in ("plan", "left", "right", "join"):
        node = page.locator(f"[data-testid=task-node][data-key={key}]")
        await expect(node).to_have_attribute("data-status", "completed")
    # A task's sessions and the run behind it.
    await page.locator("[data-testid=task-node][data-key=join]").click()
    session = page.get_by_test_id("session-row")
    await expect(session).to_have_count(1)
    await expect(session).to_contain_text("worker")
    await page.screenshot(path=shots / "task-graph.png", full_page=True)
    await session.get_by_role("link").click()
    await expect(page.get_by_test_id("answer")).to_have_text("ok")
    # A malformed file is refused naming what is wrong.
    await page.get_by_role("link", name="Task graphs").click()
    await page.get_by_label("or its text").fill("title: x\ntasks: []\n")
    await page.get_by_role("button", name="Create graph").click()
    await expect(page.locator("#flash")).to_contain_text("tasks")


async def test_the_sign_in_link_up_prints_fills_the_form_and_leaves_no_token_in_the_url(
    fleet: ConsoleFleet, page: Page
) -> None:
    project_id, token = await fleet.project("ui-link")
    await page.goto(f"{fleet.url}/#/signin?project={project_id}&token={token}")
    # Filled in, not signed in: a link from someone else signs no one in unasked.
    await expect(page.get_by_label("Project")).to_have_value(project_id)
    await expect(page.get_by_label("Token")).to_have_value(token)
    assert token not in page.url
    assert (await page.request.get(f"{fleet.url}/api/runs")).status == 401
    await page.get_by_role("button", name="Sign in").click()
    await expect(page.locator("#who")).to_have_text(f"project {project_id}")
    await expect(page.get_by_test_id("runs")).to_be_visible()
    assert token not in page.url


async def test_agents_tools_and_stats_pages(fleet: ConsoleFleet, page: Page, shots: Path) -> None:
    project_id, token = await fleet.project("ui-catalog")
    marker = f"[{project_id}]"
    fleet.stub.add_script(
        Script(
            name=marker,
            match_system=marker,
            replies=[
                # Each model call takes 0.4 s at least: the stats page's latency shows it.
                Reply(calls=[Call("test__echo", {"text": "x"})], delay_s=0.4),
                # A JSON-RPC error: the MCP server's health shows it as its last error.
                Reply(calls=[Call("test__refuse", {})], delay_s=0.4),
                Reply(text="hi", delay_s=0.4),
            ],
        )
    )
    await fleet.test_mcp_server(project_id, token)
    await fleet.define(
        project_id,
        token,
        "greeter",
        system_prompt=f"greeter {marker}",
        tools=("create_entity", "test__echo", "test__refuse"),
    )
    await sign_in(page, fleet, project_id, token)
    await start_run(page, "greeter", "hello")
    await expect(status_of(page)).to_have_text("completed", timeout=LIVE_S)
    await page.get_by_role("link", name="Agents & tools").click()
    await expect(page.get_by_test_id("agents")).to_contain_text("greeter")
    await expect(page.get_by_test_id("tools")).to_contain_text("create_entity")
    await expect(page.get_by_test_id("secrets")).to_be_visible()
    # The MCP server with its health and breaker state (McpServer.health).
    server = page.locator("[data-testid=mcp-server][data-name=test]")
    await expect(server).to_have_attribute("data-breaker", "closed")
    await expect(server.get_by_test_id("breaker")).to_have_text("closed")
    await expect(server).to_contain_text("connected")
    await expect(server.get_by_test_id("last-error")).to_have_text(
        re.compile("always answers a protocol error")
    )
    await page.screenshot(path=shots / "catalog.png", full_page=True)
    await page.get_by_role("link", name="Stats").click()
    await expect(page.get_by_test_id("stats")).to_contain_text("greeter")
    # Step and model-call latency (GetAgentStats' percentiles), charted and in the table.
    await expect(page.get_by_test_id("step-latency")).to_contain_text("greeter")
    await expect(page.get_by_test_id("model-latency")).to_contain_text("greeter")
    row = page.locator("[data-testid=stats] tr[data-agent=greeter]")
    for cell in ("p50-model", "p50-step"):
        shown = await row.get_by_test_id(cell).text_content() or ""
        assert re.fullmatch(r"\d+\.\d\d s", shown), shown
        assert float(shown.split()[0]) >= 0.4, (cell, shown)
    await page.screenshot(path=shots / "stats.png", full_page=True)


async def test_filter_runs_by_status_agent_and_label(
    fleet: ConsoleFleet, page: Page, shots: Path
) -> None:
    project_id, token = await fleet.project("ui-filter")
    marker = f"[{project_id}]"
    fleet.stub.add_script(
        Script(name=marker, match_system=marker, policy=lambda _: Reply(text="done"))
    )
    await fleet.define(project_id, token, "alpha", system_prompt=f"alpha {marker}")
    await fleet.define(project_id, token, "beta", system_prompt=f"beta {marker}")
    await sign_in(page, fleet, project_id, token)
    nightly = await start_run(page, "alpha", "one", labels="job=nightly, team=ml")
    await expect(page.get_by_test_id("labels")).to_have_text("job=nightly, team=ml")  # sorted
    await expect(status_of(page)).to_have_text("completed", timeout=LIVE_S)
    other = await start_run(page, "beta", "two")
    await expect(status_of(page)).to_have_text("completed", timeout=LIVE_S)
    await page.get_by_role("link", name="Runs").click()
    rows = page.get_by_test_id("run-row")
    await expect(rows).to_have_count(2)
    await page.screenshot(path=shots / "runs.png")
    # By what started them (ListRunsRequest.started_by): the console starts runs by RPC.
    await page.get_by_label("Started by").select_option("schedule")
    await page.get_by_role("button", name="Filter").click()
    await expect(page.get_by_test_id("runs")).to_contain_text("no runs match")
    await page.get_by_label("Started by").select_option("rpc")
    await page.get_by_role("button", name="Filter").click()
    await expect(rows).to_have_count(2)
    await page.get_by_label("Started by").select_option("")
    await page.get_by_label("Labels").fill("job=nightly")
    await page.get_by_role("button", name="Filter").click()
    await expect(rows).to_have_count(1)
    await expect(rows.first).to_have_attribute("data-run-id", nightly)
    await page.get_by_label("Labels").fill("")
    await page.get_by_label("Agent").fill("beta")
    await page.get_by_role("button", name="Filter").click()
    await expect(rows).to_have_count(1)
    await expect(rows.first).to_have_attribute("data-run-id", other)
    await page.get_by_label("Agent").fill("")
    await page.get_by_label("Status").select_option("failed")
    await page.get_by_role("button", name="Filter").click()
    await expect(page.get_by_test_id("runs")).to_contain_text("no runs match")
