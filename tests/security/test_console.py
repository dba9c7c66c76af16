"""The console against hostile browsers and tenants (issue 34), over HTTP on a real console
process in front of real services: the session cookie's flags, CSRF on every change, the
Content-Security-Policy, and a member who cannot read another project's run by its id."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import httpx
import pytest
import pytest_asyncio

from agentfleet.gemini_stub import Call, Reply, Script
from agentfleet.testing.console import ConsoleFleet, console_fleet
from agentfleet.testing.database import DatabaseFactory
from agentfleet.testing.waiting import wait_for

COOKIE = "agentfleet_console"


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def fleet(
    database_factory: DatabaseFactory, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[ConsoleFleet]:
    async with console_fleet(database_factory, tmp_path_factory.mktemp("console-sec")) as f:
        yield f


@contextlib.asynccontextmanager
async def signed_in(
    fleet: ConsoleFleet, project_id: str, token: str
) -> AsyncIterator[tuple[httpx.AsyncClient, str]]:
    async with httpx.AsyncClient(
        base_url=fleet.url, timeout=30, headers={"origin": fleet.url}
    ) as http:
        reply = await http.post("/api/session", json={"project_id": project_id, "token": token})
        assert reply.status_code == 200, reply.text
        yield http, reply.json()["csrf_token"]


async def a_run(fleet: ConsoleFleet, project_id: str, token: str, answer: str = "done") -> str:
    marker = f"[{project_id}]"
    fleet.stub.add_script(Script(name=marker, match_system=marker, replies=[Reply(text=answer)]))
    await fleet.define(project_id, token, "helper", system_prompt=f"helper {marker}")
    async with signed_in(fleet, project_id, token) as (http, csrf):
        reply = await http.post(
            "/api/runs",
            json={"agent_name": "helper", "input": "hi"},
            headers={"x-csrf-token": csrf},
        )
        assert reply.status_code == 200, reply.text
        return reply.json()["run"]["id"]


async def test_session_cookie_is_httponly_samesite_strict_and_holds_no_token(
    fleet: ConsoleFleet,
) -> None:
    project_id, token = await fleet.project("sec-cookie")
    async with httpx.AsyncClient(base_url=fleet.url, headers={"origin": fleet.url}) as http:
        reply = await http.post("/api/session", json={"project_id": project_id, "token": token})
        assert reply.status_code == 200
        header = reply.headers["set-cookie"]
        attributes = [part.strip().lower() for part in header.split(";")]
        assert "httponly" in attributes
        assert "samesite=strict" in attributes
        assert "path=/" in attributes
        assert token not in header  # the token stays on the server
        assert token not in reply.text
        session_id = reply.cookies[COOKIE]
        assert len(session_id) >= 40


async def test_a_wrong_token_does_not_sign_in(fleet: ConsoleFleet) -> None:
    project_id, _ = await fleet.project("sec-wrong")
    _, other_token = await fleet.project("sec-other")
    async with httpx.AsyncClient(base_url=fleet.url, headers={"origin": fleet.url}) as http:
        for token in ("not-a-token", other_token):
            reply = await http.post("/api/session", json={"project_id": project_id, "token": token})
            assert reply.status_code == 401, reply.text
            assert "set-cookie" not in reply.headers
        reply = await http.post("/api/session", json={"project_id": "", "token": "x"})
        assert reply.status_code == 400
        assert "project_id" in reply.json()["message"]


async def test_every_change_needs_same_origin_json_and_the_csrf_token(
    fleet: ConsoleFleet,
) -> None:
    project_id, token = await fleet.project("sec-csrf")
    run_id = await a_run(fleet, project_id, token)
    async with signed_in(fleet, project_id, token) as (http, csrf):
        path = f"/api/runs/{run_id}/cancel"
        refusals = [
            ({}, {"x-csrf-token": "wrong"}),  # a wrong CSRF token
            ({}, {}),  # none
            ({"origin": "https://evil.example"}, {"x-csrf-token": csrf}),  # another origin
        ]
        for origin, headers in refusals:
            reply = await http.post(path, json={}, headers={**origin, **headers})
            assert reply.status_code == 403, (headers, reply.text)
        # A cross-site form posts urlencoded or text/plain, never JSON: refused, even with
        # the right token (which it could not know).
        reply = await http.post(
            path, content="a=b", headers={"content-type": "text/plain", "x-csrf-token": csrf}
        )
        assert reply.status_code == 403
        no_origin = httpx.AsyncClient(base_url=fleet.url, cookies=http.cookies)
        async with no_origin:
            reply = await no_origin.post(path, json={}, headers={"x-csrf-token": csrf})
            assert reply.status_code == 403
        # Sign-in itself is a change: a cross-site page cannot sign the browser in to the
        # attacker's project (login CSRF).
        reply = await http.post(
            "/api/session",
            json={"project_id": project_id, "token": token},
            headers={"origin": "https://evil.example"},
        )
        assert reply.status_code == 403
        # The same request with the token goes through.
        reply = await http.post(path, json={}, headers={"x-csrf-token": csrf})
        assert reply.status_code in (200, 409), reply.text


async def test_csp_and_framing_headers_on_pages_and_api(fleet: ConsoleFleet) -> None:
    async with httpx.AsyncClient(base_url=fleet.url) as http:
        for path in ("/", "/static/app.js", "/api/session", "/healthz"):
            reply = await http.get(path)
            csp = reply.headers["content-security-policy"]
            directives = {d.split()[0]: d.split()[1:] for d in csp.split("; ")}
            assert directives["default-src"] == ["'none'"]
            assert directives["script-src"] == ["'self'"]  # no 'unsafe-inline', no eval
            assert directives["frame-ancestors"] == ["'none'"]
            assert directives["base-uri"] == ["'none'"]
            assert "'unsafe-inline'" not in csp
            assert "'unsafe-eval'" not in csp
            assert reply.headers["x-frame-options"] == "DENY"
            assert reply.headers["x-content-type-options"] == "nosniff"
            assert reply.headers["referrer-policy"] == "no-referrer"
        page = (await http.get("/")).text
        assert "<script>" not in page
        assert "onload=" not in page
        assert (await http.get("/api/session")).headers["cache-control"] == "no-store"


async def test_a_member_cannot_read_another_projects_run_by_its_id(fleet: ConsoleFleet) -> None:
    owner_project, owner_token = await fleet.project("sec-owner")
    run_id = await a_run(fleet, owner_project, owner_token, answer="the owner's secret answer")
    intruder_project, _ = await fleet.project("sec-intruder")
    member_token = await fleet.token(intruder_project, role="member")
    async with signed_in(fleet, intruder_project, member_token) as (http, csrf):
        for path in (
            f"/api/runs/{run_id}",
            f"/api/runs/{run_id}/tree",
            f"/api/runs/{run_id}/messages",
            f"/api/runs/{run_id}/calls",
        ):
            reply = await http.get(path)
            assert reply.status_code == 404, (path, reply.text)
            assert "secret answer" not in reply.text
        async with http.stream("GET", f"/api/runs/{run_id}/events") as events:
            body = (await events.aread()).decode()
        assert "event: failed" in body
        assert "NOT_FOUND" in body
        assert "secret answer" not in body
        reply = await http.post(
            f"/api/runs/{run_id}/cancel", json={}, headers={"x-csrf-token": csrf}
        )
        assert reply.status_code in (403, 404)
    # A member of the same project may read it but not decide or change agents'.
    member_of_owner = await fleet.token(owner_project, role="member")
    async with signed_in(fleet, owner_project, member_of_owner) as (http, _):

        async def completed() -> bool:
            reply = await http.get(f"/api/runs/{run_id}")
            return reply.json()["run"]["status"] == "RUN_STATUS_COMPLETED"

        await wait_for(completed, "the owner's run to complete")


async def test_sign_out_ends_the_session_on_the_server(fleet: ConsoleFleet) -> None:
    project_id, token = await fleet.project("sec-out")
    async with signed_in(fleet, project_id, token) as (http, csrf):
        stolen = http.cookies[COOKIE]
        reply = await http.request(
            "DELETE", "/api/session", json={}, headers={"x-csrf-token": csrf}
        )
        assert reply.status_code == 200
        assert 'agentfleet_console=""' in reply.headers["set-cookie"] or "max-age=0" in (
            reply.headers["set-cookie"].lower()
        )
    # The old cookie, replayed, opens nothing.
    async with httpx.AsyncClient(base_url=fleet.url, cookies={COOKIE: stolen}) as replay:
        assert (await replay.get("/api/runs")).status_code == 401


async def test_oversized_and_malformed_bodies_are_refused(fleet: ConsoleFleet) -> None:
    project_id, token = await fleet.project("sec-body")
    async with signed_in(fleet, project_id, token) as (http, csrf):
        headers = {"x-csrf-token": csrf, "content-type": "application/json"}
        reply = await http.post("/api/runs", content=b"[" * (2 * 1024 * 1024), headers=headers)
        assert reply.status_code == 413
        reply = await http.post("/api/runs", content=b"{not json", headers=headers)
        assert reply.status_code == 400
        reply = await http.get("/api/runs?page_size=100000")
        assert reply.status_code == 400
        assert "page_size" in reply.json()["message"]
        reply = await http.get("/api/runs?status=bogus")
        assert reply.status_code == 400
        assert "status" in reply.json()["message"]
        reply = await http.get("/api/runs?after=yesterday")
        assert reply.status_code == 400
        assert "after" in reply.json()["message"]


async def test_a_member_cannot_decide_a_waiting_call_an_admin_can(fleet: ConsoleFleet) -> None:
    project_id, admin_token = await fleet.project("sec-decide")
    marker = f"[{project_id}]"
    fleet.stub.add_script(
        Script(
            name=marker,
            match_system=marker,
            replies=[
                Reply(calls=[Call("create_entity", {"type": "Note", "key": "k"})]),
                Reply(text="created"),
            ],
        )
    )
    await fleet.define(
        project_id,
        admin_token,
        "careful",
        system_prompt=f"careful {marker}",
        tools=("create_entity",),
        config={"approvals": {"rules": [{"tools": ["create_entity"], "deadline_s": 3600}]}},
    )
    member_token = await fleet.token(project_id, role="member")
    async with signed_in(fleet, project_id, admin_token) as (admin, admin_csrf):
        started = await admin.post(
            "/api/runs",
            json={"agent_name": "careful", "input": "go"},
            headers={"x-csrf-token": admin_csrf},
        )
        run_id = started.json()["run"]["id"]

        async def waiting() -> list:
            return (await admin.get("/api/approvals")).json()["waiting"]

        (item,) = await wait_for(waiting, "the call to wait for approval")
        call_id = item["tool_call"]["tool_call_id"]
        decision = f"/api/runs/{run_id}/calls/{call_id}/decision"
        async with signed_in(fleet, project_id, member_token) as (member, member_csrf):
            # A member sees the inbox (reads) but its token may not decide.
            assert len((await member.get("/api/approvals")).json()["waiting"]) == 1
            reply = await member.post(
                decision, json={"decision": "approve"}, headers={"x-csrf-token": member_csrf}
            )
            assert reply.status_code == 403, reply.text
            assert reply.json()["code"] == "PERMISSION_DENIED"
            # Another session's CSRF token is no good either.
            reply = await member.post(
                decision, json={"decision": "approve"}, headers={"x-csrf-token": admin_csrf}
            )
            assert reply.status_code == 403
        reply = await admin.post(
            decision, json={"decision": "reject"}, headers={"x-csrf-token": admin_csrf}
        )
        assert reply.status_code == 400  # a rejection needs its reason
        assert "reason" in reply.json()["message"]
        reply = await admin.post(
            decision,
            json={"decision": "approve", "reason": "fine"},
            headers={"x-csrf-token": admin_csrf},
        )
        assert reply.status_code == 200, reply.text
        assert reply.json()["status"] == "TOOL_CALL_STATUS_APPROVED"


async def test_a_host_name_the_console_is_not_served_under_is_refused(
    fleet: ConsoleFleet,
) -> None:
    """DNS rebinding: a hostile page whose name now points at the console sends its own
    name as Host and as Origin; same-origin alone would pass, the Host check does not."""
    project_id, token = await fleet.project("sec-rebind")
    port = fleet.url.rsplit(":", 1)[1]
    rebound = f"http://evil.example:{port}"
    async with httpx.AsyncClient(base_url=fleet.url, timeout=30) as http:
        for path in ("/", "/static/app.js", "/api/session"):
            reply = await http.get(path, headers={"host": f"evil.example:{port}"})
            assert reply.status_code == 421, path
            assert "frame-ancestors 'none'" in reply.headers["content-security-policy"]
        reply = await http.post(
            "/api/session",
            json={"project_id": project_id, "token": token},
            headers={"host": f"evil.example:{port}", "origin": rebound},
        )
        assert reply.status_code == 421
        assert "set-cookie" not in reply.headers
        # Probes reach /healthz by the pod's address; loopback names are the default.
        assert (await http.get("/healthz", headers={"host": "10.1.2.3:8080"})).status_code == 200
        assert (await http.get("/", headers={"host": f"localhost:{port}"})).status_code == 200


async def test_live_views_are_bounded_per_session_and_end_with_it(fleet: ConsoleFleet) -> None:
    project_id, token = await fleet.project("sec-streams")
    marker = f"[{project_id}]"
    fleet.stub.add_script(Script(name=marker, match_system=marker, replies=[Reply(hang=True)]))
    await fleet.define(project_id, token, "sleeper", system_prompt=f"sleeper {marker}")
    async with signed_in(fleet, project_id, token) as (http, csrf):
        started = await http.post(
            "/api/runs",
            json={"agent_name": "sleeper", "input": "wait"},
            headers={"x-csrf-token": csrf},
        )
        path = f"/api/runs/{started.json()['run']['id']}/events"
        async with contextlib.AsyncExitStack() as streams:
            opened = []
            for _ in range(8):  # AGENTFLEET_CONSOLE_MAX_STREAMS' default
                stream = await streams.enter_async_context(http.stream("GET", path))
                assert stream.status_code == 200
                lines = stream.aiter_lines()
                assert await anext(lines) == ": connected"
                opened.append(lines)
            reply = await http.get(path)
            assert reply.status_code == 429
            assert reply.json()["code"] == "RESOURCE_EXHAUSTED"
            # Sign-out ends them all (at the latest at the next keep-alive, 15 s).
            reply = await http.request(
                "DELETE", "/api/session", json={}, headers={"x-csrf-token": csrf}
            )
            assert reply.status_code == 200
            for lines in opened:
                async with asyncio.timeout(30):
                    rest = [line async for line in lines]
                assert "event: end" in rest


async def test_the_started_by_filter_is_checked_and_scoped_to_the_session(
    fleet: ConsoleFleet,
) -> None:
    owner, owner_token = await fleet.project("sec-started")
    run_id = await a_run(fleet, owner, owner_token)
    other, other_token = await fleet.project("sec-started-other")
    async with signed_in(fleet, owner, owner_token) as (http, _):
        reply = await http.get("/api/runs", params={"started_by": "rpc"})
        assert [r["id"] for r in reply.json()["runs"]] == [run_id]
        assert reply.json()["runs"][0]["started_by"] == "rpc"
        assert (await http.get("/api/runs", params={"started_by": "schedule"})).json()["runs"] == []
        for hostile in ("rpc' OR '1'='1", "x" * 41):
            reply = await http.get("/api/runs", params={"started_by": hostile})
            assert reply.status_code == 400, reply.text
            assert "started_by" in reply.json()["message"]
    # Another project's session sees none of the owner's runs, whatever started them.
    async with signed_in(fleet, other, other_token) as (http, _):
        reply = await http.get("/api/runs", params={"started_by": "rpc", "top_level": "false"})
        assert reply.status_code == 200
        assert run_id not in reply.text
