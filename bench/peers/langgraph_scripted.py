"""The scripted agent on LangGraph: a custom BaseChatModel answering at once with tool calls,
a model/tools StateGraph (``ToolNode`` + ``tools_condition``), ``AsyncPostgresSaver``
(psycopg pool) on the runner's PostgreSQL, all in this process.

Same shape as ``agentfleet_scripted.py``: ``single`` (one agent, ``--steps`` steps, one tool
call per step; per-step time = gap between consecutive ``tools`` node updates from
``astream``), ``concurrent`` (``--agents`` threads at once, steps/s) and ``fanout`` (``Send``
to ``--children`` child nodes, each one model call).

Persisted per step: LangGraph checkpoints (one per super-step: after the model node and
after the tools node, with their channel blobs and pending writes). The tool is a Python
function returning a dict (no database read, no process hop).

Runs with bench/.peers-venv/bin/python: ``langgraph_scripted.py --url postgresql://... ``.
"""

from __future__ import annotations

import asyncio
import json
import operator
import sys
import time
import uuid
from pathlib import Path
from typing import Annotated, Any, TypedDict

sys.path.insert(0, str(Path(__file__).parent))
import itertools

from _args import parse
from _peerdb import fresh_database
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from langgraph.types import Send
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool


class ScriptedChatModel(BaseChatModel):
    """Asks for ``get_entity`` on every turn but the last (``steps`` model turns in all)."""

    steps: int = 1

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def _reply(self, messages: list[BaseMessage]) -> ChatResult:
        turn = sum(1 for m in messages if isinstance(m, AIMessage))
        if turn >= self.steps - 1:
            message = AIMessage(content="done")
        else:
            message = AIMessage(
                content="",
                tool_calls=[{"name": "get_entity", "args": {"id": f"e{turn}"}, "id": f"c{turn}"}],
            )
        return ChatResult(generations=[ChatGeneration(message=message)])

    def _generate(self, messages: list[BaseMessage], stop: Any = None, **kw: Any) -> ChatResult:
        return self._reply(messages)

    async def _agenerate(
        self, messages: list[BaseMessage], stop: Any = None, **kw: Any
    ) -> ChatResult:
        return self._reply(messages)


@tool
def get_entity(id: str) -> dict[str, Any]:
    """Returns the entity with this id."""
    return {"id": id, "type": "Note", "properties": {"title": "benchmark"}}


def agent_graph(steps: int, saver: AsyncPostgresSaver) -> Any:
    model = ScriptedChatModel(steps=steps)

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
    model = ScriptedChatModel(steps=1)

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


async def run_agent(graph: Any, marks: list[float] | None) -> None:
    config = {"configurable": {"thread_id": str(uuid.uuid4())}, "recursion_limit": 1000}
    last = None
    async for update in graph.astream(
        {"messages": [("user", "go")]}, config, stream_mode="updates"
    ):
        if "tools" in update and marks is not None:
            marks.append(time.perf_counter())
        last = update
    assert last is not None, "no update streamed"
    assert "model" in last, f"run ended oddly: {last}"


async def measure(url: str, args: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"system": "langgraph"}
    async with AsyncConnectionPool(
        url,
        min_size=4,
        max_size=60,
        open=False,
        kwargs={"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row},
    ) as pool:
        saver = AsyncPostgresSaver(pool)
        await saver.setup()
        single = agent_graph(args.steps, saver)
        many = agent_graph(args.concurrent_steps, saver)
        await run_agent(single, None)  # warm-up
        if "single" in args.parts:
            marks: list[float] = []
            began = time.perf_counter()
            await run_agent(single, marks)
            out["single_wall_s"] = time.perf_counter() - began
            out["step_s"] = [b - a for a, b in itertools.pairwise(marks)]
        if "concurrent" in args.parts:
            began = time.perf_counter()
            await asyncio.gather(*(run_agent(many, None) for _ in range(args.agents)))
            elapsed = time.perf_counter() - began
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
                state = await fan.ainvoke({"parts": args.children, "answers": []}, config)
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
        "channel blobs and writes via psycopg; tool is an in-process Python function"
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
