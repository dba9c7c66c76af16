"""The research demo that ``make run`` plays (seed 001): ingesting the documents starts the
paper-summarizer (its trigger, on_document_ingested), shown live; then a research
assistant lists the project's agents, spawns three web browsers and a paper summarizer in
parallel, and saves a ResearchReport citing its Sources in the knowledge graph.

On the offline stub model the agents are scripted (``examples/products/research/
stub_scripts.py``); with a Gemini key the same product runs on the real model.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import shlex
import sys
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType

from google.protobuf import json_format, struct_pb2
from rich.panel import Panel
from rich.text import Text

from agentfleet.cli.client import Connection
from agentfleet.cli.render import console
from agentfleet.cli.run import follow
from agentfleet.gemini_stub import GeminiStub
from agentfleet.graph import GraphRepository
from agentfleet.postgres.db import create_pool
from agentfleet.v1 import executor_pb2, history_pb2, registry_pb2

DEMO_PROJECT = "demo"
EXAMPLES = Path(__file__).resolve().parents[4] / "examples"
PRODUCT = EXAMPLES / "products" / "research"
# Children answer after this long, so the live tree shows them running side by side.
CHILD_DELAY_S = 0.6
TRIGGER_WAIT_S = 30.0
"""How long the demo waits for the runs its ingested documents trigger to be queued."""


def _stub_scripts() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "agentfleet_demo_scripts", PRODUCT / "stub_scripts.py"
    )
    if spec is None or spec.loader is None:
        raise FileNotFoundError(PRODUCT / "stub_scripts.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


async def run_demo(
    *,
    addresses: Mapping[str, str],
    database_url: str,
    token: str | None,
    stub: GeminiStub | None,
) -> int:
    """Installs the research product, seeds documents, runs the scenario live, and shows
    the report, the run tree and grpcurl commands to explore further. Returns 0 on success."""
    scripts = _stub_scripts()
    if stub is not None:
        for script in scripts.research_scripts(child_delay_s=CHILD_DELAY_S):
            stub.add_script(script)
    conn = Connection(addresses=addresses, token=token, project_id=DEMO_PROJECT)
    pool = await create_pool(database_url, min_size=1, max_size=2)
    try:
        await _install_product(conn)
        graph = GraphRepository(pool)
        if ingested := await _seed_documents(graph):
            await _follow_triggered(conn, ingested)
        console.rule(Text.assemble(("research-assistant", "bold"), f": {scripts.TOPIC}"))
        stream = conn.executor().StartRun(
            executor_pb2.StartRunRequest(
                project_id=DEMO_PROJECT, agent_name="research-assistant", input=scripts.TOPIC
            )
        )
        code = await follow(conn, stream, json_mode=False)
        await _show_report(graph)
        _show_grpcurl(addresses, token)
        return code
    finally:
        await pool.close()
        await conn.close()


async def _install_product(conn: Connection) -> None:
    manifest = json_format.ParseDict(
        json.loads((PRODUCT / "manifest.json").read_text()), struct_pb2.Struct()
    )
    reply = await conn.registry().InstallProduct(
        registry_pb2.InstallProductRequest(project_id=DEMO_PROJECT, manifest=manifest)
    )
    console.print(
        Text.assemble(
            "installed product ",
            (reply.product.name, "bold"),
            f" {reply.product.version} in project {DEMO_PROJECT}",
        )
    )


async def _seed_documents(graph: GraphRepository) -> int:
    """A few documents for the paper summarizer to find, once per project; how many were
    created (each starts the paper-summarizer: its trigger is on_document_ingested)."""
    documents = json.loads((PRODUCT / "documents.json").read_text())
    created = 0
    for document in documents:
        page = await graph.list_objects(
            DEMO_PROJECT, type="Document", filters={"title": document["title"]}, limit=1
        )
        if not page.objects:
            await graph.create_object(DEMO_PROJECT, type="Document", properties=document)
            created += 1
    return created


async def _follow_triggered(conn: Connection, ingested: int) -> None:
    """Shows the runs the ingested documents triggered, live, each to its end."""
    console.rule(
        Text.assemble(
            f"{ingested} documents ingested: ",
            ("on_document_ingested", "bold"),
            " starts the paper-summarizer",
        )
    )
    history = conn.history()
    request = history_pb2.ListRunsRequest(
        project_id=DEMO_PROJECT, agent_name="paper-summarizer", started_by="trigger"
    )
    loop = asyncio.get_running_loop()
    deadline = loop.time() + TRIGGER_WAIT_S
    runs = (await history.ListRuns(request)).runs
    while len(runs) < ingested and loop.time() < deadline:
        await asyncio.sleep(0.1)  # polling a listing: the consumer queues them within ms
        runs = (await history.ListRuns(request)).runs
    for run in reversed(runs):  # oldest first
        watch = history.WatchRun(
            history_pb2.WatchRunRequest(project_id=DEMO_PROJECT, run_id=run.id)
        )
        await follow(conn, watch, json_mode=False)


async def _show_report(graph: GraphRepository) -> None:
    report = None
    cursor = None
    while True:
        page = await graph.list_objects(
            DEMO_PROJECT, type="ResearchReport", cursor=cursor, limit=100
        )
        if page.objects:
            report = page.objects[-1]
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    if report is None:
        console.print(Text("the run saved no ResearchReport to the graph", style="red"))
        return
    cited = await graph.get_related(DEMO_PROJECT, report.id, type="CITES", direction="out")
    sources = "\n".join(
        f"  • {r.object.properties.get('title', '?')}  {r.object.properties.get('url', '')}"
        for r in cited
    )
    findings = "\n".join(f"  • {f}" for f in report.properties.get("key_findings", []))
    body = Text.assemble(
        f"{report.properties.get('methodology', '')}\n{findings}\n\n",
        ("Sources", "bold"),
        f" ({len(cited)} CITES relationships):\n{sources}",
    )
    console.print(
        Panel(
            body,
            title=f"ResearchReport {report.id}: {report.properties.get('title', '')}",
            title_align="left",
        )
    )


def _show_grpcurl(addresses: Mapping[str, str], token: str | None) -> None:
    auth = f"-H {shlex.quote(f'authorization: Bearer {token}')} " if token else ""
    project = json.dumps({"project_id": DEMO_PROJECT})
    tools = Path(sys.executable).parent  # make setup puts grpcurl beside this Python
    lines = [
        f"# grpcurl and agentfleet are in {tools}; in a new shell first:",
        f'export PATH={shlex.quote(str(tools))}:"$PATH"',
        "# every service lists itself over reflection",
        f"grpcurl -plaintext {addresses['executor']} list",
        "# the runs of the demo project",
        f"grpcurl -plaintext {auth}-d '{project}' {addresses['history']} "
        "agentfleet.v1.HistoryService/ListRuns",
        "# the agents the research product installed",
        f"grpcurl -plaintext {auth}-d '{project}' {addresses['executor']} "
        "agentfleet.v1.AgentRegistryService/ListAgentDefinitions",
        "# the tools they may call (built-in, MCP 'web', coordination)",
        f"grpcurl -plaintext {auth}-d '{project}' {addresses['toolpool']} "
        "agentfleet.v1.ToolPoolService/ListTools",
    ]
    console.rule("explore with grpcurl (ready to paste)")
    for line in lines:
        # No wrapping: each command must paste as one line.
        console.print(line, soft_wrap=True)
