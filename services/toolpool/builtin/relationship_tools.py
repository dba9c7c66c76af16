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
from services.toolpool.builtin.base import BuiltinTool, ToolContext, ToolError
from services.toolpool.builtin.schema_parts import (
    MAX_NAME,
    array,
    enum,
    integer,
    limit,
    obj,
    object_id,
    property_bag,
    string,
)

__all__ = ["RELATIONSHIP_TOOLS"]

RELATIONSHIP_TYPE = string("Relationship type, e.g. cites, part_of.", max_length=MAX_NAME)
DIRECTION = enum(
    "out: edges from the entity; in: edges to it; both (default out).", ["out", "in", "both"]
)


def _refuse_reserved(relationship_type: str, action: str) -> None:
    refusal = reserved_relationship_refusal(relationship_type, action)
    if refusal is not None:
        raise ToolError(refusal)


async def create_relationship(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    _refuse_reserved(args["type"], "create")
    relationship, created = await ctx.repository.create_relationship(
        ctx.project_id,
        type=args["type"],
        src_id=args["src_id"],
        dst_id=args["dst_id"],
        properties=args.get("properties"),
    )
    return {"relationship": relationship.to_json(), "created": created}


async def delete_relationship(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    if "id" in args:
        if any(k in args for k in ("type", "src_id", "dst_id")):
            raise ToolError("invalid arguments: id: give either id or type, src_id and dst_id")
        # A relationship's type never changes: checked before, it holds for the delete.
        stored = await ctx.repository.get_relationship(ctx.project_id, args["id"])
        _refuse_reserved(stored.type, "delete")
        deleted = await ctx.repository.delete_relationship(ctx.project_id, args["id"])
    else:
        missing = [k for k in ("type", "src_id", "dst_id") if k not in args]
        if missing:
            raise ToolError(f"invalid arguments: {missing[0]}: is required when id is not given")
        _refuse_reserved(args["type"], "delete")
        deleted = await ctx.repository.delete_relationship_between(
            ctx.project_id, type=args["type"], src_id=args["src_id"], dst_id=args["dst_id"]
        )
    return {"deleted": deleted.to_json()}


async def get_related(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    related = await ctx.repository.get_related(
        ctx.project_id,
        args["id"],
        type=args.get("type"),
        direction=args.get("direction", "out"),
        limit=args.get("limit", 100),
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


async def graph_traverse(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    traversal = await ctx.repository.traverse(
        ctx.project_id,
        args["start_id"],
        relationship_types=args.get("relationship_types"),
        direction=args.get("direction", "out"),
        max_depth=args.get("max_depth", 2),
        max_nodes=args.get("max_nodes", 50),
    )
    return {
        "nodes": [{"depth": n.depth, **n.object.to_json()} for n in traversal.nodes],
        "edges": [
            {"id": e.id, "type": e.type, "src_id": e.src_id, "dst_id": e.dst_id}
            for e in traversal.edges
        ],
        "truncated": traversal.truncated,
    }


RELATIONSHIP_TOOLS = [
    BuiltinTool(
        name="create_relationship",
        description="Links two entities with a typed, directed relationship src -> dst. "
        "Creating one that exists returns it (created: false).",
        schema=obj(
            {
                "type": RELATIONSHIP_TYPE,
                "src_id": object_id("Id of the source entity."),
                "dst_id": object_id("Id of the destination entity."),
                "properties": property_bag("Properties of the relationship."),
            },
            required=("type", "src_id", "dst_id"),
        ),
        handler=create_relationship,
    ),
    BuiltinTool(
        name="delete_relationship",
        description="Deletes a relationship, by id or by type, src_id and dst_id.",
        schema=obj(
            {
                "id": object_id("Relationship id."),
                "type": RELATIONSHIP_TYPE,
                "src_id": object_id("Id of the source entity."),
                "dst_id": object_id("Id of the destination entity."),
            }
        ),
        handler=delete_relationship,
    ),
    BuiltinTool(
        name="get_related",
        description="Returns the entities one relationship away from an entity, with the "
        "relationships, oldest first.",
        schema=obj(
            {
                "id": object_id("Entity id."),
                "type": RELATIONSHIP_TYPE,
                "direction": DIRECTION,
                "limit": limit(100, 1000),
            },
            required=("id",),
        ),
        handler=get_related,
    ),
    BuiltinTool(
        name="graph_traverse",
        description="Breadth-first traversal from an entity: every entity up to max_depth "
        "relationships away (each with its depth) and the relationships between them. "
        "Bounded: truncated is true when max_nodes cut it short.",
        schema=obj(
            {
                "start_id": object_id("Entity to start from (depth 0)."),
                "relationship_types": array(
                    "Relationship types to follow; all when omitted.",
                    RELATIONSHIP_TYPE,
                    max_items=20,
                ),
                "direction": DIRECTION,
                "max_depth": integer(
                    f"Most relationships from the start (1-{MAX_TRAVERSAL_DEPTH}, default 2).",
                    minimum=1,
                    maximum=MAX_TRAVERSAL_DEPTH,
                ),
                "max_nodes": integer(
                    f"Most entities returned, start included (1-{MAX_TRAVERSAL_NODES}, "
                    "default 50).",
                    minimum=1,
                    maximum=MAX_TRAVERSAL_NODES,
                ),
            },
            required=("start_id",),
        ),
        handler=graph_traverse,
    ),
]
