"""Built-in tools over relationships: create, delete, get_related, graph_traverse.

The dispatcher's relationship types (``blocks``, ``has_session``, ...) can be followed but
never written here: create_subtasks orders tasks, under the DAG lock and cycle check."""

from __future__ import annotations

from typing import Any

from agentfleet.graph import (
    MAX_TRAVERSAL_DEPTH,
    MAX_TRAVERSAL_NODES,
    reserved_relationship_refusal,
)
from services.toolpool.builtin.base import ToolContext, ToolError, builtin_tool, given, refuse
from services.toolpool.builtin.schema_parts import (
    ENTITY_ID,
    MAX_NAME,
    array,
    enum,
    integer,
    limit,
    object_id,
    property_bag,
    string,
)

__all__ = ["RELATIONSHIP_TOOLS"]

RELATIONSHIP_TYPE = string("Relationship type, e.g. cites, part_of.", max_length=MAX_NAME)
DIRECTION = enum(
    "out: edges from the entity; in: edges to it; both (default out).", ["out", "in", "both"]
)
ENDS = {
    "src_id": object_id("Id of the source entity."),
    "dst_id": object_id("Id of the destination entity."),
}
"""The two ends of a relationship, src -> dst."""


@builtin_tool(
    {
        "type": RELATIONSHIP_TYPE,
        **ENDS,
        "properties": property_bag("Properties of the relationship."),
    },
    required=("type", "src_id", "dst_id"),
)
async def create_relationship(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    """Links two entities with a typed, directed relationship src -> dst. Creating one that
    exists returns it (created: false)."""
    refuse(reserved_relationship_refusal(args["type"], "create"))
    relationship, created = await ctx.repository.create_relationship(
        ctx.project_id,
        type=args["type"],
        src_id=args["src_id"],
        dst_id=args["dst_id"],
        properties=args.get("properties"),
    )
    return {"relationship": relationship.to_json(), "created": created}


@builtin_tool({"id": object_id("Relationship id."), "type": RELATIONSHIP_TYPE, **ENDS})
async def delete_relationship(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    """Deletes a relationship, by id or by type, src_id and dst_id."""
    if "id" in args:
        if any(k in args for k in ("type", "src_id", "dst_id")):
            raise ToolError("invalid arguments: id: give either id or type, src_id and dst_id")
        # A relationship's type never changes: checked before, it holds for the delete.
        stored = await ctx.repository.get_relationship(ctx.project_id, args["id"])
        refuse(reserved_relationship_refusal(stored.type, "delete"))
        deleted = await ctx.repository.delete_relationship(ctx.project_id, args["id"])
    else:
        missing = [k for k in ("type", "src_id", "dst_id") if k not in args]
        if missing:
            raise ToolError(f"invalid arguments: {missing[0]}: is required when id is not given")
        refuse(reserved_relationship_refusal(args["type"], "delete"))
        deleted = await ctx.repository.delete_relationship_between(
            ctx.project_id, type=args["type"], src_id=args["src_id"], dst_id=args["dst_id"]
        )
    return {"deleted": deleted.to_json()}


@builtin_tool(
    {"id": ENTITY_ID, "type": RELATIONSHIP_TYPE, "direction": DIRECTION, "limit": limit(100, 1000)},
    required=("id",),
)
async def get_related(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    """Returns the entities one relationship away from an entity, with the relationships,
    oldest first."""
    related = await ctx.repository.get_related(
        ctx.project_id, args["id"], **given(args, "type", "direction", "limit")
    )
    return {
        "related": [
            {
                "direction": r.direction,
                "relationship": r.relationship.to_json(),
                "entity": r.object.to_json(),
            }
            for r in related
        ]
    }


@builtin_tool(
    {
        "start_id": object_id("Entity to start from (depth 0)."),
        "relationship_types": array(
            "Relationship types to follow; all when omitted.", RELATIONSHIP_TYPE, max_items=20
        ),
        "direction": DIRECTION,
        "max_depth": integer(
            f"Most relationships from the start (1-{MAX_TRAVERSAL_DEPTH}, default 2).",
            minimum=1,
            maximum=MAX_TRAVERSAL_DEPTH,
        ),
        "max_nodes": integer(
            f"Most entities returned, start included (1-{MAX_TRAVERSAL_NODES}, default 50).",
            minimum=1,
            maximum=MAX_TRAVERSAL_NODES,
        ),
    },
    required=("start_id",),
)
async def graph_traverse(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    """Breadth-first traversal from an entity: every entity up to max_depth relationships
    away (each with its depth) and the relationships between them. Bounded: truncated is
    true when max_nodes cut it short."""
    traversal = await ctx.repository.traverse(
        ctx.project_id,
        args["start_id"],
        **given(args, "relationship_types", "direction", "max_depth", "max_nodes"),
    )
    return {
        "nodes": [{"depth": n.depth, **n.object.to_json()} for n in traversal.nodes],
        "edges": [
            {"id": e.id, "type": e.type, "src_id": e.src_id, "dst_id": e.dst_id}
            for e in traversal.edges
        ],
        "truncated": traversal.truncated,
    }


RELATIONSHIP_TOOLS = [create_relationship, delete_relationship, get_related, graph_traverse]
