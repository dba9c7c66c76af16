"""The scripted agent on LangGraph: a small BaseChatModel over google-genai calling the shared
stub Gemini server (the runner's, in its own process: the same HTTP round trip as every
system; langchain-google-genai is not installed in the peers venv), a model/tools
StateGraph (``ToolNode`` + ``tools_condition``), ``AsyncPostgresSaver`` (psycopg pool)
on the runner's PostgreSQL, all in this process.

Same shape as ``agentfleet_scripted.py``: ``single`` (one agent, ``--steps`` steps, one tool
call per step; per-step time = gap between consecutive ``tools`` node updates from
``astream``), ``concurrent`` (``--agents`` threads at once, steps/s) and ``fanout`` (``Send``
to ``--children`` child nodes, each one model call). ``--durability sync`` (the headline:
each checkpoint is written before the next step, as agentfleet and ADK await their
commits) or ``async`` (LangGraph's default: written by a background task it does not wait
for).

Persisted per step: LangGraph checkpoints (one per super-step: after the model node and
after the tools node, with their channel blobs and pending writes). The tool is a Python
function returning a dict (no database read, no process hop).

Runs with bench/.peers-venv/bin/python: ``langgraph_scripted.py --url postgresql://... ``.
"""

from __future__ import annotations

import asyncio
import json
import operator
import os
import sys
import time
import uuid
from pathlib import Path
from typing import Annotated, Any, TypedDict

sys.path.insert(0, str(Path(__file__).parent))
import itertools

from _args import parse
from _peerdb import fresh_database
from _procstat import CpuMeter
from _stubctl import answer, install_scripts, stepper, stub_url
from google import genai
from google.genai import types
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from langgraph.types import Send
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool


class StubGeminiChatModel(BaseChatModel):
    """The stub model through google-genai: messages become Gemini contents, the answer's
    function calls become ``tool_calls``."""

    marker: str
    client: Any = None

    @property
    def _llm_type(self) -> str:
        return "gemini-stub"

    def _contents(self, messages: list[BaseMessage]) -> list[types.Content]:
        contents = []
        for m in messages:
            if isinstance(m, AIMessage):
                parts = [types.Part(text=m.content)] if m.content else []
                parts += [
                    types.Part(function_call=types.FunctionCall(name=c["name"], args=c["args"]))
                    for c in m.tool_calls
                ]
                contents.append(types.Content(role="model", parts=parts))
            elif isinstance(m, ToolMessage):
                result = {"result": m.content}
                part = types.Part(
                    function_response=types.FunctionResponse(name=m.name, response=result)
                )
                contents.append(types.Content(role="user", parts=[part]))
            else:
                contents.append(types.Content(role="user", parts=[types.Part(text=m.content)]))
        return contents

    def _generate(self, messages: list[BaseMessage], stop: Any = None, **kw: Any) -> ChatResult:
        raise NotImplementedError("the benchmark is async")

    async def _agenerate(
        self, messages: list[BaseMessage], stop: Any = None, **kw: Any
    ) -> ChatResult:
        answer = await self.client.aio.models.generate_content(
            model="gemini-2.5-flash",
            contents=self._contents(messages),
            config=types.GenerateContentConfig(
                system_instruction=self.marker, tools=[GET_ENTITY_TOOL]
            ),
        )
        calls = [
            {"name": c.name, "args": dict(c.args or {}), "id": f"c{uuid.uuid4().hex[:8]}"}
            for c in answer.function_calls or []
        ]
        text = "" if calls else (answer.text or "")
        message = AIMessage(content=text, tool_calls=calls)
        return ChatResult(generations=[ChatGeneration(message=message)])


GET_ENTITY_TOOL = types.Tool(
    function_declarations=[
        types.FunctionDeclaration(
            name="get_entity",
            description="Returns the entity with this id.",
            parameters=types.Schema(
                type="OBJECT", properties={"id": types.Schema(type="STRING")}, required=["id"]
            ),
        )
    ]
)


def stub_model(marker: str) -> StubGeminiChatModel:
    client = genai.Client(api_key="bench", http_options=types.HttpOptions(base_url=stub_url()))
    return StubGeminiChatModel(marker=marker, client=client)


@tool
def get_entity(id: str) -> dict[str, Any]:
    """Returns the entity with this id."""
    return {"id": id, "type": "Note", "properties": {"title": "benchmark"}}


def agent_graph(marker: str, saver: AsyncPostgresSaver) -> Any:
    model = stub_model(marker)

    async def call_model(state: MessagesState) -> dict[str, Any]:
        return {"messages": [await model.ainvoke(state["messages"])]}

    graph = StateGraph(MessagesState)
    graph.add_node("model", call_model)
    graph.add_node("tools", ToolNode([get_entity]))
    graph.add_edge(START, "model")
    graph.add_conditional_edges("model", tools_condition)
    graph.add_edge("tools", "model")
    return graph.compile(checkpointer=saver)


