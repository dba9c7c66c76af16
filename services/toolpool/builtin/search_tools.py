"""Built-in search tools: full-text (search_fts) and full-text + trigram (search_hybrid)."""

from __future__ import annotations

from typing import Any

from services.toolpool.builtin.base import ToolContext, builtin_tool, given
from services.toolpool.builtin.schema_parts import MAX_NAME, Schema, limit, string

__all__ = ["SEARCH_TOOLS"]


def _search_arguments(query_description: str) -> dict[str, Schema]:
    return {
        "query": string(query_description, max_length=1000),
        "type": string("Only entities of this type.", max_length=MAX_NAME),
        "limit": limit(20, 100),
    }


@builtin_tool(
    _search_arguments(
        'Words to find; "quoted phrases", OR between alternatives, -word to exclude.'
    ),
    required=("query",),
)
async def search_fts(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    """Full-text search over entity titles, names, summaries, descriptions and content, best
    match first. Exact words only; use search_hybrid when spelling may differ."""
    found = await ctx.repository.search_fts(
        ctx.project_id, args["query"], **given(args, "type", "limit")
    )
    return {"results": [{"score": s.score, "entity": s.object.to_json()} for s in found]}


@builtin_tool(_search_arguments("What to look for, in plain words."), required=("query",))
async def search_hybrid(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    """Search combining full-text ranking with fuzzy (trigram) matching of titles, names and
    descriptions, so misspelt or partial words still match; results fused by reciprocal
    rank, best first."""
    found = await ctx.repository.search_hybrid(
        ctx.project_id, args["query"], **given(args, "type", "limit")
    )
    return {
        "results": [
            {"score": s.score, "matched_by": list(s.matched_by), "entity": s.object.to_json()}
            for s in found
        ]
    }


SEARCH_TOOLS = [search_fts, search_hybrid]
