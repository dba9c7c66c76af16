"""Built-in search tools: full-text (search_fts) and full-text + trigram (search_hybrid)."""

from __future__ import annotations

from typing import Any

from services.toolpool.builtin.base import BuiltinTool, ToolContext
from services.toolpool.builtin.schema_parts import MAX_NAME, limit, obj, string

__all__ = ["SEARCH_TOOLS"]


async def search_fts(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    found = await ctx.repository.search_fts(
        ctx.project_id, args["query"], type=args.get("type"), limit=args.get("limit", 20)
    )
    return {"results": [{"score": s.score, "entity": s.object.to_json()} for s in found]}


async def search_hybrid(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    found = await ctx.repository.search_hybrid(
        ctx.project_id, args["query"], type=args.get("type"), limit=args.get("limit", 20)
    )
    return {
        "results": [
            {"score": s.score, "matched_by": list(s.matched_by), "entity": s.object.to_json()}
            for s in found
        ]
    }


def _search_schema(query_description: str) -> dict[str, Any]:
    return obj(
        {
            "query": string(query_description, max_length=1000),
            "type": string("Only entities of this type.", max_length=MAX_NAME),
            "limit": limit(20, 100),
        },
        required=("query",),
    )


SEARCH_TOOLS = [
    BuiltinTool(
        name="search_fts",
        description="Full-text search over entity titles, names, summaries, descriptions and "
        "content, best match first. Exact words only; use search_hybrid when spelling may "
        "differ.",
        schema=_search_schema(
            'Words to find; "quoted phrases", OR between alternatives, -word to exclude.'
        ),
        handler=search_fts,
    ),
    BuiltinTool(
        name="search_hybrid",
        description="Search combining full-text ranking with fuzzy (trigram) matching of "
        "titles, names and descriptions, so misspelt or partial words still match; results "
        "fused by reciprocal rank, best first.",
        schema=_search_schema("What to look for, in plain words."),
        handler=search_hybrid,
    ),
]