class FanState(TypedDict):
    parts: int
    answers: Annotated[list[str], operator.add]


class ChildState(TypedDict):
    part: int


def fan_graph(saver: AsyncPostgresSaver) -> Any:
    model = stub_model("[lg-fan-child]")

    async def child(state: ChildState) -> dict[str, Any]:
        reply = await model.ainvoke(f"part {state['part']}")
        return {"answers": [str(reply.content)]}

    def fan_out(state: FanState) -> list[Send]:
        return [Send("child", {"part": i}) for i in range(state["parts"])]

    graph = StateGraph(FanState)
    graph.add_node("child", child)
    graph.add_conditional_edges(START, fan_out, ["child"])
    graph.add_edge("child", END)
    return graph.compile(checkpointer=saver)


async def run_agent(graph: Any, marks: list[float] | None, durability: str) -> None:
    config = {"configurable": {"thread_id": str(uuid.uuid4())}, "recursion_limit": 1000}
    last = None
    async for update in graph.astream(
        {"messages": [("user", "go")]}, config, stream_mode="updates", durability=durability
    ):
        if "tools" in update and marks is not None:
            marks.append(time.perf_counter())
        last = update
    assert last is not None, "no update streamed"
    assert "model" in last, f"run ended oddly: {last}"


async def measure(url: str, args: Any) -> dict[str, Any]:
    ids = [f"e{i}" for i in range(16)]
    install_scripts(
        [
            stepper("[lg-stepper]", args.steps, ids, args.model_delay),
            stepper("[lg-stepper-c]", args.concurrent_steps, ids, args.model_delay),
            answer("[lg-fan-child]"),
        ]
    )
    d = args.durability
    out: dict[str, Any] = {
        "system": f"langgraph ({d})",
        "pool_size": args.pool_size,
        "concurrency": args.agents,
    }
    meter = CpuMeter([os.getpid()])
    async with AsyncConnectionPool(
        url,
        min_size=4,
        max_size=args.pool_size,
        open=False,
        kwargs={"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row},
    ) as pool:
        saver = AsyncPostgresSaver(pool)
        await saver.setup()
        single = agent_graph("[lg-stepper]", saver)
        many = agent_graph("[lg-stepper-c]", saver)
        await run_agent(single, None, d)  # warm-up
        if "single" in args.parts:
            marks: list[float] = []
            began = time.perf_counter()
            await run_agent(single, marks, d)
            out["single_wall_s"] = time.perf_counter() - began
            out["step_s"] = [b - a for a, b in itertools.pairwise(marks)]
            # Every turn but the last called the tool: the stub's script was the one answering.
            assert len(marks) == args.steps - 1, f"{len(marks)} tool steps of {args.steps - 1}"
        if "concurrent" in args.parts:
            meter.start()
            began = time.perf_counter()
            await asyncio.gather(*(run_agent(many, None, d) for _ in range(args.agents)))
            elapsed = time.perf_counter() - began
            out["cpu"] = meter.stop(args.agents * args.concurrent_steps)
            out["concurrent"] = {
                "agents": args.agents,
                "steps_each": args.concurrent_steps,
                "wall_s": elapsed,
                "steps_per_s": args.agents * args.concurrent_steps / elapsed,
            }
        if "fanout" in args.parts:
            fan = fan_graph(saver)

            async def once() -> None:
                config = {"configurable": {"thread_id": str(uuid.uuid4())}}
                state = await fan.ainvoke(
                    {"parts": args.children, "answers": []}, config, durability=d
                )
                assert len(state["answers"]) == args.children, state

            await once()  # warm-up
            walls = []
            for _ in range(args.fanout_repeats):
                began = time.perf_counter()
                await once()
                walls.append(time.perf_counter() - began)
            out["fanout"] = {"children": args.children, "wall_s": walls}
    out["persisted"] = (
        "per step: LangGraph checkpoints (after the model node and after the tools node) with "
        f"channel blobs and writes via psycopg, durability={d!r}; tool is an in-process Python "
        "function; model over HTTP (google-genai) to the stub"
    )
    return out


async def main(argv: list[str] | None = None) -> None:
    args = parse(__doc__, argv)
    async with fresh_database(args.url, "peer_lg") as url:
        out = await measure(url, args)
    print(json.dumps({k: v for k, v in out.items() if k != "step_s"}, indent=1))
    if args.json:
        args.json.write_text(json.dumps(out))


if __name__ == "__main__":
    asyncio.run(main())
