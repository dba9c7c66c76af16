"""Stub-model scripts that play the seed 001 research scenario with the research product,
for the offline model (``agentfleet.gemini_stub``): tests, the bench and ``make run``.

The research-assistant lists the agents, spawns 3 web-browser children and 1
paper-summarizer child at once, saves a ResearchReport with one Source per page the
children cite (CITES relationships), and answers with the report. Web browsers search the
offline web, fetch the best page and report it; the paper summarizer searches the graph.
Every reply is computed from the request (the child's prompt, the tool results it got), so
concurrent children each walk their own conversation.

    for script in research_scripts(child_delay_s=0.5):
        stub.add_script(script)
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Iterator, Mapping
from typing import Any

from agentfleet.gemini_stub import Call, Reply, Script, StubRequest

RESEARCH_ASSISTANT = "You are a research assistant"
WEB_BROWSER = "You are a web research agent"
PAPER_SUMMARIZER = "You analyze academic papers"

TOPIC = (
    "Research the current state of WebAssembly for server-side applications. "
    "Find papers, blog posts, and benchmarks."
)
SUB_TASKS: tuple[tuple[str, str, str], ...] = (
    (
        "web-browser",
        "Academic papers",
        "Search for recent academic papers on WebAssembly runtime performance for server "
        "workloads. Find: title, authors, key findings, benchmarks.",
    ),
    (
        "web-browser",
        "Production case studies",
        "Find production case studies of serverless WebAssembly at the edge: Cloudflare "
        "Workers, Spin. Find: company, use case, performance claims, limitations.",
    ),
    (
        "web-browser",
        "Benchmarks",
        "Search for benchmarks comparing WebAssembly to Docker containers for server "
        "startup, density and throughput.",
    ),
    (
        "paper-summarizer",
        "Papers already in the knowledge graph",
        "Search the knowledge graph for documents about WebAssembly, WASM runtimes or "
        "serverless computing and summarize their findings.",
    ),
)
_SOURCE_LINE = re.compile(r"^- (?P<title>.+?) \| (?P<url>https?://\S+)$", re.MULTILINE)


def research_scripts(*, child_delay_s: float = 0.0) -> list[Script]:
    """The three scripted agents of the research product; children answer after
    ``child_delay_s`` on each of their model calls."""
    return [
        Script(name="research-assistant", match_system=RESEARCH_ASSISTANT, policy=_assistant),
        Script(
            name="web-browser",
            match_system=WEB_BROWSER,
            policy=lambda request: _web_browser(request, child_delay_s),
        ),
        Script(
            name="paper-summarizer",
            match_system=PAPER_SUMMARIZER,
            policy=lambda request: _paper_summarizer(request, child_delay_s),
        ),
    ]


def _assistant(request: StubRequest) -> Reply:
    responses = [r.get("response", {}) for r in request.function_responses()]
    match request.turn:
        case 0:
            return Reply(
                text="First I check which agents this project offers.",
                calls=[Call("list_available_agents", {})],
            )
        case 1:
            tasks = [
                {"agent_name": agent, "description": description, "prompt": prompt}
                for agent, description, prompt in SUB_TASKS
            ]
            return Reply(
                text="Three web searches and one look at the knowledge graph, in parallel.",
                calls=[Call("spawn_agents", {"tasks": tasks})],
            )
        case 2:
            findings = _spawn_results(responses)
            return Reply(
                text="Saving the report.",
                calls=[
                    Call(
                        "create_entity",
                        {
                            "type": "ResearchReport",
                            "properties": {
                                "title": "WebAssembly for Server-Side Applications",
                                "summary": _report(findings),
                                "methodology": f"Parallel research by {len(findings)} agents",
                                "key_findings": [f["description"] for f in findings],
                                "limitations": "Offline corpus; scripted model.",
                            },
                        },
                    )
                ],
            )
        case 3:
            sources = _sources(_spawn_results(responses))
            return Reply(
                text=f"Saving {len(sources)} sources.",
                calls=[
                    Call(
                        "create_entity",
                        {
                            "type": "Source",
                            "properties": {"title": title, "url": url, "type": "web_page"},
                        },
                    )
                    for title, url in sources
                ],
            )
        case 4:
            ids = [e["id"] for e in _created_entities(responses)]
            report, sources = ids[0], ids[1:]
            return Reply(
                text="Linking the report to its sources.",
                calls=[
                    Call("create_relationship", {"type": "CITES", "src_id": report, "dst_id": s})
                    for s in sources
                ],
            )
        case _:
            findings = _spawn_results(responses)
            cited = len(_sources(findings))
            return Reply(
                text=_report(findings)
                + f"\n\nSaved a ResearchReport citing {cited} Source entities to the graph."
            )


def _web_browser(request: StubRequest, delay_s: float) -> Reply:
    responses = [r.get("response", {}) for r in request.function_responses()]
    if request.turn == 0:
        prompt = request.last_user_text() or ""
        return Reply(calls=[Call("web__web_search", {"query": prompt[:300]})], delay_s=delay_s)
    if request.turn == 1:
        urls = _urls(responses[-1]) if responses else []
        if not urls:
            return Reply(text="I found nothing useful for this task.", delay_s=delay_s)
        return Reply(calls=[Call("web__web_fetch", {"url": urls[0]})], delay_s=delay_s)
    page = _find_key(responses[-1], "title") if responses else None
    urls = _urls(responses[-1]) if responses else []
    if page is None or not urls:
        return Reply(text="The page could not be read; nothing useful found.", delay_s=delay_s)
    text = str(_find_key(responses[-1], "text") or "")
    # MCP text content carries the page as JSON; its own "text" is the article.
    with contextlib.suppress(ValueError):
        article = json.loads(text)
        if isinstance(article, dict):
            text = str(article.get("text", text))
    findings = ". ".join(text.split(". ")[:2]).rstrip(".") + "."
    return Reply(
        text=f"Sources:\n- {page} | {urls[0]}\nKey findings: {findings}\nRelevance: 0.9",
        delay_s=delay_s,
    )


def _paper_summarizer(request: StubRequest, delay_s: float) -> Reply:
    if request.turn == 0:
        return Reply(
            calls=[Call("search_hybrid", {"query": "WebAssembly server runtime"})],
            delay_s=delay_s,
        )
    responses = [r.get("response", {}) for r in request.function_responses()]
    titles = [str(t) for t in _all_keys(responses[-1], "title")] if responses else []
    if not titles:
        return Reply(text="The knowledge graph holds no relevant documents.", delay_s=delay_s)
    return Reply(
        text="Documents in the graph: " + "; ".join(titles[:5]) + ".",
        delay_s=delay_s,
    )


def _spawn_results(responses: list[Mapping[str, Any]]) -> list[dict[str, Any]]:
    for response in responses:
        output = response.get("output")
        if isinstance(output, dict) and "results" in output:
            return list(output["results"])
    return []


def _sources(findings: list[dict[str, Any]]) -> list[tuple[str, str]]:
    seen: dict[str, str] = {}
    for finding in findings:
        for match in _SOURCE_LINE.finditer(finding.get("summary", "")):
            seen.setdefault(match["url"], match["title"])
    return [(title, url) for url, title in seen.items()]


def _created_entities(responses: list[Mapping[str, Any]]) -> list[dict[str, Any]]:
    entities = []
    for response in responses:
        output = response.get("output")
        if isinstance(output, dict) and isinstance(output.get("entity"), dict):
            entities.append(output["entity"])
    return entities


def _report(findings: list[dict[str, Any]]) -> str:
    lines = ["# WebAssembly for server-side applications", ""]
    for finding in findings:
        lines.append(f"## {finding.get('description') or finding.get('agent_name')}")
        lines.append(finding.get("summary", ""))
    return "\n".join(lines)


def _urls(value: Any) -> list[str]:
    return re.findall(r"https?://[^\s\"'\\]+", json.dumps(value))


def _find_key(value: Any, key: str) -> Any:
    return next(_all_keys(value, key), None)


def _all_keys(value: Any, key: str) -> Iterator[Any]:
    if isinstance(value, dict):
        if key in value:
            yield value[key]
        for item in value.values():
            yield from _all_keys(item, key)
    elif isinstance(value, list):
        for item in value:
            yield from _all_keys(item, key)
    elif isinstance(value, str) and value.startswith(("{", "[")):
        try:
            yield from _all_keys(json.loads(value), key)
        except ValueError:
            return
